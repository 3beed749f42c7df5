"""Benchmark: the chat client's own timing error at 1, 64 and 256 concurrent streams, and the most streamed
chunks per second it can parse on one core.

    .venv/bin/python benchmarks/client_timing.py            # table on stdout
    .venv/bin/python benchmarks/client_timing.py --json     # one JSON object

The client process is pinned to CPU 0 and the known-timing server runs in a child process pinned to CPU 1
(when the host has two CPUs), so the server's work does not steal the client's core or GIL. The server stamps
each chunk with its own `perf_counter_ns` (CLOCK_MONOTONIC, shared by both processes), so "delivery" is the
client-side delay alone; "TTFT error" also includes the upload and the server's wake-up (an upper bound).
Not a test: numbers depend on the host. Quote them with the host's CPU model.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from k3lib.io.calibration import calibrate  # noqa: E402
from k3lib.io.knowntiming import KnownTimingConfig, KnownTimingServer  # noqa: E402
from k3lib.io.client import ChatClient  # noqa: E402


def pin(cpu: int) -> bool:
    if hasattr(os, "sched_setaffinity") and cpu in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {cpu})
        return True
    return False


async def timing_error(url: str, concurrency: int, *, ttft_ms: float, itl_ms: float, chunks: int,
                       rounds: int) -> dict[str, Any]:
    client = ChatClient(url, keep_raw=True)
    try:
        rep = await calibrate(client, concurrency=concurrency, known_ttft_ms=ttft_ms, known_itl_ms=itl_ms,
                              chunks=chunks, rounds=rounds)
    finally:
        await client.aclose()
    return rep.to_dict()


async def max_chunks_per_s(url: str, streams: int, chunks_per_stream: int, *,
                           itl_ms: float = 0.0) -> dict[str, Any]:
    """`itl_ms` 0: the server writes as fast as it can; above 0 it paces each stream (one event per gap)."""
    client = ChatClient(url, keep_raw=False)
    body = {"model": "known-timing", "stream": True, "messages": [{"role": "user", "content": "go"}],
            "k3_ttft_ms": 0, "k3_itl_ms": itl_ms, "k3_chunks": chunks_per_stream}
    try:
        await client.chat_body({**body, "k3_chunks": 10})  # warm the pool
        cpu0, t0 = time.process_time(), time.perf_counter()
        recs = await asyncio.gather(*(client.chat_body(body, strict=False) for _ in range(streams)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await client.aclose()
    events = sum(r.chunk_count for r in recs)
    # the events of one socket read share that read's arrival mark: how many the server's writes packed into
    # each read (the more, the less each costs a client), as a reader of these figures needs to know
    outputs = sum(len(r.output_chunk_ns) for r in recs)
    reads = sum(len(set(r.output_chunk_ns)) for r in recs)
    return {"streams": streams, "events": events, "failed": sum(not r.ok for r in recs), "wall_s": wall,
            "events_per_s": events / wall, "client_cpu_fraction": cpu / wall,
            "output_events_per_read": outputs / reads if reads else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--chunks", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--throughput-chunks", type=int, default=200_000, help="total chunks for the chunks/s run")
    ap.add_argument("--paced-rate", type=float, default=20_000.0, help="events per second, all streams together, "
                    "of the one-event-per-write runs")
    args = ap.parse_args(argv)

    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    server_cpu = 1 if ncpu >= 2 else None
    client_pinned = pin(0)
    out: dict[str, Any] = {"host": {"cpu": platform.processor() or platform.machine(), "cpus": ncpu,
                                    "python": platform.python_version(), "client_pinned_cpu0": client_pinned,
                                    "server_cpu": server_cpu},
                           "timing": [], "throughput": []}
    with KnownTimingServer(KnownTimingConfig(), in_process=False, cpu=server_cpu) as srv:
        for c in args.concurrency:
            out["timing"].append(asyncio.run(timing_error(srv.url, c, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms,
                                                          chunks=args.chunks, rounds=args.rounds)))
    # batched: the server writes pre-serialized blocks of 64 events as fast as it can, so the client's parsing is
    # the limit; paced: one event per write, every stream one event per gap (all together, as a decode step reaches
    # them) at a total rate the client keeps, so each socket read brings one event — unpaced, the server writes
    # faster than one core reads and a read carries a hundred events or more
    for per_write, stream_counts in ((64, (1, 8, 64)), (1, (64, 256))):
        cfg = KnownTimingConfig(events_per_write=per_write)
        with KnownTimingServer(cfg, in_process=False, cpu=server_cpu) as srv:
            for streams in stream_counts:
                total = args.throughput_chunks if per_write > 1 else args.throughput_chunks // 4
                itl_ms = 0.0 if per_write > 1 else streams / args.paced_rate * 1e3
                res = asyncio.run(max_chunks_per_s(srv.url, streams, total // streams, itl_ms=itl_ms))
                out["throughput"].append({"events_per_write": per_write, "itl_ms": itl_ms, **res})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"host: {out['host']}")
    print(f"known schedule: TTFT {args.ttft_ms:g} ms, gap {args.itl_ms:g} ms, {args.chunks} chunks x 2 tokens")
    print(f"{'streams':>8} {'ok':>5} {'TTFT err p50/p99 ms':>20} {'ITL err p50/p99 ms':>19} "
          f"{'delivery p50/p99 ms':>20} {'loop lag p99 ms':>16} {'valid':>6}")
    for t in out["timing"]:
        print(f"{t['concurrency']:>8} {t['ok']:>5} {t['ttft_error_ms_p50']:>9.2f}/{t['ttft_error_ms_p99']:<10.2f}"
              f"{t['itl_error_ms_p50']:>8.2f}/{t['itl_error_ms_p99']:<10.2f}"
              f"{t['delivery_ms_p50']:>9.2f}/{t['delivery_ms_p99']:<10.2f}{t['loop_lag']['p99_ms']:>16.2f}"
              f"{str(t['valid']):>7}")
    print(f"\n{'events/write':>12} {'gap ms':>7} {'streams':>8} {'events':>8} {'per read':>9} {'events/s':>10} "
          f"{'client CPU':>11} {'per CPU-s':>10}")
    for t in out["throughput"]:
        per_read = t["output_events_per_read"]
        print(f"{t['events_per_write']:>12} {t['itl_ms']:>7.1f} {t['streams']:>8} {t['events']:>8} "
              f"{'-' if per_read is None else f'{per_read:.1f}':>9} {t['events_per_s']:>10.0f} "
              f"{t['client_cpu_fraction']:>10.0%} {t['events_per_s'] / t['client_cpu_fraction']:>10.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
