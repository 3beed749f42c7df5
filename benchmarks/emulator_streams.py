"""Benchmark (not a test): can the emulator feed 256 concurrent SSE streams on this machine, and how late
does its engine loop run? Starts the emulator in a subprocess, streams with the kit's client, prints the
figures.

    .venv/bin/python benchmarks/emulator_streams.py [--streams 256] [--max-tokens 64] [--time-scale 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import httpx

from k3lib.io.client import ChatClient

SERVER = """
import sys
from k3lib.emulator import EmulatorConfig, serve_forever
cfg = EmulatorConfig.from_profile("demo", time_scale=float(sys.argv[1]), max_num_seqs=int(sys.argv[2]),
                                  max_num_batched_tokens=16384, num_gpu_blocks_override=8192)
serve_forever(cfg, host="127.0.0.1", port=0)
"""


async def one_stream(client: ChatClient, i: int, max_tokens: int) -> dict:
    rec = await client.chat([{"role": "user", "content": f"stream number {i}: tell me a story"}],
                            max_tokens=max_tokens, ignore_eos=True, strict=False)
    if not rec.ok:
        raise SystemExit(f"stream {i} failed: {rec.error_kind}: {rec.error}")
    return {"ttft_s": None if rec.ttft_ms is None else rec.ttft_ms / 1e3, "e2e_s": rec.e2e_ms / 1e3,
            "chunks": len(rec.output_chunk_ns), "completion_tokens": rec.completion_tokens or 0}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(int(p * len(values)), len(values) - 1)]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc); NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        import os

        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


async def run(url: str, streams: int, max_tokens: int, server_pid: int) -> None:
    # the kit's own client (aiohttp): one connection per stream, no pool scan, and the same code a load phase runs
    async with ChatClient(url, model="kimi-k3", timeout_s=300, keep_raw=False) as client, \
            httpx.AsyncClient(base_url=url, timeout=60) as http:
        await http.post("/v1/completions", json={"prompt": "warm up", "max_tokens": 2})
        t0 = time.perf_counter()
        cpu0 = cpu_s(server_pid)
        results = await asyncio.gather(*[one_stream(client, i, max_tokens) for i in range(streams)])
        wall = time.perf_counter() - t0
        server_cpu = cpu_s(server_pid) - cpu0
        state = (await http.get("/_emulator/state")).json()
    tokens = sum(r["completion_tokens"] for r in results)
    chunks = sum(r["chunks"] for r in results)
    ttfts = [r["ttft_s"] for r in results if r["ttft_s"] is not None]
    e2es = [r["e2e_s"] for r in results]
    steps = state["engines"][0]["steps"]
    print(f"streams={streams} max_tokens={max_tokens} completed={sum(1 for r in results if r['completion_tokens'])}")
    print(f"wall_s={wall:.2f} tokens={tokens} sustained_tokens_per_s={tokens / wall:.0f} "
          f"sse_chunks_per_s={chunks / wall:.0f}")
    print(f"client ttft_ms p50={pct(ttfts, .5) * 1000:.1f} p99={pct(ttfts, .99) * 1000:.1f}; "
          f"e2e_s p50={statistics.median(e2es):.2f} max={max(e2es):.2f}")
    print(f"engine steps={steps} step_lag_ms p50={state['step_lag_ms_p50']} p99={state['step_lag_ms_p99']} "
          f"max={state['step_lag_ms_max']} (samples={state['step_lag_samples']})")
    print(f"emulator process CPU: {server_cpu:.2f} s over {wall:.2f} s wall = {100 * server_cpu / wall:.0f}% of one core")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--time-scale", type=float, default=0.1)
    ns = ap.parse_args()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(ns.time_scale), str(ns.streams)],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"the emulator did not print its URL (got {url!r})")
        print(f"emulator at {url} (subprocess {proc.pid}), time_scale={ns.time_scale}")
        asyncio.run(run(url, ns.streams, ns.max_tokens, proc.pid))
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
