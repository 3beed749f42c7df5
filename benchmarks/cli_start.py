"""Benchmark: how long the `k3` command takes to start, against a bare Python start on the same machine.

    .venv/bin/python benchmarks/cli_start.py              # table on stdout
    .venv/bin/python benchmarks/cli_start.py --repeat 15  # more runs per command (median, min and max shown)

Each command runs in a fresh process, one after another, `--repeat` times; the figure is the median wall time and
its ratio to `python -c pass` measured in the same run (so a loaded machine slows both sides). The goals of the
one-way-layers issue: `k3 --help` within 10× a bare start, `k3 inspect nvidia-smi FILE` within 15×. The artifact
read is one of the repository's own pasted samples when present, else a sample written to a temporary folder.
Not a test: figures depend on the host and its load (printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA H200                    On  |   00000000:19:00.0 Off |                    0 |
| N/A   31C    P0             76W /  700W |       1MiB / 143771MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""


def _k3() -> str:
    exe = Path(sys.executable).with_name("k3")
    if not exe.exists():
        raise SystemExit(f"benchmarks/cli_start.py: {exe} not found: run `make venv` first")
    return str(exe)


def _time(cmd: list[str], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        out.append(time.perf_counter() - t0)
        if done.returncode not in (0, 1):
            raise SystemExit(f"benchmarks/cli_start.py: {' '.join(cmd)} exited {done.returncode}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=9, help="fresh processes per command (default 9)")
    args = ap.parse_args()
    k3 = _k3()
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "nvidia-smi.txt"
        sample.write_text(SAMPLE)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "k3 --help": [k3, "--help"],
            "k3 inspect nvidia-smi FILE": [k3, "inspect", "nvidia-smi", str(sample)],
        }
        goals = {"k3 --help": 10, "k3 inspect nvidia-smi FILE": 15}
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPU(s), "
              f"{args.repeat} fresh processes per command")
        base = None
        print(f"{'command':<30} {'median':>9} {'min':>9} {'max':>9} {'× bare':>8}  goal")
        for name, cmd in commands.items():
            times = _time(cmd, args.repeat)
            med = statistics.median(times)
            base = base or med
            goal = f"≤ {goals[name]}×" if name in goals else ""
            print(f"{name:<30} {med * 1e3:7.0f} ms {min(times) * 1e3:6.0f} ms {max(times) * 1e3:6.0f} ms "
                  f"{med / base:7.1f}×  {goal}")


if __name__ == "__main__":
    main()
