"""Benchmark: how the kit's load scales over worker processes (`load.workers`) — the most streams at which the
client's self-calibration gate stays valid, and streamed chunks per CPU-second at one event per write, with 1 and
2 workers side by side in one run against one paced known-timing server in its own process.

    .venv/bin/python benchmarks/client_scale.py            # table on stdout (2–4 minutes on 2 cores)
    .venv/bin/python benchmarks/client_scale.py --json     # one JSON object; `max_valid_streams` maps "1", "2"

1 worker is the kit's own process (load.workers=1: `calibrate`, `run_closed_loop` in process); more are a
`k3lib.io.workers.WorkerPool` (`calibrate_workers`, `run_closed_loop(workers=pool)`). Nothing is pinned: the server
and the workers share the host's cores as a capacity run's would. The gate is the capacity axis' own
(`assess`, bound 10 ms on the TTFT, gap and delivery error p99, per worker and for the whole); at each stream
count every worker count is measured `--repeat` times, alternating, and the count is held valid when a majority
of its runs are. The largest valid count is the top of the unbroken run of held counts from the bottom of the
ladder. Chunks per CPU-second: a closed-loop phase of paced streams (one event per write, every stream one event
per gap, all together, `--paced-rate` events/s in all), its content chunks over the CPU of every process that
received them (parent and workers, as the phase summary counts it). Not a test: figures depend on the host and
its load, printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k3lib.io.calibration import calibrate  # noqa: E402
from k3lib.io.knowntiming import KnownTimingConfig, KnownTimingServer  # noqa: E402
from k3lib.io.client import ChatClient  # noqa: E402
from k3lib.io.load import run_closed_loop  # noqa: E402
from k3lib.io.workers import calibrate_workers  # noqa: E402
from k3lib.io.workers import WorkerPool, available_cpus  # noqa: E402

LADDER = (64, 128, 192, 256, 320, 384, 448, 512)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


async def gate(url: str, workers: int, pool: WorkerPool | None, streams: int, *, ttft_ms: float, itl_ms: float,
               chunks: int, rounds: int) -> dict[str, Any]:
    kw = {"concurrency": streams, "known_ttft_ms": ttft_ms, "known_itl_ms": itl_ms, "chunks": chunks}
    if pool is None:
        client = ChatClient(url, keep_raw=True)
        try:
            await calibrate(client, **{**kw, "chunks": 2})  # warm-up: the pool's connections at this count
            rep = await calibrate(client, **kw, rounds=rounds)
        finally:
            await client.aclose()
    else:
        await calibrate_workers(pool, url, **{**kw, "chunks": 2})
        rep = await calibrate_workers(pool, url, **kw, rounds=rounds)
    return {"workers": workers, "streams": streams, "valid": rep.valid, "reason": rep.reason, "ok": rep.ok,
            "requests": rep.requests, "ttft_error_ms_p99": rep.ttft_error_ms_p99,
            "itl_error_ms_p99": rep.itl_error_ms_p99, "delivery_ms_p99": rep.delivery_ms_p99,
            "loop_lag_p99_ms": rep.loop_lag.p99_ms,
            "per_worker_ttft_error_ms_p99": [w["ttft_error_ms_p99"] for w in rep.per_worker]}


async def throughput(url: str, workers: int, pool: WorkerPool | None, streams: int, per_stream: int,
                     itl_ms: float) -> dict[str, Any]:
    body = {"model": "known-timing", "stream": True, "messages": [{"role": "user", "content": "go"}],
            "k3_ttft_ms": 0, "k3_itl_ms": itl_ms, "k3_chunks": per_stream}
    client = ChatClient(url, keep_raw=False)
    chunks = {"n": 0, "failed": 0}

    def sink(rec: Any) -> None:
        chunks["n"] += len(rec.output_chunk_ns)
        chunks["failed"] += not rec.ok

    try:
        # the same phase with a few chunks a stream first: every connection opened, nothing measured
        await run_closed_loop(client, [{**body, "k3_chunks": 2}], concurrency=streams, max_requests=streams,
                              max_duration_s=60, workers=pool)
        summary = await run_closed_loop(client, [body], concurrency=streams, max_requests=streams,
                                        max_duration_s=600, sink=sink, workers=pool)
    finally:
        await client.aclose()
    return {"workers": workers, "streams": streams, "itl_ms": itl_ms, "chunks": chunks["n"],
            "failed": chunks["failed"], "wall_s": summary.duration_s, "cpu_s": summary.client_cpu_s,
            "chunks_per_s": chunks["n"] / summary.duration_s, "chunks_per_cpu_s": chunks["n"] / summary.client_cpu_s,
            "loop_lag_p99_ms": summary.loop_lag_ms_p99}


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def held(rows: list[dict[str, Any]]) -> bool:
    return sum(r["valid"] for r in rows) * 2 > len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ladder", type=int, nargs="+", default=list(LADDER))
    ap.add_argument("--repeat", type=int, default=3, help="gate runs per worker count and stream count")
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--chunks", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--throughput-streams", type=int, default=256)
    ap.add_argument("--throughput-chunks", type=int, default=100_000, help="content chunks of each chunks/s phase")
    ap.add_argument("--paced-rate", type=float, default=20_000.0, help="events per second, all streams together")
    args = ap.parse_args(argv)
    if any(w < 1 for w in args.workers) or any(s < 1 for s in args.ladder) or args.repeat < 1:
        print("--workers, --ladder and --repeat take positive integers", file=sys.stderr)
        return 2

    out: dict[str, Any] = {
        "host": {"cpu": platform.processor() or platform.machine(), "cpus": available_cpus(),
                 "python": platform.python_version(), "load_before": load_avg(), "pinned": False},
        "schedule": {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms, "chunks": args.chunks, "tokens_per_chunk": 2,
                     "rounds": args.rounds, "repeat": args.repeat, "bound_ms": 10.0},
        "gate": [], "throughput": []}
    pools = {w: WorkerPool(w).start() for w in args.workers if w > 1}
    try:
        cfg = KnownTimingConfig(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, chunks=args.chunks)
        alive = set(args.workers)
        failing: dict[int, int] = {w: 0 for w in args.workers}
        with KnownTimingServer(cfg, in_process=False) as srv:
            for streams in sorted(args.ladder):
                if not alive:
                    break
                rows: dict[int, list[dict[str, Any]]] = {w: [] for w in alive}
                for _ in range(args.repeat):
                    for w in sorted(alive):
                        cpu0, t0 = proc_cpu_s(srv._process.pid), time.perf_counter()
                        row = asyncio.run(gate(srv.url, w, pools.get(w), streams, ttft_ms=args.ttft_ms,
                                               itl_ms=args.itl_ms, chunks=args.chunks, rounds=args.rounds))
                        # how busy the instrument was: its share of one core over the gate (warm-up included)
                        row["server_cpu_share"] = round((proc_cpu_s(srv._process.pid) - cpu0)
                                                        / (time.perf_counter() - t0), 3)
                        rows[w].append(row)
                for w in sorted(alive):
                    out["gate"].append({"workers": w, "streams": streams, "held": held(rows[w]), "runs": rows[w]})
                    failing[w] = 0 if held(rows[w]) else failing[w] + 1
                # a worker count is left off the ladder once two counts in a row were not held
                alive = {w for w in alive if failing[w] < 2}
        max_valid: dict[str, int] = {}
        for w in args.workers:
            top = 0
            for g in sorted((g for g in out["gate"] if g["workers"] == w), key=lambda g: g["streams"]):
                if not g["held"]:
                    break
                top = g["streams"]
            max_valid[str(w)] = top
        out["max_valid_streams"] = max_valid
        streams = args.throughput_streams
        itl_ms = streams / args.paced_rate * 1e3
        cfg = KnownTimingConfig(ttft_ms=0, itl_ms=itl_ms, chunks=2, events_per_write=1)
        with KnownTimingServer(cfg, in_process=False) as srv:
            for w in args.workers:
                out["throughput"].append(asyncio.run(throughput(srv.url, w, pools.get(w), streams,
                                                                args.throughput_chunks // streams, itl_ms)))
    finally:
        for p in pools.values():
            p.close()
    out["host"]["load_after"] = load_avg()
    one, two = max_valid.get("1"), max_valid.get("2")
    out["ratio_2_over_1"] = round(two / one, 2) if one and two is not None else None
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print_table(out)
    return 0


def print_table(out: dict[str, Any]) -> None:
    h, sch = out["host"], out["schedule"]
    print(f"host: {h['cpu']}, {h['cpus']} CPUs, Python {h['python']}, nothing pinned; "
          f"load {h['load_before']} -> {h['load_after']}")
    print(f"known schedule: TTFT {sch['ttft_ms']:g} ms, gap {sch['itl_ms']:g} ms, {sch['chunks']} chunks x 2 tokens, "
          f"{sch['rounds']} rounds after a warm-up; {sch['repeat']} runs per cell, bound {sch['bound_ms']:g} ms")
    f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    print(f"{'workers':>7} {'streams':>8} {'held':>5} {'valid runs':>10} {'TTFT err p99 ms (each run)':>30} "
          f"{'gap err p99':>12} {'delivery p99':>13} {'server CPU':>10}")
    for g in out["gate"]:
        runs = g["runs"]
        print(f"{g['workers']:>7} {g['streams']:>8} {'yes' if g['held'] else 'no':>5} "
              f"{sum(r['valid'] for r in runs):>4}/{len(runs):<5} "
              f"{' '.join(f(r['ttft_error_ms_p99']) for r in runs):>30} "
              f"{' '.join(f(r['itl_error_ms_p99']) for r in runs):>12} "
              f"{' '.join(f(r['delivery_ms_p99']) for r in runs):>13} "
              f"{max(r['server_cpu_share'] for r in runs):>9.0%}")
    print(f"\nlargest stream count held valid: {out['max_valid_streams']} (2 / 1 = {out['ratio_2_over_1']})")
    print(f"\n{'workers':>7} {'streams':>8} {'gap ms':>7} {'chunks':>8} {'failed':>7} {'chunks/s':>9} {'CPU s':>6} "
          f"{'per CPU-s':>10}")
    for t in out["throughput"]:
        print(f"{t['workers']:>7} {t['streams']:>8} {t['itl_ms']:>7.1f} {t['chunks']:>8} {t['failed']:>7} "
              f"{t['chunks_per_s']:>9.0f} {t['cpu_s']:>6.2f} {t['chunks_per_cpu_s']:>10.0f}")


if __name__ == "__main__":
    raise SystemExit(main())
