"""The batch: papermill runs the axis notebooks in order, then the summary; each is rendered to offline HTML.

A failing notebook is kept (papermill writes it) and recorded as that axis' evidence with status `fail` and the
error; the batch goes on. Papermill writes its output repeatedly while a notebook runs, so it writes to a
partial file that is renamed into place and hashed into the manifest only once finished.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Callable, TextIO

from .decision import Decision
from .evidence import EvidenceRecord, Finding
from .params import Params
from .plan import ACCEPTANCE, ACCEPTANCE_SUMMARY
from .report import index_html, render_notebook
from .session import PROJECT_ROOT, read_records
from .summary import decide_run
from .store import RunStore
from .target import pin_target, resolve_target

NOTEBOOKS = PROJECT_ROOT / "notebooks"


@dataclasses.dataclass(frozen=True)
class NotebookOutcome:
    notebook: str
    status: str  # ok | failed | timeout | dead-kernel
    duration_s: float
    error: str | None


class Progress:
    """One line per notebook on stderr: `[2/5] 01_environment   ok    3.1s`."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.n, self.stream = total, 0, stream or sys.stderr

    def start(self, name: str) -> None:
        self.n += 1
        print(f"[{self.n}/{self.total}] {name:<28}", end="", file=self.stream, flush=True)

    def done(self, outcome: NotebookOutcome) -> None:
        print(f" {outcome.status:<11} {outcome.duration_s:6.1f}s", file=self.stream, flush=True)


def execute_notebook(name: str, store: RunStore, *, timeout_s: float) -> NotebookOutcome:
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from traitlets.config import Config

    config = Config()
    config.KernelManager.transport = "ipc"  # local sockets: no "kernel over TCP without encryption" warning

    src = NOTEBOOKS / name
    final = store.path(f"notebooks/{name}")
    partial = store.path(f"notebooks/.{Path(name).stem}.partial.ipynb")
    t0 = time.monotonic()
    status, error = "ok", None
    try:
        pm.execute_notebook(
            str(src), str(partial), kernel_name="python3", cwd=str(NOTEBOOKS), progress_bar=False,
            parameters={"params_file": str(store.path("params.json")), "overrides": [], "run_dir": str(store.root),
                        "interactive": False},
            execution_timeout=timeout_s, interrupt_on_timeout=True, shutdown_kernel="immediate",
            log_output=False, report_mode=False, config=config)
    except pm.PapermillExecutionError as exc:
        status = "timeout" if "CellTimeoutError" in exc.ename or "Interrupt" in exc.ename else "failed"
        error = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except DeadKernelError as exc:
        status, error = "dead-kernel", f"kernel died: {exc}"
    except CellTimeoutError as exc:
        status, error = "timeout", f"cell timed out after {timeout_s}s: {exc}"
    except Exception as exc:  # noqa: BLE001 - one notebook's failure must not stop the batch
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    if partial.exists():
        os.replace(partial, final)
        store.adopt(f"notebooks/{name}")
    return NotebookOutcome(name, status, round(time.monotonic() - t0, 2), error)


def record_failure(store: RunStore, axis: str, outcome: NotebookOutcome) -> None:
    """The axis notebook failed before writing its evidence: record that as a failing axis."""
    if store.path(f"evidence/{axis}.json").exists():
        return
    rec = EvidenceRecord(
        axis=axis, title=axis, status="fail", summary=f"notebook {outcome.notebook} {outcome.status}",
        error=outcome.error,
        findings=[Finding(rule=f"{axis}.notebook", status="fail",
                          message=f"the notebook {outcome.notebook} did not complete: {outcome.error}")],
        attachments=[f"notebooks/{outcome.notebook}"])
    store.write_json(f"evidence/{axis}.json", rec.model_dump(mode="json"))


def run_acceptance(params: Params, store: RunStore, *,
                   progress: Progress | None = None, on_start: Callable[[str], None] | None = None) -> Decision:
    """Run every acceptance notebook against the target (starting the emulator if needed), then decide."""
    target = resolve_target(params)
    if on_start:
        on_start(target.base_url)
    plan = [nb for nb, _ in ACCEPTANCE] + [ACCEPTANCE_SUMMARY]
    progress = progress or Progress(len(plan))
    pages: list[tuple[str, str, str]] = []
    try:
        store.write_json("params.json", pin_target(params, target).public_dict())
        outcomes = {}
        for nb, axis in ACCEPTANCE:
            progress.start(nb)
            outcome = execute_notebook(nb, store, timeout_s=params.run.notebook_timeout_s)
            if outcome.status != "ok":
                record_failure(store, axis, outcome)
            progress.done(outcome)
            outcomes[nb] = outcome
        progress.start(ACCEPTANCE_SUMMARY)
        outcome = execute_notebook(ACCEPTANCE_SUMMARY, store, timeout_s=params.run.notebook_timeout_s)
        progress.done(outcome)
        outcomes[ACCEPTANCE_SUMMARY] = outcome
    finally:
        target.stop()
    records = read_records(store)
    decision_data = store.read_json("decision.json")
    if decision_data is None:  # the summary notebook failed: decide from the same records, same rules
        decision = decide_run(params, store, records)
    else:
        decision = Decision.from_dict(decision_data)
    for nb in plan:
        if store.path(f"notebooks/{nb}").exists():
            rel = render_notebook(store, f"notebooks/{nb}")
            axis = dict(ACCEPTANCE).get(nb)
            rec = records.get(axis) if axis else None
            status = rec.status if rec else ("pass" if outcomes[nb].status == "ok" else "fail")
            pages.append((nb, Path(rel).name, status))
    store.write_text("report/index.html", index_html("k3kit acceptance", decision.to_dict(), pages, store.run_id))
    return decision
