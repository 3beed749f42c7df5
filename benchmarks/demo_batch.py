"""Benchmark: the whole `make demo` batch (acceptance on the emulator, then the steady renewal review) and where
its time goes — per notebook, kernel start/shutdown, HTML rendering, and running independent notebooks two at a time.

    .venv/bin/python benchmarks/demo_batch.py                 # table on stdout (about 4 minutes on 2 cores)
    .venv/bin/python benchmarks/demo_batch.py --json          # one JSON object
    .venv/bin/python benchmarks/demo_batch.py --modes staged  # only the batch as `make demo` runs it

Each mode runs the same code as `k3 demo`: `k3lib.batch.acceptance.run_acceptance` on `parameters/emulator.yaml`, then
`k3lib.batch.renewal.run_review` on the steady scenario. "staged" is the batch as shipped (the read-only notebooks
of a stage two at a time); "sequential" replaces the stages with one-notebook stages in this process only, so the
difference is what running two at a time saves. The kit's functions are wrapped (never edited) to time each
notebook, each HTML rendering and the emulator's start. The kernel's own cost is a parameters-only notebook run
through the same `execute_notebook` (papermill, IPC sockets, `shutdown_kernel="immediate"`), and again with
papermill's graceful shutdown for comparison. Last, `k3 demo` itself runs once in a fresh process, its exit code
(the acceptance decision's) shown. Not a test: figures depend on the host and its load (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import k3lib.batch.renewal as review_batch
from k3lib.core import plan
from k3lib.report import pages as report
from k3lib.batch import acceptance as runner
from k3lib.batch import execute as batch_execute
from k3lib.core.session import PROJECT_ROOT
from k3lib.core.store import RunStore


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


class Timings:
    """What the wrapped kit functions saw during one batch: (name, start, end) per notebook and per rendering."""

    def __init__(self) -> None:
        self.notebooks: list[dict[str, Any]] = []
        self.renders: list[dict[str, Any]] = []
        self.target_start_s = 0.0
        self._lock = threading.Lock()

    def add(self, kind: str, **row: Any) -> None:
        with self._lock:
            getattr(self, kind).append(row)


@contextmanager
def patched(name: str, owner: Any, replacement: Any) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, old)


@contextmanager
def instrumented(t: Timings, t0: float, sequential: bool) -> Iterator[None]:
    """Wrap the runner's notebook execution, rendering and target start; optionally make every stage a singleton."""
    run_one, render, resolve = batch_execute.execute_notebook, report.render_notebook, runner.resolve_target

    def timed_execute(name: str, store: RunStore, *, timeout_s: float, **kwargs: Any) -> batch_execute.NotebookOutcome:
        start = time.perf_counter()
        out = run_one(name, store, timeout_s=timeout_s, **kwargs)
        t.add("notebooks", notebook=name, status=out.status, start_s=start - t0, end_s=time.perf_counter() - t0,
              duration_s=time.perf_counter() - start, error=out.error)
        return out

    def timed_render(store: RunStore, nb_rel: str) -> str:
        start = time.perf_counter()
        out = render(store, nb_rel)
        t.add("renders", notebook=Path(nb_rel).name, duration_s=time.perf_counter() - start)
        return out

    def timed_resolve(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = resolve(*args, **kwargs)
        t.target_start_s += time.perf_counter() - start
        return out

    singles = lambda stages: tuple((pair,) for stage in stages for pair in stage)
    with (patched("execute_notebook", batch_execute, timed_execute), patched("render_notebook", report, timed_render),
          patched("resolve_target", runner, timed_resolve),
          patched("ACCEPTANCE_STAGES", runner, singles(runner.ACCEPTANCE_STAGES) if sequential
                  else runner.ACCEPTANCE_STAGES),
          patched("REVIEW_STAGES", review_batch, singles(review_batch.REVIEW_STAGES) if sequential
                  else review_batch.REVIEW_STAGES)):
        yield


def run_batch(out_dir: Path, *, sequential: bool, review: bool, acceptance: bool = True) -> dict[str, Any]:
    """One `k3 demo`-equivalent batch; returns its timings."""
    from k3lib.core.params import load_params
    from k3lib.renewal.params import load_review_params

    result: dict[str, Any] = {"mode": "sequential" if sequential else "staged", "load_before": load_avg()}
    for part in [p for p, on in (("acceptance", acceptance), ("review", review)) if on]:
        t = Timings()
        # the runner's own `[i/N] notebook status time` lines, on stderr
        count = len(plan.ACCEPTANCE) if part == "acceptance" else len(review_batch.REVIEW)
        progress = batch_execute.Progress(count + 1)
        print(f"{result['mode']} {part}:", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        with instrumented(t, t0, sequential):
            if part == "acceptance":
                params = load_params([str(PROJECT_ROOT / "parameters" / "emulator.yaml")], [])
                store = RunStore.create(out_dir, label=f"bench-{result['mode']}")
                dec = runner.run_acceptance(params, store, progress=progress)
                decision, reasons = dec.decision, list(dec.reasons)
            else:
                params = load_review_params([str(review_batch.DEMO_PARAMS)], [
                    "review.demo=steady", "review.inputs=null", "review.series=null"])
                store = RunStore.create(out_dir, label=f"bench-review-{result['mode']}")
                rdec = review_batch.run_review(params, store, progress=progress)
                decision, reasons = rdec.decision, list(rdec.reasons)
        total = time.perf_counter() - t0
        for r in t.notebooks:  # papermill's own per-cell clock: the rest of a notebook's time is kernel + papermill
            r["cells_s"] = cells_s(store.path(f"notebooks/{r['notebook']}"))
        nb_span = (max(r["end_s"] for r in t.notebooks) - min(r["start_s"] for r in t.notebooks)
                   if t.notebooks else 0.0)
        render_s = sum(r["duration_s"] for r in t.renders)
        result[part] = {
            "decision": decision, "reasons": reasons, "total_s": total, "target_start_s": t.target_start_s,
            "notebooks": sorted(t.notebooks, key=lambda r: r["start_s"]),
            "notebook_sum_s": sum(r["duration_s"] for r in t.notebooks), "notebook_span_s": nb_span,
            "renders": t.renders, "render_s": render_s,
            "other_s": total - nb_span - render_s - t.target_start_s,
        }
    result["total_s"] = sum(result[p]["total_s"] for p in ("acceptance", "review") if p in result)
    result["load_after"] = load_avg()
    return result


def cells_s(nb_path: Path) -> float | None:
    try:
        nb = json.loads(nb_path.read_text())
    except (OSError, ValueError):
        return None
    return sum(float(c.get("metadata", {}).get("papermill", {}).get("duration") or 0.0) for c in nb["cells"])


EMPTY_NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "id": "params", "metadata": {"tags": ["parameters"]},
               "outputs": [], "source": 'params_file = ""\noverrides = []\nrun_dir = ""\ninteractive = True'}],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                 "language_info": {"name": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def kernel_overhead(out_dir: Path, repeat: int) -> dict[str, Any]:
    """A parameters-only notebook through the runner's own `execute_notebook`: papermill + kernel start + the
    immediate shutdown; then the same with papermill's graceful shutdown, which is what "immediate" saves."""
    import papermill as pm

    nb_dir = out_dir / "empty-nb"
    nb_dir.mkdir(parents=True, exist_ok=True)
    (nb_dir / "empty.ipynb").write_text(json.dumps(EMPTY_NOTEBOOK))
    store = RunStore.create(out_dir, label="bench-empty")
    store.write_json("params.json", {})
    real_pm_execute = pm.execute_notebook
    res: dict[str, Any] = {"load_before": load_avg()}
    for shutdown in ("immediate", "graceful"):
        def execute(*args: Any, shutdown: str = shutdown, **kwargs: Any) -> Any:
            kwargs["shutdown_kernel"] = shutdown
            return real_pm_execute(*args, **kwargs)

        times, render_times = [], []
        with patched("NOTEBOOKS", batch_execute, nb_dir), patched("execute_notebook", pm, execute):
            batch_execute.execute_notebook("empty.ipynb", store, timeout_s=60)  # warm the imports and the kernelspec
            report.render_notebook(store, "notebooks/empty.ipynb")  # and nbconvert's templates
            for _ in range(repeat):
                t0 = time.perf_counter()
                out = batch_execute.execute_notebook("empty.ipynb", store, timeout_s=60)
                times.append(time.perf_counter() - t0)
                if out.status != "ok":
                    raise RuntimeError(f"empty notebook failed: {out.error}")
                if shutdown == "immediate":
                    t0 = time.perf_counter()
                    report.render_notebook(store, "notebooks/empty.ipynb")
                    render_times.append(time.perf_counter() - t0)
        res[shutdown] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                         "runs": len(times)}
        if render_times:
            res["render_empty_median_s"] = statistics.median(render_times)
    res["load_after"] = load_avg()
    return res


def cli_demo(out_dir: Path) -> dict[str, Any]:
    """`k3 demo` exactly as `make demo` runs it (a fresh process: interpreter start and imports included)."""
    k3 = Path(sys.executable).with_name("k3")
    cmd = [str(k3) if k3.exists() else sys.executable, *([] if k3.exists() else ["-m", "k3lib.cli.main"]),
           "demo", "--out", str(out_dir / "cli")]
    before = load_avg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return {"command": "k3 demo", "exit_code": proc.returncode, "total_s": time.perf_counter() - t0,
            "progress": [ln for ln in proc.stderr.splitlines() if ln.startswith("[")],
            "load_before": before, "load_after": load_avg()}


def print_table(out: dict[str, Any]) -> None:
    print(f"host: {out['host']}")
    k = out.get("kernel")
    if k:
        print(f"\nkernel overhead (parameters-only notebook, batch.execute.execute_notebook, median of "
              f"{k['immediate']['runs']}; load {k['load_before']} -> {k['load_after']})")
        for mode in ("immediate", "graceful"):
            r = k[mode]
            print(f"  shutdown_kernel={mode:<10} {r['median_s']:6.2f} s  (min {r['min_s']:.2f}, max {r['max_s']:.2f})")
        print(f"  HTML of that notebook      {k['render_empty_median_s']:6.2f} s")
    for b in out["batches"]:
        print(f"\nmode {b['mode']}: total {b['total_s']:.1f} s; load {b['load_before']} -> {b['load_after']}")
        for part in ("acceptance", "review"):
            if part not in b:
                continue
            p = b[part]
            print(f"  {part}: {p['total_s']:.1f} s, decision {p['decision']} = notebooks {p['notebook_span_s']:.1f} s "
                  f"wall (sum {p['notebook_sum_s']:.1f} s) + HTML {p['render_s']:.1f} s + target start "
                  f"{p['target_start_s']:.1f} s + other {p['other_s']:.1f} s")
            print(f"    {'notebook':<28} {'status':<8} {'start s':>8} {'time s':>7} {'cells s':>8} {'kernel+pm s':>12} "
                  f"{'HTML s':>7}")
            if part == "acceptance" and p["decision"] != "production" and p.get("reasons"):
                print(f"    (not production: {'; '.join(p['reasons'])[:300]})")
            renders = {r["notebook"]: r["duration_s"] for r in p["renders"]}
            for r in p["notebooks"]:
                cells = r.get("cells_s")
                print(f"    {r['notebook']:<28} {r['status']:<8} {r['start_s']:8.1f} {r['duration_s']:7.1f} "
                      + (f"{cells:8.1f} {r['duration_s'] - cells:12.1f}" if cells is not None
                         else f"{'-':>8} {'-':>12}")
                      + f" {renders.get(r['notebook'], 0.0):7.2f}")
            over = [r["duration_s"] - r["cells_s"] for r in p["notebooks"] if r.get("cells_s") is not None]
            if over:
                print(f"    kernel + papermill outside the cells: {sum(over):.1f} s in all, "
                      f"{statistics.median(over):.2f} s median per notebook")
    if out.get("cli"):
        c = out["cli"]
        print(f"\n`k3 demo` in a fresh process (acceptance + steady review): {c['total_s']:.1f} s, exit "
              f"{c['exit_code']}; load {c['load_before']} -> {c['load_after']}")
    totals: dict[str, dict[str, list[float]]] = {}
    for b in out["batches"]:
        for part in ("acceptance", "review"):
            if part in b:
                totals.setdefault(b["mode"], {}).setdefault(part, []).append(b[part]["total_s"])
    if {"staged", "sequential"} <= totals.keys():
        print("\ntwo at a time vs one at a time (median of each mode's runs):")
        for part in totals["staged"]:
            s_, q_ = statistics.median(totals["staged"][part]), statistics.median(totals["sequential"][part])
            print(f"  {part:<10} staged {s_:6.1f} s, sequential {q_:6.1f} s: saves {q_ - s_:5.1f} s "
                  f"({(q_ - s_) / q_:.0%})"
                  f"  [runs: {', '.join(f'{x:.1f}' for x in totals['staged'][part])} vs "
                  f"{', '.join(f'{x:.1f}' for x in totals['sequential'][part])}]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--modes", nargs="+", choices=("staged", "sequential"), default=["staged", "sequential"])
    ap.add_argument("--no-review", action="store_true", help="the acceptance batch only")
    ap.add_argument("--no-acceptance", action="store_true", help="the steady review batch only")
    ap.add_argument("--kernel-repeat", type=int, default=5, help="empty-notebook runs per shutdown mode (0: skip)")
    ap.add_argument("--repeat", type=int, default=1, help="run each mode this many times, alternating")
    ap.add_argument("--no-cli", action="store_true", help="skip timing `k3 demo` itself in a fresh process")
    ap.add_argument("--keep", metavar="DIR", help="write the runs under DIR instead of a temporary folder")
    args = ap.parse_args(argv)

    out: dict[str, Any] = {"host": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                                    "python": platform.python_version(), "load": load_avg()}, "batches": []}
    with tempfile.TemporaryDirectory(prefix="k3-bench-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        if args.kernel_repeat:
            out["kernel"] = kernel_overhead(root, args.kernel_repeat)
        for _ in range(args.repeat):  # modes alternate, so a change in the host's load falls on both
            for mode in args.modes:
                out["batches"].append(run_batch(root, sequential=mode == "sequential", review=not args.no_review,
                                                acceptance=not args.no_acceptance))
        if not args.no_cli and not args.no_review and not args.no_acceptance:
            out["cli"] = cli_demo(root)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
