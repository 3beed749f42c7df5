"""`k3 import cur` at a real monthly size: a CUR 2.0 Parquet of N lines (default 5,000,000: hourly lines of a few
thousand resources over a month, 22 columns of which the import needs 16) imported through the command line in a
child process, against a bare pyarrow aggregation of the same columns in the same run.

    nice .venv/bin/python benchmarks/import_scale.py [--rows 5000000] [--keep DIR]

Prints the file's size, the bare aggregation's time, the import's time (from the command's start to costs.yaml
written; the child's whole wall time, interpreter and k3lib's modules included, beside it) and its peak memory (the
child's ru_maxrss, all included), and checks the two bounds of issue 45: peak memory <= 1 GB and the import's time
<= 15x the bare aggregation. Exit 1 when a bound is not held.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

START = dt.datetime(2026, 7, 20, tzinfo=dt.timezone.utc)
WINDOW = "2026-07-24T00:00:00Z/2026-08-14T00:00:00Z"
CODES = np.array(["AmazonEC2", "AmazonEC2", "AmazonEC2", "AmazonS3", "AmazonCloudWatch", "AWSDataTransfer",
                  "AmazonRDS", "AmazonEKS"])
TYPES = np.array(["Usage"] * 12 + ["SavingsPlanCoveredUsage", "SavingsPlanNegation", "Tax", "Credit"])
FAMILIES = {"AmazonEC2": "Compute Instance", "AmazonS3": "Storage", "AmazonCloudWatch": "Metric",
            "AWSDataTransfer": "Data Transfer", "AmazonRDS": "Database Instance", "AmazonEKS": "Compute"}
NEEDED = ["line_item_usage_start_date", "line_item_usage_end_date", "line_item_line_item_type",
          "line_item_product_code", "line_item_unblended_cost", "line_item_currency_code", "line_item_usage_type",
          "product_product_family", "line_item_resource_id", "resource_tags",
          "savings_plan_savings_plan_effective_cost", "savings_plan_total_commitment_to_date",
          "savings_plan_used_commitment", "reservation_effective_cost", "reservation_reservation_a_r_n",
          "savings_plan_savings_plan_a_r_n"]


def _chunk(rng: np.random.Generator, lo: int, n: int, rows: int) -> pa.Table:
    i = np.arange(lo, lo + n)
    hour = i * (31 * 24) // rows  # any size spans the month
    start = np.datetime64(START.replace(tzinfo=None), "us") + hour.astype("timedelta64[h]")
    code = CODES[i % len(CODES)]
    kind = TYPES[rng.integers(0, len(TYPES), n)]
    cost = np.round(rng.gamma(2.0, 0.8, n), 6)
    cost[kind == "SavingsPlanNegation"] *= -1
    cost[kind == "Credit"] *= -1
    resource = np.char.add("i-0", (i % 7000).astype(str))
    app = np.where(i % 7000 < 2100, "kimi-k3", "search-index")
    tags = pa.MapArray.from_arrays(pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
                                   pa.array(np.stack([np.full(n, "user_app"), np.full(n, "user_team")], 1).ravel()),
                                   pa.array(np.stack([app, np.full(n, "ml")], 1).ravel()))
    sp = kind == "SavingsPlanCoveredUsage"
    return pa.table({
        "identity_line_item_id": pa.array(np.char.add("li-", i.astype(str))),
        "bill_payer_account_id": pa.array(np.full(n, "123456789012")),
        "line_item_usage_start_date": pa.array(start, pa.timestamp("us")),
        "line_item_usage_end_date": pa.array(start + np.timedelta64(1, "h"), pa.timestamp("us")),
        "line_item_line_item_type": pa.array(kind),
        "line_item_product_code": pa.array(code),
        "line_item_usage_type": pa.array(np.where(code == "AWSDataTransfer", "USE2-DataTransfer-Out-Bytes",
                                                  "USE2-BoxUsage:p5.48xlarge")),
        "line_item_usage_amount": pa.array(np.ones(n)),
        "product_product_family": pa.array(np.vectorize(FAMILIES.get)(code)),
        "line_item_resource_id": pa.array(resource),
        "line_item_unblended_cost": pa.array(cost),
        "line_item_currency_code": pa.array(np.full(n, "USD")),
        "pricing_term": pa.array(np.full(n, "OnDemand")),
        "product_instance_type": pa.array(np.full(n, "p5.48xlarge")),
        "resource_tags": tags,
        "savings_plan_savings_plan_effective_cost": pa.array(np.where(sp, cost * 0.6, np.nan)).fill_null(None),
        "savings_plan_total_commitment_to_date": pa.nulls(n, pa.float64()),
        "savings_plan_used_commitment": pa.nulls(n, pa.float64()),
        "savings_plan_savings_plan_a_r_n": pa.array(np.where(sp, "arn:aws:savingsplans::1:savingsplan/sp-1", "")),
        "reservation_effective_cost": pa.nulls(n, pa.float64()),
        "reservation_reservation_a_r_n": pa.nulls(n, pa.string()),
        "line_item_net_unblended_cost": pa.array(cost),
    })


def write_cur(path: Path, rows: int, chunk: int = 500_000) -> None:
    rng = np.random.default_rng(45)
    writer = None
    for lo in range(0, rows, chunk):
        table = _chunk(rng, lo, min(chunk, rows - lo), rows)
        writer = writer or pq.ParquetWriter(path, table.schema, compression="snappy")
        writer.write_table(table, row_group_size=131_072)
    assert writer is not None
    writer.close()


def bare_aggregation(path: Path) -> float:
    """The same columns read and summed per product code and line type inside the window: pyarrow alone."""
    t0 = time.perf_counter()
    lo, hi = (pa.scalar(dt.datetime.fromisoformat(x.replace("Z", "+00:00")).replace(tzinfo=None),
                        pa.timestamp("us")) for x in WINDOW.split("/"))
    parts = []
    for batch in ds.dataset(path, format="parquet").to_batches(columns=NEEDED, batch_size=262_144):
        t = pa.Table.from_batches([batch])
        keep = pc.and_(pc.greater_equal(t["line_item_usage_start_date"], lo),
                       pc.less(t["line_item_usage_start_date"], hi))
        parts.append(t.filter(keep).group_by(["line_item_product_code", "line_item_line_item_type"]).aggregate(
            [("line_item_unblended_cost", "sum")]))
    pa.concat_tables(parts).group_by(["line_item_product_code", "line_item_line_item_type"]).aggregate(
        [("line_item_unblended_cost_sum", "sum")])
    return time.perf_counter() - t0


CHILD = """
import json, sys, time
from k3lib.cli.main import main
import k3lib.renewal.imports.commands  # the modules loaded before the clock starts

def hwm():  # this process's own peak resident memory (VmHWM: reset at exec, unlike ru_maxrss, which a child
    # inherits from the parent it was forked from)
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))

before = hwm()
t0 = time.perf_counter()
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "import_s": time.perf_counter() - t0, "modules_kb": before, "peak_kb": hwm()}))
"""


def run_import(path: Path, out: Path) -> tuple[float, float, float, float, str]:
    """(wall seconds of the child, seconds of the import itself, peak resident MB, MB before reading, stdout) of
    `k3 import cur` in a child process."""
    cmd = [sys.executable, "-c", CHILD, "import", "cur", str(path), "--out", str(out), "--window", WINDOW,
           "--tag", "app=kimi-k3", "--currency", "USD"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"k3 import failed ({proc.returncode}): {proc.stdout[-2000:]}")
    *lines, last = proc.stdout.strip().splitlines()
    got = json.loads(last)
    return wall, got["import_s"], got["peak_kb"] / 1024, got["modules_kb"] / 1024, "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--keep", help="write the Parquet here (kept) instead of a temporary folder")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(ns.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "cur2.parquet"
        t0 = time.perf_counter()
        write_cur(path, ns.rows)
        print(f"wrote {ns.rows:,} CUR 2.0 lines, {pq.ParquetFile(path).schema_arrow.__len__()} columns, "
              f"{path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s")
        bare = bare_aggregation(path)
        wall, work, peak_mb, modules_mb, stdout = run_import(path, folder / "costs.yaml")
        ratio = work / bare
        print(stdout)
        print(f"bare pyarrow aggregation of the same {len(NEEDED)} columns: {bare:.2f} s")
        print(f"k3 import cur, reading the export to writing costs.yaml: {work:.2f} s = {ratio:.1f}x the bare "
              f"aggregation (bound 15x); the child process's whole wall time {wall:.2f} s, the interpreter and "
              "k3lib's modules included")
        print(f"k3 import cur peak memory (the child's VmHWM): {peak_mb:.0f} MB (bound 1024 MB), of which "
              f"{modules_mb:.0f} MB before reading (the interpreter and k3lib's modules)")
        return 0 if peak_mb <= 1024 and ratio <= 15 else 1

if __name__ == "__main__":
    raise SystemExit(main())
