"""The capacity axis at a planned concurrency in the hundreds against the emulator, with its load over `load.workers`
processes and the real calibration bound (10 ms): is each step's client latency judged valid?

    .venv/bin/python benchmarks/capacity_scale.py --workers 2                  # planned concurrency 256
    .venv/bin/python benchmarks/capacity_scale.py --workers 1 --json

The emulator (`python -m k3lib.emulator`, demo profile) runs in its own process at `--time-scale` (1: its modelled
decode step of 20 ms + 1 ms a running sequence, so the calibration's known timing, taken from what the long-context
phase measured, is that of a real deployment rather than of a sped-up demo); the kit runs the capacity axis as
its notebook does (`open_axis` + `run_capacity`) with parameters/emulator.yaml and: contract.planned_concurrency,
load.workers, calibration_max_error_ms=10, calibration_server=process, and short steps. The demo engine runs 8
sequences at a time, so past 8 the steps queue (not held): what is judged here is the client's own gate. Not a
test: figures depend on the host and its load (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import k3lib  # noqa: E402
import k3lib.axes.capacity as capacity  # noqa: E402


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--planned", type=int, default=256)
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="folder for the run folder (default: a temporary one)")
    args = ap.parse_args(argv)
    emu = subprocess.Popen([sys.executable, "-m", "k3lib.emulator", "--port", "0", "--time-scale",
                            str(args.time_scale)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        url = (emu.stdout.readline() if emu.stdout else "").split()[-1].rstrip("/")  # first line: its URL
        out = Path(args.out or tempfile.mkdtemp(prefix="k3-capscale-"))
        sets = [f"target.base_url={url}", "target.gpu_metrics.source=dcgm",
                f"target.gpu_metrics.url={url}/_emulator/dcgm/metrics",
                f"contract.planned_concurrency={args.planned}", f"load.workers={args.workers}",
                f"axes.capacity.concurrency_steps=[{','.join(map(str, args.steps))}]",
                "axes.capacity.calibration_max_error_ms=10", "axes.capacity.calibration_server=process",
                "axes.capacity.context_lengths_tokens=[1000]", "axes.capacity.step_duration_s=3",
                "axes.capacity.soak_duration_s=3", "axes.capacity.prompt_tokens=256",
                "axes.capacity.output_tokens=32", "axes.capacity.request_timeout_s=60",
                "axes.capacity.step_max_requests=5000", "target.restart=null"]
        before = load_avg()
        ctx = k3lib.open_axis("capacity", str(ROOT / "parameters" / "emulator.yaml"), sets, str(out / "run"))
        result = capacity.run_capacity(ctx)
        after = load_avg()
    finally:
        emu.terminate()
        emu.wait(timeout=10)
    cal = result.run.get("calibration") or {}
    rows: list[dict[str, Any]] = [
        {k: s.get(k) for k in ("concurrency", "workers", "sent", "ok", "cancelled", "latency_valid", "calibrated_at",
                               "invalid_reason", "loop_lag_p99_ms", "degraded", "held")} for s in result.steps]
    summary = {"load_before": before, "load_after": after, "workers": args.workers, "planned": args.planned,
               "known_timing": {k: cal.get(k) for k in ("known_ttft_ms", "known_itl_ms", "chunks", "basis")},
               "calibration": cal.get("summary"), "steps": rows, "run_folder": str(out / "run")}
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    print(f"load {before} -> {after}; load.workers={args.workers}; planned concurrency {args.planned}; run folder "
          f"{summary['run_folder']}")
    kt = summary["known_timing"]
    print(f"known timing: TTFT {kt['known_ttft_ms']} ms, gap {kt['known_itl_ms']} ms, {kt['chunks']} chunks "
          f"({kt['basis']})")
    for c in cal.get("summary") or []:
        print(f"calibration at {c['concurrency']}: {'valid' if c['valid'] else 'INVALID'} — TTFT error p99 "
              f"{c['ttft_error_ms_p99']}, gap error p99 {c['itl_error_ms_p99']} ms; {c['reason']}")
    print(f"{'concurrency':>11} {'workers':>7} {'sent':>6} {'ok':>6} {'latency valid':>13} {'held':>5}  note")
    for r in rows:
        print(f"{r['concurrency']:>11} {r['workers'] or '-':>7} {r['sent'] or 0:>6} {r['ok'] or 0:>6} "
              f"{str(r['latency_valid']):>13} {str(r['held']):>5}  {r['invalid_reason'] or r['degraded'] or ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
