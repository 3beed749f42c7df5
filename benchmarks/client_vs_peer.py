"""Benchmark: the kit's chat client next to a peer load client (NVIDIA AIPerf, in its own venv) against the same
known-timing server in the same run — timing error against the known schedule, and streamed chunks per second on
one core.

    bash benchmarks/setup_peer.sh                              # once: .venv-peer/ with AIPerf pinned
    .venv/bin/python benchmarks/client_vs_peer.py              # table on stdout (about 3 minutes on 2 cores)
    .venv/bin/python benchmarks/client_vs_peer.py --json       # one JSON object

Both clients run on CPU 0 (this process pins itself, and AIPerf's whole process tree inherits the pin); the server
is a `KnownTimingServer` child process pinned to CPU 1. As root, the run re-executes itself inside a new network
namespace with only loopback up (`unshare -n`), which proves that neither client needs anything beyond
127.0.0.1 — no model hub, no tokenizer download (AIPerf gets the byte tokenizer `setup_peer.sh` made). Each client
gets the same warm-up (one round at the measured concurrency) before the measured requests.

TTFT error = measured TTFT − the scheduled one (upload, server wake-up and the client's own delay: an upper bound);
gap error = each measured inter-chunk gap − the scheduled gap. Chunks/s = content chunks received / wall time of
the measured phase (AIPerf: its own `benchmark_duration`). AIPerf's workers only stamp raw chunks and its record
processor parses them afterwards, so two more columns count the whole cost: chunks / (wall until the results are
written) and chunks / CPU-second, each above the same AIPerf run with 2 chunks a stream (start-up and shutdown).
Not a test: figures depend on the host and its load (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from client_timing import max_chunks_per_s, pin

from k3lib.io.calibration import calibrate
from k3lib.io.knowntiming import KnownTimingConfig, KnownTimingServer
from k3lib.core.stats import percentile
from k3lib.io.client import ChatClient

PEER_VENV = ROOT / ".venv-peer"
AIPERF = PEER_VENV / "bin" / "aiperf"
TOKENIZER = PEER_VENV / "byte-tokenizer"
ISOLATED_ENV = "K3_BENCH_NETNS"


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def reexec_isolated(argv: list[str]) -> int | None:
    """As root with `unshare`: run this script again in a fresh network namespace with only loopback up.
    None when that is not possible (the run goes on in the host's namespace and says so)."""
    if os.environ.get(ISOLATED_ENV) or os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")):
        return None
    cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", sys.executable, __file__, *argv]
    probe = subprocess.run(["unshare", "-n", "true"], check=False, capture_output=True)
    if probe.returncode != 0:
        return None
    return subprocess.run(cmd, check=False, env={**os.environ, ISOLATED_ENV: "1"}).returncode


# ---------------------------------------------------------------------------------------------------------------
# The kit's client
# ---------------------------------------------------------------------------------------------------------------


async def kit_timing(url: str, concurrency: int, *, ttft_ms: float, itl_ms: float, chunks: int,
                     rounds: int) -> dict[str, Any]:
    client = ChatClient(url, keep_raw=True)
    kw = {"concurrency": concurrency, "known_ttft_ms": ttft_ms, "known_itl_ms": itl_ms, "chunks": chunks}
    try:
        await calibrate(client, **kw, rounds=1)  # warm-up: open the pool's connections
        rep = await calibrate(client, **kw, rounds=rounds)
    finally:
        await client.aclose()
    return {"client": "k3kit", "concurrency": concurrency, "requests": rep.requests, "ok": rep.ok,
            "ttft_error_ms_p50": rep.ttft_error_ms_p50, "ttft_error_ms_p99": rep.ttft_error_ms_p99,
            "itl_error_ms_p50": rep.itl_error_ms_p50, "itl_error_ms_p99": rep.itl_error_ms_p99,
            "gaps_complete": rep.itl_count_ok, "loop_lag_p99_ms": rep.loop_lag.p99_ms}


# ---------------------------------------------------------------------------------------------------------------
# The peer: AIPerf in .venv-peer, one subprocess per measurement
# ---------------------------------------------------------------------------------------------------------------


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_aiperf(url: str, art: Path, *, concurrency: int, requests: int, warmup: int, output_tokens: int,
               timeout_s: float) -> tuple[list[dict[str, Any]], dict[str, Any], float, float]:
    """One `aiperf profile` run; returns (profiling records, summary JSON, whole-process wall seconds, CPU seconds
    of its whole process tree — every AIPerf service is a child that it reaps, so RUSAGE_CHILDREN sees them)."""
    cmd = [str(AIPERF), "profile", "--model", "known-timing", "--url", url, "--endpoint-type", "chat",
           "--streaming", "--tokenizer", str(TOKENIZER), "--use-server-token-count", "--concurrency",
           str(concurrency), "--request-count", str(requests), "--warmup-request-count", str(warmup),
           "--isl", "16", "--osl", str(output_tokens), "--ui", "none", "--artifact-dir", str(art),
           "--workers-max", "1", "--record-processor-service-count", "1", "--no-server-metrics",
           "--no-gpu-telemetry", "--random-seed", "7"]
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"}
    t0, cpu0 = time.perf_counter(), _children_cpu_s()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout_s, env=env,
                          stdin=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - t0, _children_cpu_s() - cpu0
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"aiperf exited {proc.returncode}:\n{tail}")
    records = []
    with open(art / "profile_export.jsonl") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("metadata", {}).get("benchmark_phase", "profiling") == "profiling":
                records.append(rec)
    return records, json.loads((art / "profile_export_aiperf.json").read_text()), wall, cpu


def _metric(rec: dict[str, Any], name: str) -> Any:
    m = rec.get("metrics", {}).get(name)
    return m.get("value") if isinstance(m, dict) else None


def peer_timing(url: str, art: Path, concurrency: int, *, ttft_ms: float, itl_ms: float, chunks: int,
                rounds: int) -> dict[str, Any]:
    records, _, wall, _ = run_aiperf(url, art, concurrency=concurrency, requests=concurrency * rounds,
                                        warmup=concurrency, output_tokens=chunks * 2, timeout_s=300)
    ok = [r for r in records if not r.get("error") and _metric(r, "time_to_first_token") is not None]
    ttft_err = [_metric(r, "time_to_first_token") - ttft_ms for r in ok]
    gaps = [_metric(r, "inter_chunk_latency") or [] for r in ok]
    itl_err = [g - itl_ms for gs in gaps for g in gs]
    return {"client": "aiperf", "concurrency": concurrency, "requests": len(records), "ok": len(ok),
            "ttft_error_ms_p50": percentile(ttft_err, 50), "ttft_error_ms_p99": percentile(ttft_err, 99),
            "itl_error_ms_p50": percentile(itl_err, 50), "itl_error_ms_p99": percentile(itl_err, 99),
            "gaps_complete": bool(ok) and all(len(g) == chunks - 1 for g in gaps), "process_wall_s": wall}


def peer_throughput(url: str, art: Path, streams: int, chunks_per_stream: int,
                    baseline: dict[str, float] | None = None) -> dict[str, Any]:
    """AIPerf's workers only stamp raw chunks; its record processor parses them later. So its own
    `benchmark_duration` leaves the parsing out: the chunks' whole cost is the run's CPU (and wall) above that of
    a baseline run with a handful of chunks (start-up, dataset, shutdown)."""
    records, summary, wall, cpu = run_aiperf(url, art, concurrency=streams, requests=streams, warmup=1,
                                             output_tokens=chunks_per_stream * 2, timeout_s=600)
    duration = float(summary["benchmark_duration"]["avg"])
    # content chunks per stream = inter-chunk gaps + 1
    events = sum(len(_metric(r, "inter_chunk_latency") or []) + 1 for r in records if not r.get("error"))
    out = {"streams": streams, "events": events, "failed": sum(bool(r.get("error")) for r in records),
           "wall_s": duration, "events_per_s": events / duration, "process_wall_s": wall, "process_cpu_s": cpu}
    if baseline:
        extra_cpu, extra_wall = cpu - baseline["process_cpu_s"], wall - baseline["process_wall_s"]
        out |= {"baseline_cpu_s": baseline["process_cpu_s"], "baseline_wall_s": baseline["process_wall_s"],
                # a difference within the run-to-run noise of the fixed cost (about a second) says nothing
                "events_per_cpu_s": events / extra_cpu if extra_cpu > 1.0 else None,
                "events_per_s_to_results": events / extra_wall if extra_wall > 1.0 else None}
    return out


def kit_throughput(url: str, streams: int, chunks_per_stream: int, itl_ms: float) -> dict[str, Any]:
    res = asyncio.run(max_chunks_per_s(url, streams, chunks_per_stream, itl_ms=itl_ms))
    # count content chunks, as for AIPerf (the role, finish and usage events are parsed but not counted)
    events = (streams - res["failed"]) * chunks_per_stream
    cpu = res["client_cpu_fraction"] * res["wall_s"]
    return {**res, "events": events, "events_per_s": events / res["wall_s"], "events_per_cpu_s": events / cpu,
            "events_per_s_to_results": events / res["wall_s"]}


# ---------------------------------------------------------------------------------------------------------------


def print_table(out: dict[str, Any]) -> None:
    sch = out["schedule"]
    h = out["host"]
    print(f"host: {h['cpu']}, {h['cpus']} CPUs, Python {h['python']}; clients on CPU 0, server on CPU "
          f"{h['server_cpu']}; network: {h['network']}; load {h['load_before']} -> {h['load_after']}")
    print(f"peer: {out['peer']} (.venv-peer)")
    print(f"known schedule: TTFT {sch['ttft_ms']:g} ms, gap {sch['itl_ms']:g} ms, {sch['chunks']} chunks x 2 tokens; "
          f"{sch['rounds']} rounds after one warm-up round, {sch.get('repeat', 1)} repetitions (medians)")
    print(f"{'client':>7} {'streams':>8} {'ok':>9} {'TTFT err p50/p99 ms':>20} {'gap err p50/p99 ms':>19} "
          f"{'TTFT err p99 range':>19} {'all gaps':>9}")
    f = lambda v: "-" if v is None else f"{v:.2f}"
    def med(rows: list[dict[str, Any]], k: str) -> float | None:
        vals = [r[k] for r in rows]
        return statistics.median(vals) if None not in vals else None

    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for t in out["timing"]:
        groups.setdefault((t["concurrency"], t["client"] != "k3kit"), []).append(t)
    for (c, _), rows in sorted(groups.items()):
        p99s = [r["ttft_error_ms_p99"] for r in rows if r["ttft_error_ms_p99"] is not None]
        print(f"{rows[0]['client']:>7} {c:>8} {sum(r['ok'] for r in rows):>4}/{sum(r['requests'] for r in rows):<4} "
              f"{f(med(rows, 'ttft_error_ms_p50')):>9}/{f(med(rows, 'ttft_error_ms_p99')):<10} "
              f"{f(med(rows, 'itl_error_ms_p50')):>8}/{f(med(rows, 'itl_error_ms_p99')):<10}"
              f"{f(min(p99s, default=None)):>9}-{f(max(p99s, default=None)):<9}"
              f"{all(r['gaps_complete'] for r in rows)!s:>9}")
    print("\nstreamed content chunks per second on one core: over each client's measured phase / until its results"
          " are parsed / per CPU-second")
    print(f"{'events/write':>12} {'gap ms':>7} {'streams':>8} {'chunks':>8} {'per read':>9} {'k3kit phase':>12} "
          f"{'results':>8} {'per CPU-s':>10} {'aiperf phase':>13} {'results':>8} {'per CPU-s':>10} {'ratio':>6} "
          f"{'failed':>7}")
    g = lambda v: "n/a" if v is None else f"{v:.0f}"
    for t in out["throughput"]:
        k, a = t["k3kit"], t["aiperf"]
        ratio = f"{k['events_per_cpu_s'] / a['events_per_cpu_s']:.2f}" if a["events_per_cpu_s"] else "n/a"
        per_read = k.get("output_events_per_read")
        print(f"{t['events_per_write']:>12} {t.get('itl_ms', 0):>7.1f} {t['streams']:>8} {a['events']:>8} "
              f"{'-' if per_read is None else f'{per_read:.1f}':>9} {k['events_per_s']:>12.0f} "
              f"{k['events_per_s_to_results']:>8.0f} {k['events_per_cpu_s']:>10.0f} {a['events_per_s']:>13.0f} "
              f"{g(a['events_per_s_to_results']):>8} {g(a['events_per_cpu_s']):>10} {ratio:>6} "
              f"{k['failed'] + a['failed']:>7}")
    print("('per read': the kit's content events per socket read — the events of one read share its arrival mark)")
    print("(aiperf 'results' and 'per CPU-s': its wall and CPU above those of the same run with 2 chunks a stream, "
          + ", ".join(f"{t['aiperf']['baseline_wall_s']:.1f} s/{t['aiperf']['baseline_cpu_s']:.1f} CPU-s"
                      for t in out["throughput"]) + ")")
    start = [t["process_wall_s"] for t in out["timing"] if "process_wall_s" in t]
    print(f"\naiperf whole-process wall per run (start-up included): {min(start):.1f}-{max(start):.1f} s")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--chunks", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timing runs per client and concurrency (medians shown)")
    ap.add_argument("--throughput-chunks", type=int, default=200_000, help="total chunks per chunks/s run "
                    "(half of it with one event per write)")
    ap.add_argument("--paced-rate", type=float, default=20_000.0, help="events per second, all streams together, "
                    "of the one-event-per-write runs")
    ap.add_argument("--no-isolation", action="store_true", help="stay in the host's network namespace")
    args = ap.parse_args(argv)
    if not AIPERF.exists() or not (TOKENIZER / "tokenizer.json").exists():
        print("the peer is not installed: run `bash benchmarks/setup_peer.sh` first", file=sys.stderr)
        return 2
    if not args.no_isolation:
        rc = reexec_isolated(argv)
        if rc is not None:
            return rc

    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    server_cpu = 1 if ncpu >= 2 else None
    version = subprocess.run([str(AIPERF), "--version"], check=False, capture_output=True,
                             text=True).stdout.strip()
    out: dict[str, Any] = {
        "host": {"cpu": platform.processor() or platform.machine(), "cpus": ncpu, "python": platform.python_version(),
                 "clients_pinned_cpu0": pin(0), "server_cpu": server_cpu, "load_before": load_avg(),
                 "network": "own namespace, loopback only" if os.environ.get(ISOLATED_ENV) else "host"},
        "peer": f"aiperf {version.splitlines()[-1] if version else '?'}",
        "schedule": {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms, "chunks": args.chunks, "tokens_per_chunk": 2,
                     "rounds": args.rounds, "repeat": args.repeat},
        "timing": [], "throughput": []}
    with tempfile.TemporaryDirectory(prefix="k3-peer-") as tmp:
        tmpd = Path(tmp)
        cfg = KnownTimingConfig(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, chunks=args.chunks)
        with KnownTimingServer(cfg, in_process=False, cpu=server_cpu) as srv:
            # repeated, the two clients alternating, so that a burst of load on the host falls on both; the kit's
            # runs first in each repetition (an AIPerf run's services may still be winding down when it returns)
            for rep in range(args.repeat):
                for c in args.concurrency:
                    out["timing"].append({"repetition": rep, **asyncio.run(kit_timing(
                        srv.url, c, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, chunks=args.chunks, rounds=args.rounds))})
                for c in args.concurrency:
                    out["timing"].append({"repetition": rep, **peer_timing(
                        srv.url, tmpd / f"timing-{c}-{rep}", c, ttft_ms=args.ttft_ms, itl_ms=args.itl_ms,
                        chunks=args.chunks, rounds=args.rounds)})
                    time.sleep(1.0)
        # batched: 64 pre-serialized events per write, as fast as the server can, so the client's parsing is the
        # limit; paced: one event per write, each stream one event per gap, all streams together (as a decode step
        # reaches its streams), at a total rate the client can keep, so that each socket read brings one event:
        # unpaced, this server writes faster than a client reads and a read would carry a hundred events or more
        for per_write, stream_counts in ((64, (1, 64)), (1, (64, 256))):
            total = args.throughput_chunks if per_write > 1 else args.throughput_chunks // 2
            for streams in stream_counts:
                per_stream = total // streams
                itl_ms = 0.0 if per_write > 1 else streams / args.paced_rate * 1e3
                tag = f"{per_write}-{streams}"
                # the same run with 2 chunks a stream: AIPerf's fixed cost at this concurrency, subtracted below
                cfg = KnownTimingConfig(ttft_ms=0, itl_ms=itl_ms, chunks=2, events_per_write=per_write)
                with KnownTimingServer(cfg, in_process=False, cpu=server_cpu) as srv:
                    base = peer_throughput(srv.url, tmpd / f"base-{tag}", streams, 2)
                cfg = KnownTimingConfig(ttft_ms=0, itl_ms=itl_ms, chunks=per_stream, events_per_write=per_write)
                time.sleep(2.0)  # let the baseline run's services finish before the kit is measured
                with KnownTimingServer(cfg, in_process=False, cpu=server_cpu) as srv:
                    kit = kit_throughput(srv.url, streams, per_stream, itl_ms)
                    peer = peer_throughput(srv.url, tmpd / f"tput-{tag}", streams, per_stream, base)
                out["throughput"].append({"events_per_write": per_write, "streams": streams, "itl_ms": itl_ms,
                                          "k3kit": kit, "aiperf": peer})
    out["host"]["load_after"] = load_avg()
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print_table(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
