"""Papermill runs a plan's notebooks stage by stage, then the summary; the report is written from what they left.

A failing notebook is kept (papermill writes it) and recorded as that axis' evidence with status `fail` and the
error; the batch goes on. Papermill writes its output repeatedly while a notebook runs, so it writes to a
partial file that is renamed into place and hashed into the manifest only once finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Sequence

from traitlets.config import Config

from ..core._deferred import defer_rfc3987_syntax
from ..core.evidence import EvidenceRecord, Finding, read_records
from ..core.plan import BatchPlan
from ..core.session import PROJECT_ROOT
from ..core.store import RunStore, utc_now
from ..report.index import write_index
from ..report.pages import render_pages
from ..verdict.shapes import DecisionDoc
from . import stop
from .progress import Progress
from .shapes import ManifestEntry

log = logging.getLogger(__name__)

NOTEBOOKS = PROJECT_ROOT / "notebooks"


@dataclasses.dataclass(frozen=True)
class NotebookOutcome:
    notebook: str
    status: str  # ok | failed | timeout | dead-kernel
    duration_s: float
    error: str | None


# What every notebook of both batches imports in its first cells (the figures' plotly and pandas), imported by a
# kernel started ahead while the notebooks before it run; a batch may name more (`run_notebooks(preload=...)`).
PRELOAD: tuple[str, ...] = ("pandas", "plotly.graph_objects", "plotly.io", "k3lib.core.plotting")


def _preload_lines(modules: Sequence[str]) -> tuple[str, ...]:
    """IPython start-up lines importing `modules`, binding no name the notebook could see."""
    return ("for _k3_m in " + repr(tuple(modules)) + ": __import__(_k3_m)", "del _k3_m")


def _kernel_config(sockets: str) -> Any:
    config = Config()
    # Local sockets, no "kernel over TCP without encryption" warning; each kernel gets its own socket folder,
    # since two kernels starting at once in one folder would race for the same socket names.
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = os.path.join(sockets, "kernel")
    return config


@dataclasses.dataclass
class WarmKernel:
    """A kernel started ahead of its notebook (`start_kernel_ahead`), handed to papermill in place of a new one."""

    km: Any  # jupyter_client.AsyncKernelManager, started
    sockets: str

    def discard(self) -> None:
        """Stop a kernel no notebook took (the batch ended early or its start failed half way)."""
        try:
            if self.km.has_kernel:
                asyncio_run(self.km.shutdown_kernel(now=True))
        except Exception as exc:  # noqa: BLE001 - best effort: the process is killed with the batch anyway
            log.debug("a kernel started ahead did not shut down: %s: %s", type(exc).__name__, exc)
        shutil.rmtree(self.sockets, ignore_errors=True)


def asyncio_run(coro: Any) -> Any:
    return asyncio.run(coro)


def start_kernel_ahead(preload: Sequence[str] = PRELOAD) -> WarmKernel:
    """Start a notebook kernel as papermill would (same kernel, folder, IPC sockets and in-memory history), which
    then imports `preload`: run while other notebooks run, it takes the kernel start and those imports (1-3 s
    per notebook on 2 cores) off the next notebook's time."""
    from jupyter_client import AsyncKernelManager  # nbclient's own default manager class

    sockets = tempfile.mkdtemp(prefix="k3-kernel-")
    km = AsyncKernelManager(kernel_name="python3", config=_kernel_config(sockets))
    args = ["--HistoryManager.hist_file=:memory:", *(f"--IPKernelApp.exec_lines={line}" for line in _preload_lines(preload))]

    async def start() -> None:
        await km.start_kernel(extra_arguments=args, cwd=str(NOTEBOOKS))
        kc = km.client()  # the process is up; wait until it answers (its imports done), as nbclient would
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
        finally:
            kc.stop_channels()

    try:
        asyncio_run(start())
    except BaseException:
        WarmKernel(km, sockets).discard()
        raise
    return WarmKernel(km, sockets)


def _handing_over(kernel: WarmKernel) -> type:
    """A kernel manager class for nbclient whose construction returns the started kernel: nbclient then skips the
    start (the kernel is up) and shuts it down and closes its channels after the notebook, as with its own."""
    cls = type(kernel.km)

    class HandedOver(cls):  # type: ignore[valid-type,misc]
        def __new__(cls_, *args: Any, **kwargs: Any) -> Any:
            return kernel.km

    return HandedOver


def _registering(created: list[Any]) -> type:
    """papermill's own kernel manager class, each instance registered with `k3lib.batch.stop` while it lives (so a
    stop reaches a kernel papermill started itself) and listed in `created`."""
    from jupyter_client import AsyncKernelManager

    class Registered(AsyncKernelManager):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            stop.register(self)
            created.append(self)

    return Registered


def _taken(kernel: "Future[WarmKernel] | None", name: str) -> WarmKernel | None:
    """The kernel started ahead for notebook `name`, or None: a start that failed is logged with its reason
    (papermill then starts one the usual way, so the notebook runs, only slower)."""
    if kernel is None:
        return None
    try:
        return kernel.result()
    except Exception as exc:  # noqa: BLE001 - a kernel that could not start ahead: start one the usual way
        log.warning("the kernel started ahead for %s failed (%s: %s); papermill starts one itself",
                    name, type(exc).__name__, exc)
        return None


def execute_notebook(name: str, store: RunStore, *, timeout_s: float,
                     kernel: "Future[WarmKernel] | None" = None) -> NotebookOutcome:
    """Run one notebook with papermill into the run folder. `kernel`: a kernel being started ahead for it; when
    its start failed, papermill starts one as usual. The kernel is registered with `k3lib.batch.stop` while the
    notebook runs, so that a stop interrupts it; a notebook so stopped ends `interrupted`, its partial output left
    beside the run's notebooks, out of the manifest."""
    warm = _taken(kernel, name)
    created: list[Any] = []
    if warm is not None:
        stop.register(warm.km)
        created.append(warm.km)
    sockets = warm.sockets if warm else tempfile.mkdtemp(prefix="k3-kernel-")
    manager = _handing_over(warm) if warm else _registering(created)
    partial = store.path(f"notebooks/.{Path(name).stem}.partial.ipynb")
    t0 = time.monotonic()
    try:
        status, error = _papermill(name, store, partial, sockets, manager, timeout_s)
    finally:
        for km in created:
            stop.unregister(km)
        if warm is not None:
            warm.discard()  # nothing left to stop when nbclient shut it down; the socket folder goes either way
        else:
            shutil.rmtree(sockets, ignore_errors=True)
    if stop.requested():
        return NotebookOutcome(name, "interrupted", round(time.monotonic() - t0, 2), "stopped by the operator")
    if partial.exists():
        store.move_in(partial, f"notebooks/{name}")  # evidence: fsynced, replaced, the folder fsynced, hashed
    return NotebookOutcome(name, status, round(time.monotonic() - t0, 2), error)


def _papermill(name: str, store: RunStore, partial: Path, sockets: str, manager: type, timeout_s: float
               ) -> tuple[str, str | None]:
    """papermill's run of one notebook: (status, error)."""
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    try:
        pm.execute_notebook(
            str(NOTEBOOKS / name), str(partial), kernel_name="python3", cwd=str(NOTEBOOKS), progress_bar=False,
            parameters={"params_file": str(store.path("params.json")), "overrides": [], "run_dir": str(store.root),
                        "interactive": False},
            execution_timeout=timeout_s, interrupt_on_timeout=True, shutdown_kernel="immediate",
            log_output=False, report_mode=False, config=_kernel_config(sockets), kernel_manager_class=manager)
    except pm.PapermillExecutionError as exc:
        status = "timeout" if "CellTimeoutError" in exc.ename or "Interrupt" in exc.ename else "failed"
        return status, f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except DeadKernelError as exc:
        return "dead-kernel", f"kernel died: {exc}"
    except CellTimeoutError as exc:
        return "timeout", f"cell timed out after {timeout_s}s: {exc}"
    except Exception as exc:  # noqa: BLE001 - one notebook's failure must not stop the batch
        return "failed", f"{type(exc).__name__}: {exc}"
    return "ok", None


def record_failure(store: RunStore, axis: str, outcome: NotebookOutcome) -> None:
    """The axis notebook failed before writing its evidence: record that as a failing axis."""
    if store.path(f"evidence/{axis}.json").exists():
        return
    rec = EvidenceRecord(
        axis=axis, title=axis, status="fail", summary=f"notebook {outcome.notebook} {outcome.status}",
        error=outcome.error,
        # missing evidence, not a measured defect: limited observation at most, whatever the axis
        findings=[Finding(rule=f"{axis}.notebook", status="fail",
                          message=f"the notebook {outcome.notebook} did not complete: {outcome.error}")],
        attachments=[f"notebooks/{outcome.notebook}"])
    store.write_json(f"evidence/{axis}.json", rec.model_dump(mode="json"))


def _finished(store: RunStore, nb: str, axis: str | None, manifest: dict[str, ManifestEntry]) -> bool:
    """An axis whose executed notebook and evidence record are both in the manifest and intact."""
    if axis is None:
        return False
    rels = (f"notebooks/{nb}", f"evidence/{axis}.json")
    return all(rel in manifest for rel in rels) and not any(p.split(":")[0] in rels for p in store.verify())


def aborted_folder(store: RunStore) -> str:
    """Where this resume sets aside the attempts a kill or a stop cut: `aborted/<n>`, n one more than the last."""
    seen = [int(p.name) for p in store.path("aborted").glob("*") if p.name.isdigit()]
    return f"aborted/{max(seen, default=0) + 1}"


def set_aside(store: RunStore, nb: str, axis: str | None, under: str) -> list[str]:
    """Before an unfinished axis runs again, what its cut attempt left (its evidence folder and record, its
    notebook, papermill's partial output) moves to `under`, hashed and marked aborted: the new attempt's raw data
    is then the only one the decision and `k3 verify`'s re-judge read, and the cut attempt is kept, not dropped."""
    rels = [f"notebooks/{nb}", f"notebooks/.{Path(nb).stem}.partial.ipynb"]
    if axis is not None:
        rels += [f"evidence/{axis}", f"evidence/{axis}.json"]
    moved = store.set_aside(rels, under)
    if moved:
        store.write_json(f"{under}/{axis or Path(nb).stem}.aborted.json", {
            "aborted": True, "axis": axis, "notebook": nb, "set_aside_at": utc_now(), "files": moved,
            "why": "an attempt cut by a kill or a stop, kept apart: neither the decision nor `k3 verify` reads it; "
                   "the axis ran again from its start (a capacity axis cut in its session phase: from the "
                   "level it was cut in, keeping the copy of what the attempt finished)"})
        log.warning("%s: the cut attempt's %d files are kept apart in %s (aborted)", nb, len(moved), under)
    return moved


def _to_run(store: RunStore, stage: Sequence[tuple[str, str | None]], outcomes: dict[str, NotebookOutcome],
            progress: Progress, manifest: dict[str, ManifestEntry], aside: str) -> list[tuple[str, str | None]]:
    """On a resume, a stage's notebooks still to run: a finished axis is kept (its outcome `kept`), an unfinished
    one's cut attempt set aside first (`set_aside`)."""
    todo = []
    for nb, axis in stage:
        if _finished(store, nb, axis, manifest):
            outcomes[nb] = NotebookOutcome(nb, "kept", 0.0, None)
            progress.done(outcomes[nb], axis_status(store, axis))
        else:
            set_aside(store, nb, axis, aside)
            todo.append((nb, axis))
    return todo


def _run_stage(store: RunStore, todo: Sequence[tuple[str, str | None]], mine: Sequence[Future[WarmKernel]], *,
               timeout_s: float, progress: Progress, start_next: Callable[[], None]) -> dict[str, NotebookOutcome]:
    """One stage's notebooks at the same time (two at most). On an interrupt (SIGINT, SIGTERM: `stop.Stopped`),
    every running kernel is stopped (`stop.halt`) before the interrupt goes on: no notebook is left loading."""
    outcomes: dict[str, NotebookOutcome] = {}
    with ThreadPoolExecutor(max_workers=min(2, len(todo)), thread_name_prefix="k3-notebook") as pool:
        futures = {}
        for i, (nb, axis) in enumerate(todo):
            futures[pool.submit(execute_notebook, nb, store, timeout_s=timeout_s,
                                **({"kernel": mine[i]} if i < len(mine) else {}))] = (nb, axis)
            progress.start(nb, axis)
        try:
            start_next()
            for future in as_completed(futures):
                outcome = future.result()
                nb, axis = futures[future]
                if outcome.status not in ("ok", "interrupted") and axis:
                    record_failure(store, axis, outcome)
                outcomes[outcome.notebook] = outcome
                progress.done(outcome, axis_status(store, axis) if outcome.status == "ok" else None)
        except KeyboardInterrupt:
            stop.halt()
            raise
    return outcomes


def axis_status(store: RunStore, axis: str | None) -> str | None:
    """The status an axis notebook recorded (pass, warn, fail, open…), or None (the summary, an unreadable
    record): a notebook that ran to its end is not `ok` when its checks failed."""
    if axis is None:
        return None
    data = store.read_json(f"evidence/{axis}.json") if store.path(f"evidence/{axis}.json").is_file() else None
    status = data.get("status") if isinstance(data, dict) else None
    return status if isinstance(status, str) else None


def run_notebooks(store: RunStore, stages: Sequence[Sequence[tuple[str, str | None]]], *, timeout_s: float,
                  progress: Progress, resume: bool = False,
                  between: Callable[[str], None] | None = None,
                  preload: Sequence[str] = PRELOAD,
                  prepare: Callable[[], None] | None = None) -> dict[str, NotebookOutcome]:
    """Each stage's notebooks run at the same time (two at most), stages in order. A failing axis notebook is
    recorded as a failing axis and the batch goes on. With `resume`, finished axes are kept, not re-run,
    and what an unfinished one's cut attempt left is set aside first (`set_aside`).
    `between(last_notebook)` runs after each stage (the acceptance batch checks the target there). While a stage
    runs, the kernels of the next one start and import `preload` (`start_kernel_ahead`). `prepare()`, when given,
    runs in this thread while the first stage's kernels start ahead (the review computes its axes there).
    An interrupt stops every running notebook (`k3lib.batch.stop`) and goes on up: the finished ones are kept."""
    defer_rfc3987_syntax()  # papermill imports nbformat, hence jsonschema (see k3lib/core/_deferred.py)
    import papermill  # noqa: F401 - imported once here: threads importing jupyter_client at the same time fail
    from jupyter_client import AsyncKernelManager  # noqa: F401 - ("partially initialized module")

    stop.reset()
    outcomes: dict[str, NotebookOutcome] = {}
    manifest = store.manifest()["files"] if resume else {}
    aside = aborted_folder(store)
    # the next stage's kernels start (and import PRELOAD) while this stage's notebooks run
    ahead = ThreadPoolExecutor(max_workers=2, thread_name_prefix="k3-kernel-ahead")
    kernels: list[Future[WarmKernel]] = []
    unused: list[Future[WarmKernel]] = []
    try:
        if prepare is not None:
            kernels = [ahead.submit(start_kernel_ahead, preload) for _ in stages[0]] if stages else []
            prepare()
        for n, stage in enumerate(stages):
            if between and n:
                between(stages[n - 1][-1][0])
            todo = _to_run(store, stage, outcomes, progress, manifest, aside) if resume else list(stage)
            mine, unused, kernels = kernels[:len(todo)], unused + kernels[len(todo):], []
            if not todo:
                continue

            def start_next(n: int = n) -> None:
                nonlocal kernels
                if n + 1 < len(stages):
                    kernels = [ahead.submit(start_kernel_ahead, preload) for _ in stages[n + 1]]

            outcomes.update(_run_stage(store, todo, mine, timeout_s=timeout_s, progress=progress,
                                       start_next=start_next))
    finally:
        progress.close()
        ahead.shutdown(wait=True)
        for f in unused + kernels:  # kernels no notebook took (a stage of kept notebooks, an error)
            if f.exception() is None:
                f.result().discard()
    return outcomes


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """What a batch's notebooks left: each notebook's outcome, the axis records, and the summary's decision.json
    (None when the summary notebook did not complete: the batch then decides itself from the same records)."""

    plan: BatchPlan
    outcomes: dict[str, NotebookOutcome]
    records: dict[str, EvidenceRecord]
    decision_data: DecisionDoc | None


def run_batch(store: RunStore, plan: BatchPlan, *, timeout_s: float, progress: Progress | None = None,
              resume: bool = False, between: Callable[[str], None] | None = None,
              preload: Sequence[str] = PRELOAD, prepare: Callable[[], None] | None = None) -> BatchResult:
    """Run the plan's notebooks on the run folder (params.json already written), then read the records back.
    `prepare()` runs while the first stage's kernels start (see `run_notebooks`)."""
    progress = progress or Progress(len(plan.notebooks))
    outcomes = run_notebooks(store, plan.all_stages, timeout_s=timeout_s, progress=progress, resume=resume,
                             between=between, preload=preload, prepare=prepare)
    data: DecisionDoc | None = store.read_json("decision.json")
    summary_ok = outcomes[plan.summary].status == "ok"
    return BatchResult(plan, outcomes, read_records(store),
                       data if summary_ok and isinstance(data, dict) else None)


def publish(store: RunStore, result: BatchResult, decision: DecisionDoc) -> str:
    """Every executed notebook to offline HTML, and the index that argues `decision`. Returns the index path."""
    failed = {nb for nb, o in result.outcomes.items() if o.status not in ("ok", "kept")}
    pages = render_pages(store, result.plan.notebooks, result.plan.axes, result.records, failed)
    return write_index(store, result.plan.title, decision, pages, kind=result.plan.kind)
