"""Time the three-week renewal analysis from a history file and from a Prometheus server holding the same data.

    .venv/bin/python benchmarks/renewal_analysis.py [--scenario steady] [--repeat 5]

Prints the median wall time of: generating the demo, reading the history file onto the grid, the six-axis analysis,
the backfill (promtool) and the same read through Prometheus range queries (skipped without promtool/prometheus).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from k3lib.renewal import demo
from k3lib.renewal.params import load_review_params
from k3lib.renewal.review import analyse, load_review


def _median_s(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="steady", choices=demo.SCENARIOS)
    ap.add_argument("--repeat", type=int, default=5)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t_gen, paths = _median_s(lambda: demo.generate(ns.scenario, root / "inputs"), 1)
        params = load_review_params([paths["params"]])
        size_mb = paths["history"].stat().st_size / 1e6
        t_load, data = _median_s(lambda: load_review(params), ns.repeat)
        t_axes, axes = _median_s(lambda: analyse(data), ns.repeat)
        print(f"scenario {ns.scenario}: {len(data.frame)} slots of {data.grid.step_s:g} s, {data.gpus} GPUs, "
              f"{len(data.tasks)} task rows, history {size_mb:.1f} MB")
        print(f"generate demo            {t_gen:7.3f} s")
        print(f"file: read + grid        {t_load:7.3f} s (median of {ns.repeat})")
        print(f"analysis (six axes)      {t_axes:7.3f} s (median of {ns.repeat})")
        print(f"file total               {t_load + t_axes:7.3f} s")
        if not (shutil.which("promtool") and shutil.which("prometheus")):
            print("prometheus: skipped (promtool/prometheus not on PATH)")
            return
        t0 = time.perf_counter()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                        str(paths["history"]), str(root / "data")], check=True, capture_output=True)
        t_fill = time.perf_counter() - t0
        (root / "prom.yml").write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
        port = _free_port()
        proc = subprocess.Popen(["prometheus", f"--config.file={root / 'prom.yml'}",
                                 f"--storage.tsdb.path={root / 'data'}", "--storage.tsdb.retention.time=3650d",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            t0 = time.perf_counter()
            while True:
                try:
                    if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            t_ready = time.perf_counter() - t0
            pparams = load_review_params([paths["params"]], ["review.series.history_file=null",
                                                             f"review.series.prometheus_url={url}"])
            t_pload, pdata = _median_s(lambda: load_review(pparams), ns.repeat)
            t_paxes, paxes = _median_s(lambda: analyse(pdata), ns.repeat)
            print(f"promtool backfill        {t_fill:7.3f} s")
            print(f"prometheus ready         {t_ready:7.3f} s")
            print(f"prometheus: query + grid {t_pload:7.3f} s (median of {ns.repeat})")
            print(f"analysis (six axes)      {t_paxes:7.3f} s (median of {ns.repeat})")
            print(f"prometheus total         {t_pload + t_paxes:7.3f} s")
            print(f"same analysis as file:   {paxes == axes}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
