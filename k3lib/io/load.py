"""Load generator: closed-loop phases (a linear ramp of streams) and soak phases.

Every phase is bounded by a request count AND a duration and stops by itself: requests still running at the
deadline are cancelled and recorded as such. Each finished request goes to `sink` at once, so a killed run
keeps what it measured.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from k3lib.io.calibration import CalibrationDict, measure_event_loop_lag
from k3lib.core.stats import percentile
from k3lib.io.client import ChatClient, ChatRecord, quiet_collector, record_of
from k3lib.core.guards import is_loopback_url
from k3lib.core import progress
from k3lib.core.errors import BadInputError
from k3lib.io.shapes import ChatBody

Sink = Callable[[ChatRecord], None]
#: where a phase's load is sent from: None or 1 (this process), or a started `k3lib.io.workers.WorkerPool`
Workers = Any
BodySource = Sequence[Mapping[str, Any]] | Callable[[int], Mapping[str, Any]]

#: After the deadline, how long the phase waits for cancelled requests to hand back their partial records.
CANCEL_GRACE_S = 5.0


# ---------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Percentiles:
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        vals = [v for v in values if v is not None]
        return cls(count=len(vals), mean=sum(vals) / len(vals) if vals else None,
                   p50=percentile(vals, 50), p90=percentile(vals, 90), p95=percentile(vals, 95),
                   p99=percentile(vals, 99), max=max(vals, default=None))


@dataclass(frozen=True)
class SliceSummary:
    """One time slice of a phase, by completion time — drift over a soak shows here."""

    start_s: float
    end_s: float
    ok: int
    failed: int
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    e2e_ms_p50: float | None
    output_tokens_per_s: float


@dataclass(frozen=True)
class PhaseSummary:
    """What one load phase did. Latencies in ms from the client's side; tokens from `usage`."""

    name: str
    kind: str
    target_url: str
    started_wall_ns: int
    duration_s: float
    max_requests: int
    max_duration_s: float
    concurrency: int | None
    rate_rps: float | None
    sent: int
    ok: int
    failed: int
    cancelled: int
    #: "max_requests" (all planned requests finished) or "max_duration" (the deadline cut the phase)
    stopped_by: str
    requests_per_s: float
    output_tokens_per_s: float
    prompt_tokens: int
    completion_tokens: int
    ttft_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    client_queue_ms: Percentiles
    errors: dict[str, int]
    client_cpu_s: float
    loop_lag_ms_p99: float | None
    windows: tuple[SliceSummary, ...] = ()
    valid: bool = True
    invalid_reason: str | None = None
    calibration: CalibrationDict | None = None
    #: how many processes sent the phase's load (1: this one), each worker's loop lag p99, and why the phase sent
    #: less than planned when a worker process ended before its share did (its finished records are kept)
    workers: int = 1
    worker_loop_lag_ms_p99: tuple[float | None, ...] = ()
    degraded: str | None = None


class RequestStat(NamedTuple):
    """The few numbers a summary needs from a record; the record itself goes to the sink and is dropped."""

    done_s: float
    ok: bool
    cancelled: bool
    error_kind: str | None
    ttft_ms: float | None
    itl_ms: tuple[float, ...]
    e2e_ms: float | None
    client_queue_ms: float | None
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def of(cls, rec: ChatRecord, phase_start_ns: int) -> RequestStat:
        done = rec.done_ns if rec.done_ns is not None else time.perf_counter_ns()
        return cls(done_s=(done - phase_start_ns) / 1e9, ok=rec.ok, cancelled=rec.cancelled,
                   error_kind=rec.error_kind or (None if rec.ok else "HTTP"), ttft_ms=rec.ttft_ms,
                   itl_ms=rec.itl_ms, e2e_ms=rec.e2e_ms, client_queue_ms=rec.client_queue_ms,
                   prompt_tokens=rec.prompt_tokens or 0, completion_tokens=rec.completion_tokens or 0)


# ---------------------------------------------------------------------------------------------------------
# Pure parts
# ---------------------------------------------------------------------------------------------------------


@dataclass
class RequestBudget:
    """A bound in requests and in time (a `time.perf_counter_ns()` deadline): `take()` grants one more request or
    says no, and `stopped_by` names the bound that ended it ("max_duration_s" or "max_requests")."""

    max_requests: int
    deadline_ns: int
    sent: int = 0
    stopped_by: str | None = None

    def take(self) -> bool:
        if self.stopped_by is None and time.perf_counter_ns() >= self.deadline_ns:
            self.stopped_by = "max_duration_s"
        if self.stopped_by is None and self.sent >= self.max_requests:
            self.stopped_by = "max_requests"
        if self.stopped_by is not None:
            return False
        self.sent += 1
        return True


def ramp_offsets_s(concurrency: int, ramp_s: float) -> list[float]:
    """When each closed-loop worker starts: a linear ramp from 1 worker at t=0 to all of them at `ramp_s`."""
    if concurrency <= 1 or ramp_s <= 0:
        return [0.0] * max(concurrency, 0)
    return [ramp_s * w / (concurrency - 1) for w in range(concurrency)]


def summarize(stats: Sequence[RequestStat], *, name: str, kind: str, target_url: str, started_wall_ns: int,
              duration_s: float, max_requests: int, max_duration_s: float, concurrency: int | None = None,
              rate_rps: float | None = None, planned: int | None = None, client_cpu_s: float = 0.0,
              loop_lag_ms_p99: float | None = None, window_s: float | None = None) -> PhaseSummary:
    """Pure: stats of finished requests → phase summary. Latency percentiles are over successful requests."""
    ok = [s for s in stats if s.ok]
    cancelled = sum(1 for s in stats if s.cancelled)
    failed = len(stats) - len(ok) - cancelled
    errors: dict[str, int] = {}
    for s in stats:
        if not s.ok:
            errors[s.error_kind or "unknown"] = errors.get(s.error_kind or "unknown", 0) + 1
    planned = max_requests if planned is None else planned
    stopped_by = "max_requests" if len(stats) >= planned and cancelled == 0 else "max_duration"
    completion = sum(s.completion_tokens for s in ok)
    span = duration_s if duration_s > 0 else float("nan")
    windows: tuple[SliceSummary, ...] = ()
    if window_s and window_s > 0 and duration_s > 0:
        out = []
        # windows tile the planned span; requests cancelled just after the deadline fall in the last one
        span_s = min(duration_s, max_duration_s)
        n = max(1, math.ceil(span_s / window_s - 1e-9))
        for k in range(n):
            lo, hi = k * window_s, min((k + 1) * window_s, span_s)
            inside = [s for s in stats if lo <= s.done_s < hi or (k == n - 1 and s.done_s >= hi)]
            win_ok = [s for s in inside if s.ok]
            ttfts = [s.ttft_ms for s in win_ok if s.ttft_ms is not None]
            out.append(SliceSummary(
                start_s=lo, end_s=hi, ok=len(win_ok), failed=len(inside) - len(win_ok),
                ttft_ms_p50=percentile(ttfts, 50), ttft_ms_p99=percentile(ttfts, 99),
                e2e_ms_p50=percentile([s.e2e_ms for s in win_ok if s.e2e_ms is not None], 50),
                output_tokens_per_s=sum(s.completion_tokens for s in win_ok) / max(hi - lo, 1e-9)))
        windows = tuple(out)
    return PhaseSummary(
        name=name, kind=kind, target_url=target_url, started_wall_ns=started_wall_ns, duration_s=duration_s,
        max_requests=max_requests, max_duration_s=max_duration_s, concurrency=concurrency, rate_rps=rate_rps,
        sent=len(stats), ok=len(ok), failed=failed, cancelled=cancelled, stopped_by=stopped_by,
        requests_per_s=len(ok) / span if duration_s > 0 else 0.0,
        output_tokens_per_s=completion / span if duration_s > 0 else 0.0,
        prompt_tokens=sum(s.prompt_tokens for s in ok), completion_tokens=completion,
        ttft_ms=Percentiles.of([s.ttft_ms for s in ok if s.ttft_ms is not None]),
        itl_ms=Percentiles.of([g for s in ok for g in s.itl_ms]),
        e2e_ms=Percentiles.of([s.e2e_ms for s in ok if s.e2e_ms is not None]),
        client_queue_ms=Percentiles.of([s.client_queue_ms for s in stats if s.client_queue_ms is not None]),
        errors=errors, client_cpu_s=client_cpu_s, loop_lag_ms_p99=loop_lag_ms_p99, windows=windows)


def check_load_target(url: str, allow_remote_load: bool) -> None:
    """Load goes to loopback only unless the caller says otherwise: a mistyped URL must not load production."""
    if not allow_remote_load and not is_loopback_url(url):
        raise BadInputError(f"refusing to send load to non-loopback target {url}; if this server is meant to take "
                            "the load, set `allow_remote_load: true` under `target:` in the parameters file (a "
                            "direct call of the load functions: allow_remote_load=True)",
                            field="target.allow_remote_load")


def _body_for(bodies: BodySource, i: int) -> ChatBody:
    body = cast(ChatBody, dict(bodies(i) if callable(bodies) else bodies[i % len(bodies)]))
    # load phases measure TTFT and ITL, which only a stream shows
    body.setdefault("stream", True)
    return body


# ---------------------------------------------------------------------------------------------------------
# The phase runner
# ---------------------------------------------------------------------------------------------------------


class _Phase:
    def __init__(self, client: ChatClient, bodies: BodySource, *, name: str, max_requests: int,
                 max_duration_s: float, request_timeout_s: float, sink: Sink | None,
                 drain_s: float = 0.0, start_ns: int | None = None,
                 wall_ns: int | None = None, first_index: int = 0, index_step: int = 1) -> None:
        if max_requests < 0 or max_duration_s <= 0:
            raise BadInputError("a load phase needs max_requests >= 0 and max_duration_s > 0",
                                field="max_requests/max_duration_s")
        if drain_s < 0:
            raise BadInputError(f"a load phase's drain_s must be >= 0, got {drain_s}", field="drain_s")
        if not callable(bodies) and not bodies:
            raise BadInputError("a load phase needs at least one request body", field="bodies")
        self.client, self.bodies, self.name = client, bodies, name
        self.max_requests, self.max_duration_s = max_requests, max_duration_s
        self.request_timeout_s, self.sink = request_timeout_s, sink
        # a phase spread over worker processes has one start instant for all (`start_ns`, on the host's monotonic
        # clock that every process shares) and each worker takes every `index_step`-th request from `first_index`
        self.start_ns = time.perf_counter_ns() if start_ns is None else start_ns
        self.wall_ns = time.time_ns() if wall_ns is None else wall_ns
        self.next_index, self.index_step = first_index, index_step
        self.stopped = False
        # requests are sent until `send_deadline_ns`; those in flight then may finish until `deadline_ns` (the
        # drain), after which they are cut and recorded as cancelled
        self.send_deadline_ns = self.start_ns + int(max_duration_s * 1e9)
        self.deadline_ns = self.send_deadline_ns + int(drain_s * 1e9)
        self.drain_s = drain_s
        self.stats: list[RequestStat] = []
        self.issued = 0
        self.sink_error: BaseException | None = None
        self.refused: progress.ConsentExceeded | None = None  # a request past the plan's at-most: nothing sent
        self.cpu0 = time.process_time()

    def take_index(self) -> int | None:
        if (self.next_index >= self.max_requests or time.perf_counter_ns() >= self.send_deadline_ns
                or self.sink_error or self.refused or self.stopped):
            return None
        i = self.next_index
        self.next_index += self.index_step
        self.issued += 1
        return i

    async def one(self, i: int, enqueued_ns: int) -> None:
        try:
            rec = await self.client.chat_body(
                _body_for(self.bodies, i), strict=False, request_id=f"{self.name}-{i}",
                timeout_s=self.request_timeout_s, enqueued_ns=enqueued_ns, deadline_ns=self.deadline_ns)
        except asyncio.CancelledError as exc:
            rec = record_of(exc) or _cancelled_record(self.client, f"{self.name}-{i}", enqueued_ns)
            self.deliver(rec)
            raise
        except progress.ConsentExceeded as exc:  # refused before it was sent: the phase stops, then says why
            self.refused = self.refused or exc
            return
        self.deliver(rec)

    def deliver(self, rec: ChatRecord) -> None:
        self.stats.append(RequestStat.of(rec, self.start_ns))
        if self.sink is not None and self.sink_error is None:
            try:
                self.sink(rec)
            except Exception as exc:  # noqa: BLE001 — re-raised once the phase has stopped
                self.sink_error = exc

    async def wait(self, tasks: Sequence[asyncio.Task[Any]]) -> None:
        """Wait for tasks up to the deadline plus a grace, then cancel what is left (they record themselves)."""
        if not tasks:
            return
        remaining = (self.deadline_ns - time.perf_counter_ns()) / 1e9 + CANCEL_GRACE_S
        _, pending = await asyncio.wait(tasks, timeout=max(remaining, 0.0))
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=CANCEL_GRACE_S)

    def summary(self, *, kind: str, concurrency: int | None, planned: int,
                lag_ms_p99: float | None, window_s: float | None) -> PhaseSummary:
        if self.sink_error is not None:
            raise self.sink_error
        if self.refused is not None:  # what was measured is in the sink already; the caller stops its axis
            raise self.refused
        duration = (max(time.perf_counter_ns(), self.start_ns) - self.start_ns) / 1e9
        return summarize(self.stats, name=self.name, kind=kind, target_url=self.client.base_url,
                         started_wall_ns=self.wall_ns, duration_s=duration, max_requests=self.max_requests,
                         max_duration_s=self.max_duration_s, concurrency=concurrency,
                         planned=planned, client_cpu_s=time.process_time() - self.cpu0,
                         loop_lag_ms_p99=lag_ms_p99, window_s=window_s)


def _cancelled_record(client: ChatClient, rid: str, enqueued_ns: int) -> ChatRecord:
    now = time.perf_counter_ns()
    return ChatRecord(request_id=rid, url=client.base_url + "/v1/chat/completions", stream=True,
                      wall_anchor_ns=time.time_ns(), perf_anchor_ns=now, enqueued_ns=enqueued_ns, done_ns=now,
                      error="cancelled before it was sent", error_kind="Cancelled", cancelled=True)


async def _with_lag(phase: _Phase, work: Any) -> float | None:
    """Run a phase's work with the event-loop lag measured beside it and the heap frozen out of the collector
    (`quiet_collector`: a freeze, no collection, so nothing is added to the phase's window)."""
    stop = asyncio.Event()
    with quiet_collector():
        lag_task = asyncio.create_task(measure_event_loop_lag(
            phase.max_duration_s + phase.drain_s + 2 * CANCEL_GRACE_S, interval_ms=10.0, stop=stop))
        try:
            await work
        finally:
            stop.set()
            lag = await lag_task
    return lag.p99_ms


async def closed_loop_work(phase: _Phase, start_offsets_s: Sequence[float]) -> None:
    """One stream per start offset (s from the phase's start): each sends a request, waits for it, sends the next,
    until the phase's bounds say no."""

    async def stream(start_offset_s: float) -> None:
        delay = phase.start_ns / 1e9 + start_offset_s - time.perf_counter_ns() / 1e9
        if delay > 0:
            await asyncio.sleep(min(delay, max(0.0, (phase.send_deadline_ns - time.perf_counter_ns()) / 1e9)))
        while (i := phase.take_index()) is not None:
            await phase.one(i, time.perf_counter_ns())

    await phase.wait([asyncio.create_task(stream(off)) for off in start_offsets_s])


def _spread(workers: Any, streams: int | None) -> bool:
    """Whether a phase goes to worker processes: a started `k3lib.io.workers.WorkerPool` of more than one worker,
    and more than one stream. (The pool is passed in, not made here: `k3lib.io.workers` stands on this module.)"""
    if workers is None or workers == 1:
        return False
    if isinstance(workers, int):
        raise BadInputError(f"workers={workers!r}: pass None or 1 (this process) or a started "
                            "k3lib.io.workers.WorkerPool", field="workers")
    return bool(workers.size > 1 and (streams is None or streams > 1))


async def run_closed_loop(client: ChatClient, bodies: BodySource, *, concurrency: int, max_requests: int,
                          max_duration_s: float, ramp_s: float = 0.0, request_timeout_s: float = 600.0,
                          sink: Sink | None = None, name: str = "closed-loop", allow_remote_load: bool = False,
                          window_s: float | None = None, drain_s: float = 0.0, workers: Workers = None,
                          _kind: str = "closed-loop") -> PhaseSummary:
    """`concurrency` workers each send one request, wait for it, send the next; workers start on a linear ramp.

    Requests leave for `max_duration_s`; with `drain_s` those in flight then may finish for up to `drain_s` more
    before they are cut. Without a drain a window about as long as one request keeps mostly the requests that
    happened to be fast (the slow ones are cut), and on a busy machine may complete none at all.

    `workers` (a started `k3lib.io.workers.WorkerPool`) spreads the streams over its worker
    processes, each with its own event loop and client (see k3lib.io.workers); None or 1: this process."""
    check_load_target(client.base_url, allow_remote_load)
    if concurrency < 1:
        raise BadInputError(f"concurrency must be >= 1, got {concurrency}", field="concurrency")
    if _spread(workers, concurrency):
        return await workers.spread_phase(
            client, bodies, offsets_s=ramp_offsets_s(concurrency, ramp_s), name=name,
            kind=_kind, max_requests=max_requests, max_duration_s=max_duration_s, drain_s=drain_s,
            request_timeout_s=request_timeout_s, sink=sink, window_s=window_s, concurrency=concurrency,
            planned=max_requests)
    phase = _Phase(client, bodies, name=name, max_requests=max_requests, max_duration_s=max_duration_s,
                   request_timeout_s=request_timeout_s, sink=sink, drain_s=drain_s)

    lag = await _with_lag(phase, closed_loop_work(phase, ramp_offsets_s(concurrency, ramp_s)))
    return phase.summary(kind=_kind, concurrency=concurrency, planned=max_requests,
                         lag_ms_p99=lag, window_s=window_s)


async def run_soak(client: ChatClient, bodies: BodySource, *, concurrency: int, duration_s: float,
                   max_requests: int, window_s: float = 60.0, request_timeout_s: float = 600.0,
                   sink: Sink | None = None, name: str = "soak", allow_remote_load: bool = False,
                   drain_s: float = 0.0, workers: Workers = None) -> PhaseSummary:
    """Constant concurrency for a long, bounded time, summarized per window so drift is visible.

    It stops at `duration_s` or `max_requests`, whichever comes first: a soak is expected to end on duration,
    so set `max_requests` to a safety cap above what the duration needs. With `drain_s` the requests in flight
    at the end may finish for that long before they are cut (recorded as cancelled).
    """
    return await run_closed_loop(client, bodies, concurrency=concurrency, max_requests=max_requests,
                                 max_duration_s=duration_s, request_timeout_s=request_timeout_s, sink=sink,
                                 name=name, allow_remote_load=allow_remote_load, window_s=window_s, drain_s=drain_s,
                                 workers=workers, _kind="soak")
