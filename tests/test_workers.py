"""Load over worker processes (k3lib.io.workers): the phase's streams spread over processes on one start instant and
one ramp, every finished record at the parent as it finishes, a worker killed with -9 losing none of its finished
records (its phase marked degraded with the reason), a killed parent leaving no worker loading, the calibration
judged per worker and for the whole, and `load.workers` bounded."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from k3lib.io.calibration import gate_phase
from k3lib.io.knowntiming import KnownTimingConfig, KnownTimingServer
from k3lib.io.client import ChatClient, ChatRecord
from k3lib.core.errors import BadInputError
from k3lib.io.load import run_closed_loop
from k3lib.core.params import LoadParams
from k3lib.io.workers import calibrate_workers
from k3lib.io.workers import WORKERS_MAX, WorkerPool, default_workers, resolve_workers

MSG = [{"role": "user", "content": "load"}]
FAST = {"messages": MSG, "k3_ttft_ms": 5, "k3_itl_ms": 2, "k3_chunks": 3}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server() -> Any:
    with KnownTimingServer(KnownTimingConfig(), in_process=False) as srv:
        yield srv


@pytest.fixture(scope="module")
def pool() -> Any:
    with WorkerPool(2) as p:
        yield p


def _ids(records: list[ChatRecord]) -> list[int]:
    return sorted(int(r.request_id.rsplit("-", 1)[1]) for r in records)


# -- the parameter ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, WORKERS_MAX + 1, 2.5, "2", True])
def test_workers_out_of_bounds_is_one_clear_error(bad: Any) -> None:
    with pytest.raises(BadInputError, match="load.workers must be an integer from 1 to"):
        resolve_workers(bad)


def test_workers_default_leaves_a_core_for_the_kit_and_the_parameter_has_the_same_bounds() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert resolve_workers(None) == default_workers() == max(1, cpus - 1)
    fields = LoadParams.model_json_schema()["properties"]["workers"]["anyOf"][0]
    assert (fields["minimum"], fields["maximum"]) == (1, WORKERS_MAX)
    assert LoadParams(workers=3).workers == 3 and LoadParams().workers is None


def test_load_workers_from_the_command_line_is_validated(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "k3lib", "validate", "--params",
                          str(ROOT / "parameters" / "emulator.yaml"), "--set", f"load.workers={WORKERS_MAX + 1}",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "load.workers" in out.stderr and "less than or equal to 64" in out.stderr
    assert "Traceback" not in out.stderr and not list(tmp_path.iterdir())


# -- a phase over two workers -------------------------------------------------------------------------------


def test_a_closed_loop_over_two_workers_sends_each_index_once(server: KnownTimingServer, pool: WorkerPool) -> None:
    got: list[ChatRecord] = []

    async def go() -> Any:
        return await run_closed_loop(ChatClient(server.url), [FAST], concurrency=6, max_requests=60,
                                     max_duration_s=30, sink=got.append, workers=pool)

    s = asyncio.run(go())
    assert s.workers == 2 and s.degraded is None and len(s.worker_loop_lag_ms_p99) == 2
    assert s.sent == s.ok == 60 and s.stopped_by == "max_requests"
    assert _ids(got) == list(range(60))  # every index, once, over both workers
    assert s.client_cpu_s > 0


@pytest.mark.slow
def test_one_start_instant_and_one_ramp_across_workers(server: KnownTimingServer, pool: WorkerPool) -> None:
    got: list[ChatRecord] = []
    # one request per stream: each takes longer than the phase sends for
    slow = {**FAST, "k3_ttft_ms": 1700, "k3_chunks": 2}

    async def go() -> Any:
        return await run_closed_loop(ChatClient(server.url), [slow], concurrency=4, max_requests=100, ramp_s=1.2,
                                     max_duration_s=1.5, drain_s=3.0, sink=got.append, workers=pool)

    s = asyncio.run(go())
    start_wall_s = s.started_wall_ns / 1e9
    sent = sorted(r.wall_ns(r.sent_ns) / 1e9 - start_wall_s for r in got)
    # streams 0 and 2 are on one worker, 1 and 3 on the other; stream k starts 0.4 k s after the one start instant
    assert len(sent) == 4 and s.ok == 4
    for k, t in enumerate(sent):
        assert 0.4 * k - 0.005 <= t < 0.4 * k + 0.35, sent
    assert s.workers == 2


def test_a_sink_failure_stops_every_worker_and_propagates(server: KnownTimingServer, pool: WorkerPool) -> None:
    calls: list[int] = []

    def sink(rec: ChatRecord) -> None:
        calls.append(1)
        raise OSError("disk full")

    t0 = time.monotonic()
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(run_closed_loop(ChatClient(server.url), [FAST], concurrency=4, max_requests=100_000,
                                    max_duration_s=20, sink=sink, workers=pool))
    assert len(calls) == 1 and time.monotonic() - t0 < 10


def test_bodies_that_do_not_pickle_are_refused_before_any_load(server: KnownTimingServer, pool: WorkerPool) -> None:
    with pytest.raises(BadInputError, match="bodies that pickle"):
        asyncio.run(run_closed_loop(ChatClient(server.url), lambda i: FAST, concurrency=4, max_requests=4,
                                    max_duration_s=5, workers=pool))


def test_workers_one_stays_in_this_process(server: KnownTimingServer) -> None:
    s = asyncio.run(run_closed_loop(ChatClient(server.url), [FAST], concurrency=2, max_requests=4, max_duration_s=5,
                                    workers=1))
    assert s.workers == 1 and s.worker_loop_lag_ms_p99 == () and s.sent == 4


# -- killed processes ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_worker_killed_with_minus_9_mid_phase_loses_no_finished_record(server: KnownTimingServer,
                                                                          tmp_path: Path) -> None:
    got: list[ChatRecord] = []
    with WorkerPool(2, journal_dir=tmp_path) as p:
        victim = p.pids[1]

        async def go() -> Any:
            loop = asyncio.get_running_loop()
            loop.call_later(1.2, os.kill, victim, signal.SIGKILL)
            return await run_closed_loop(ChatClient(server.url), [FAST], concurrency=8, max_requests=1_000_000,
                                         max_duration_s=3.0, sink=got.append, workers=p)

        s = asyncio.run(go())
        # the pool replaces the dead worker before its next job
        s2 = asyncio.run(run_closed_loop(ChatClient(server.url), [FAST], concurrency=4, max_requests=8,
                                         max_duration_s=5, workers=p))
        assert s2.degraded is None and s2.sent == 8 and victim not in p.pids
    # what the killed worker wrote to its journal after each send: every one of those records reached the parent
    journal = (tmp_path / f"worker-{victim}.ids").read_text().split()
    received = {r.request_id for r in got}
    assert len(journal) > 10
    assert set(journal) <= received
    # its indices are the odd ones: what arrived from it is what it journaled, give or take the one cut between
    # its send and its journal line
    odd = {r.request_id for r in got if int(r.request_id.rsplit("-", 1)[1]) % 2 == 1}
    assert len(journal) <= len(odd) <= len(journal) + 1
    assert s.degraded is not None and "load worker 2 of 2 was killed by signal 9 (SIGKILL)" in s.degraded
    assert f"its {len(odd)} finished records were received and kept" in s.degraded
    # the other worker went on to the end of the window
    late = [r for r in got if r.wall_ns(r.sent_ns) / 1e9 - s.started_wall_ns / 1e9 > 2.0]
    assert late and all(int(r.request_id.rsplit("-", 1)[1]) % 2 == 0 for r in late)
    assert s.sent == len(got)


PARENT = """
import asyncio, json, sys
from k3lib.io.client import ChatClient
from k3lib.io.load import run_closed_loop
from k3lib.io.workers import WorkerPool

out = open(sys.argv[2], "a", buffering=1)
def sink(rec):
    out.write(json.dumps({"id": rec.request_id, "ok": rec.ok}) + "\\n")

with WorkerPool(2) as pool:
    print(" ".join(map(str, pool.pids)), flush=True)
    asyncio.run(run_closed_loop(ChatClient(sys.argv[1]), [{"messages": [{"role": "user", "content": "x"}],
                "k3_ttft_ms": 5, "k3_itl_ms": 2, "k3_chunks": 3}], concurrency=4, max_requests=10**6,
                max_duration_s=30, sink=sink, workers=pool))
"""


def test_a_killed_parent_keeps_what_it_wrote_and_leaves_no_worker_loading(server: KnownTimingServer,
                                                                          tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", PARENT, server.url, str(out)], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(pids) == 2
        deadline = time.monotonic() + 20
        while (not out.exists() or len(out.read_text().splitlines()) < 20) and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = out.read_text().splitlines()
    assert len(lines) >= 20 and all(json.loads(line)["ok"] for line in lines)
    # the workers see their job pipe close and exit at once: no load keeps going to the target
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- the calibration over workers ---------------------------------------------------------------------------


def test_calibration_over_workers_is_judged_per_worker_and_whole(server: KnownTimingServer,
                                                                  pool: WorkerPool) -> None:
    rep = asyncio.run(calibrate_workers(pool, server.url, concurrency=7, known_ttft_ms=30, known_itl_ms=10,
                                        chunks=10, rounds=2))
    assert rep.workers == 2 and [w["concurrency"] for w in rep.per_worker] == [4, 3]
    assert rep.concurrency == 7 and rep.requests == 14 and [w["requests"] for w in rep.per_worker] == [8, 6]
    # the whole is valid only when each worker is
    assert rep.valid == all(w["valid"] for w in rep.per_worker) and rep.valid == (rep.reason.startswith(
        "client timing error within bound"))
    assert rep.ok == 14 and rep.itl_count_ok and rep.tokens_from_usage_ok
    assert all(w["loop_lag"]["samples"] > 0 for w in rep.per_worker)
    bad = asyncio.run(calibrate_workers(pool, server.url, concurrency=4, known_ttft_ms=30, known_itl_ms=10,
                                        chunks=10, max_error_ms=0.001))
    assert not bad.valid and "worker 1 of 2 (2 streams)" in bad.reason and "worker 2 of 2" in bad.reason
    from k3lib.io.load import summarize

    gated = gate_phase(summarize([], name="x", kind="closed-loop", target_url="u", started_wall_ns=0, duration_s=1,
                                 max_requests=1, max_duration_s=1), bad)
    assert "over 2 worker processes" in (gated.invalid_reason or "")


def test_a_worker_count_instead_of_a_pool_is_one_clear_error(server: KnownTimingServer) -> None:
    with pytest.raises(BadInputError, match="a started k3lib.io.workers.WorkerPool"):
        asyncio.run(run_closed_loop(ChatClient(server.url), [FAST], concurrency=2, max_requests=4, max_duration_s=5,
                                    workers=2))
