"""Load phases: bounded by request count and duration (even against a stalled server), a linear ramp, records
delivered to the sink as they finish, remote targets refused."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import httpx
import pytest

from k3lib.io.knowntiming import KnownTimingConfig, KnownTimingServer
from k3lib.io.client import ChatClient, ChatRecord
from k3lib.core.errors import BadInputError
from k3lib.io.load import (
    RequestStat,
    check_load_target,
    ramp_offsets_s,
    run_closed_loop,
    run_soak,
    summarize,
)

MSG = [{"role": "user", "content": "load"}]
FAST = {"messages": MSG, "k3_ttft_ms": 5, "k3_itl_ms": 2, "k3_chunks": 3}
STALL = {"messages": MSG, "k3_ttft_ms": 5, "k3_itl_ms": 2, "k3_chunks": 3, "k3_stall_s": 30}


@pytest.fixture(scope="module")
def server() -> Any:
    with KnownTimingServer(KnownTimingConfig(tokens_per_chunk=2)) as srv:
        yield srv


def run(coro_factory: Any) -> Any:
    return asyncio.run(coro_factory())


# -- pure parts ---------------------------------------------------------------------------------------------


def test_linear_ramp() -> None:
    assert ramp_offsets_s(5, 2.0) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    assert ramp_offsets_s(3, 0.0) == [0.0, 0.0, 0.0]


def stat(done_s: float, ok: bool = True, ttft: float = 10.0, kind: str | None = None,
         cancelled: bool = False) -> RequestStat:
    return RequestStat(done_s=done_s, ok=ok, cancelled=cancelled, error_kind=kind, ttft_ms=ttft if ok else None,
                       itl_ms=(1.0, 3.0) if ok else (), e2e_ms=20.0 if ok else None, client_queue_ms=0.5,
                       prompt_tokens=5, completion_tokens=4 if ok else 0)


def test_summarize_is_pure_and_counts() -> None:
    stats = [stat(0.5), stat(1.5, ttft=30.0), stat(1.7, ok=False, kind="APIError"),
             stat(2.0, ok=False, kind="Cancelled", cancelled=True)]
    s = summarize(stats, name="p", kind="closed-loop", target_url="http://127.0.0.1:1", started_wall_ns=1,
                  duration_s=2.0, max_requests=10, max_duration_s=2.0, window_s=1.0)
    assert (s.sent, s.ok, s.failed, s.cancelled, s.stopped_by) == (4, 2, 1, 1, "max_duration")
    assert s.errors == {"APIError": 1, "Cancelled": 1}
    assert s.ttft_ms.p50 == pytest.approx(20.0) and s.ttft_ms.max == 30.0 and s.ttft_ms.count == 2
    assert s.itl_ms.count == 4 and s.itl_ms.mean == pytest.approx(2.0)
    assert s.completion_tokens == 8 and s.output_tokens_per_s == pytest.approx(4.0)
    assert [(w.ok, w.failed) for w in s.windows] == [(1, 0), (1, 2)]
    d = json.loads(json.dumps(dataclasses.asdict(s)))
    assert d["ttft_ms"]["p99"] == pytest.approx(s.ttft_ms.p99) and len(d["windows"]) == 2


@pytest.mark.parametrize("url, allowed", [
    pytest.param("http://127.0.0.1:8000", True, id="ipv4-loopback"),
    pytest.param("http://localhost:8000", True, id="localhost"),
    pytest.param("http://[::1]:8000", True, id="ipv6-loopback"),
    pytest.param("http://10.0.0.5:8000", False, id="private"),
    pytest.param("https://vllm.prod.example.com", False, id="remote-name"),
])
def test_remote_load_refused_unless_allowed(url: str, allowed: bool) -> None:
    if allowed:
        check_load_target(url, False)
    else:
        with pytest.raises(BadInputError, match="allow_remote_load=True"):
            check_load_target(url, False)
        check_load_target(url, True)


def test_run_refuses_remote_before_sending() -> None:
    sent: list[httpx.Request] = []
    client = ChatClient("http://192.0.2.10:8000", model="m",
                        transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500)))
    with pytest.raises(BadInputError):
        run(lambda: run_closed_loop(client, [FAST], concurrency=1, max_requests=1, max_duration_s=1))
    assert sent == []


# -- phases against a real server ------------------------------------------------------------------------


def test_closed_loop_stops_at_request_bound_and_sinks_every_record(server: KnownTimingServer) -> None:
    seen: list[ChatRecord] = []
    client = ChatClient(server.url)
    s = run(lambda: run_closed_loop(client, [FAST], concurrency=4, max_requests=10, max_duration_s=20,
                                    sink=seen.append))
    assert (s.sent, s.ok, s.failed, s.cancelled, s.stopped_by) == (10, 10, 0, 0, "max_requests")
    assert len(seen) == 10 and len({r.request_id for r in seen}) == 10
    assert all(r.ok and r.completion_tokens == 6 for r in seen)
    assert s.completion_tokens == 60 and s.duration_s < 10
    assert s.ttft_ms.count == 10 and s.itl_ms.count == 20 and s.client_queue_ms.count == 10
    assert s.concurrency == 4 and s.loop_lag_ms_p99 is not None


def test_a_phase_measures_with_the_heap_out_of_the_collector(server: KnownTimingServer) -> None:
    # a full collection of a notebook's heap stops the loop for tens of ms, late marks for every chunk then due:
    # while a phase runs, what existed before it is frozen out of the collector, and it is unfrozen afterwards
    import gc

    before = gc.get_freeze_count()
    frozen_while_running: list[int] = []
    client = ChatClient(server.url)
    sink = lambda rec: frozen_while_running.append(gc.get_freeze_count())
    run(lambda: run_closed_loop(client, [FAST], concurrency=2, max_requests=4, max_duration_s=20, sink=sink))
    assert len(frozen_while_running) == 4 and all(n > before for n in frozen_while_running)
    assert gc.get_freeze_count() == before


def test_the_collection_before_a_phase_is_not_in_its_window(server: KnownTimingServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # a long test process (or a notebook) takes a while to collect: a phase must not pay for one inside its window
    # (a 0.2 s window sent nothing when `quiet_collector` collected after the phase's clock started, in CI)
    import gc

    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: (time.sleep(0.4), real(*a))[1])
    s = run(lambda: run_closed_loop(ChatClient(server.url), [FAST], concurrency=2, max_requests=4,
                                    max_duration_s=0.2, drain_s=5))
    assert s.sent >= 1 and s.ok == s.sent


def test_quiet_collector_nests() -> None:
    import gc

    from k3lib.io.client import quiet_collector

    base = gc.get_freeze_count()
    with quiet_collector():
        outer = gc.get_freeze_count()
        assert outer > base
        with quiet_collector():  # a calibration inside a run
            junk = [[i] for i in range(1000)]
        # the inner exit leaves the outer phase's heap frozen (a frozen object freed meanwhile leaves the count)
        assert gc.get_freeze_count() > base + (outer - base) // 2 and junk
    assert gc.get_freeze_count() == base


def test_closed_loop_stops_at_duration_bound_against_a_stalled_server(server: KnownTimingServer) -> None:
    seen: list[ChatRecord] = []
    t0 = time.perf_counter()
    s = run(lambda: run_closed_loop(ChatClient(server.url), [STALL], concurrency=3, max_requests=1000,
                                    max_duration_s=1.0, request_timeout_s=60, sink=seen.append))
    assert time.perf_counter() - t0 < 4.0
    assert (s.sent, s.ok, s.cancelled, s.stopped_by) == (3, 0, 3, "max_duration")
    # the cancelled records keep what had arrived before the deadline
    assert all(r.cancelled and r.error_kind == "Cancelled" and r.content == " w0 w1" for r in seen)


def test_a_drain_lets_the_requests_in_flight_finish_and_sends_no_new_one(server: KnownTimingServer) -> None:
    # each request takes ~0.6 s and the window closes after 0.2 s: without a drain every request is cut (a step
    # that observed nothing); with one the requests in flight finish, and none leaves after the window
    slow = {"messages": MSG, "k3_ttft_ms": 300, "k3_itl_ms": 150, "k3_chunks": 3}

    def phase(drain_s: float) -> Any:
        return run(lambda: run_closed_loop(ChatClient(server.url), [slow], concurrency=2, max_requests=1000,
                                           max_duration_s=0.2, drain_s=drain_s, request_timeout_s=60))

    cut, drained = phase(0.0), phase(30.0)
    # (a worker that a busy machine starts after the window sends nothing: hence 1 to 2 requests)
    assert 1 <= cut.sent <= 2 and cut.ok == 0 and cut.cancelled == cut.sent
    assert 1 <= drained.sent <= 2 and drained.ok == drained.sent and drained.cancelled == 0
    assert drained.ttft_ms.count == drained.sent and drained.duration_s < 30


def test_a_drain_is_bounded_against_a_stalled_server(server: KnownTimingServer) -> None:
    s = run(lambda: run_closed_loop(ChatClient(server.url), [STALL], concurrency=2, max_requests=1000,
                                    max_duration_s=0.3, drain_s=0.5, request_timeout_s=60))
    assert (s.sent, s.ok, s.cancelled) == (2, 0, 2) and s.duration_s < 0.3 + 0.5 + 5
    with pytest.raises(BadInputError, match="drain_s"):
        run(lambda: run_closed_loop(ChatClient(server.url), [FAST], concurrency=1, max_requests=1,
                                    max_duration_s=1, drain_s=-1))


def test_per_request_timeout_inside_a_phase(server: KnownTimingServer) -> None:
    s = run(lambda: run_closed_loop(ChatClient(server.url), [STALL], concurrency=2, max_requests=2,
                                    max_duration_s=10.0, request_timeout_s=0.3))
    assert (s.sent, s.ok, s.failed, s.cancelled) == (2, 0, 2, 0) and s.errors == {"Timeout": 2}
    assert s.duration_s < 3.0


def test_ramp_spreads_worker_starts(server: KnownTimingServer) -> None:
    seen: list[ChatRecord] = []
    t0 = time.time_ns()
    # each request outlasts the ramp step, so every worker takes exactly one request when it starts
    run(lambda: run_closed_loop(ChatClient(server.url), [{**FAST, "k3_ttft_ms": 800, "k3_chunks": 1}],
                                concurrency=3, ramp_s=0.6,
                                max_requests=3, max_duration_s=10, sink=seen.append))
    starts = sorted(r.wall_ns(r.sent_ns) for r in seen)
    # workers 0, 1, 2 start at 0, 0.3 and 0.6 s: never before their place on the ramp (a loaded machine only
    # delays a start, so these lower bounds hold whatever else runs)
    offsets = [(s - t0) / 1e9 for s in starts]
    assert offsets[1] >= 0.3 - 0.05 and offsets[2] >= 0.6 - 0.05, offsets
    assert offsets[2] - offsets[0] >= 0.3, offsets


def test_soak_windows(server: KnownTimingServer) -> None:
    s = run(lambda: run_soak(ChatClient(server.url), [FAST], concurrency=2, duration_s=1.0, max_requests=10_000,
                             window_s=0.5))
    assert s.kind == "soak" and s.stopped_by == "max_duration" and s.ok > 10
    assert len(s.windows) == 2 and all(w.ok > 0 for w in s.windows)


def test_sink_failure_stops_the_phase_and_propagates(server: KnownTimingServer) -> None:
    calls: list[int] = []

    def sink(rec: ChatRecord) -> None:
        calls.append(1)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        run(lambda: run_closed_loop(ChatClient(server.url), [FAST], concurrency=1, max_requests=50,
                                    max_duration_s=10, sink=sink))
    assert len(calls) == 1


def test_failed_requests_counted_by_kind() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "too long", "type": "BadRequestError", "code": 400}})

    client = ChatClient("http://127.0.0.1:9", model="m", transport=httpx.MockTransport(handler))
    s = run(lambda: run_closed_loop(client, [FAST], concurrency=2, max_requests=5, max_duration_s=5))
    assert (s.sent, s.ok, s.failed, s.errors, s.stopped_by) == (5, 0, 5, {"APIError": 5}, "max_requests")
