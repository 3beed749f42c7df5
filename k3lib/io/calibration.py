"""Self-calibration: how wrong is the client's own clock-work? A server with known timing answers that.

Against a known-timing server (k3lib.io.knowntiming), `calibrate` compares what the client measured with the
schedule and with the server's own send stamps, with the event-loop lag measured alongside, and `gate_phase`
marks a load phase invalid past the bound.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypedDict, cast

from k3lib.io.client import ChatClient, ChatRecord, quiet_collector
from k3lib.core.stats import percentile
from k3lib.io.shapes import ChatMessage

#: Default bound on the client's p99 timing error; above it a phase's TTFT/ITL are not trusted.
DEFAULT_MAX_ERROR_MS = 10.0


# ---------------------------------------------------------------------------------------------------------
# Event-loop lag
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopLagReport:
    """How late the event loop woke up for a timer: the floor under every client timing taken on it."""

    duration_s: float
    interval_ms: float
    samples: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class LoopLagDict(TypedDict):
    """A `LoopLagReport` as `dataclasses.asdict` gives it (a worker process sends it so)."""

    duration_s: float
    interval_ms: float
    samples: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


async def measure_event_loop_lag(duration_s: float, *, interval_ms: float = 5.0,
                                 stop: asyncio.Event | None = None) -> LoopLagReport:
    """Sleep `interval_ms` repeatedly for `duration_s` (or until `stop` is set) and record each overshoot."""
    lags: list[float] = []
    end = time.perf_counter_ns() + int(duration_s * 1e9)
    interval_ns = int(interval_ms * 1e6)
    while time.perf_counter_ns() < end and not (stop is not None and stop.is_set()):
        target = time.perf_counter_ns() + interval_ns
        await asyncio.sleep(interval_ms / 1e3)
        lags.append(max(0.0, (time.perf_counter_ns() - target) / 1e6))
    return LoopLagReport(duration_s=duration_s, interval_ms=interval_ms, samples=len(lags),
                         p50_ms=percentile(lags, 50), p99_ms=percentile(lags, 99), max_ms=max(lags, default=None))


# ---------------------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationReport:
    """The client's own timing error at one concurrency, against a server whose timing is known.

    `ttft_error_ms` = measured TTFT − scheduled TTFT (includes upload, server wake-up and delivery: an upper
    bound); `itl_error_ms` = measured gap − scheduled gap; `delivery_ms` = client receive mark − the server's
    own send stamp of the same chunk (same monotonic clock, same host): the client-side part alone.
    """

    url: str
    concurrency: int
    requests: int
    ok: int
    known_ttft_ms: float
    known_itl_ms: float
    chunks_per_request: int
    ttft_ms_p50: float | None
    ttft_error_ms_p50: float | None
    ttft_error_ms_p99: float | None
    ttft_error_ms_max: float | None
    itl_error_ms_p50: float | None
    itl_error_ms_p99: float | None
    delivery_ms_p50: float | None
    delivery_ms_p99: float | None
    delivery_ms_max: float | None
    itl_count_ok: bool
    tokens_from_usage_ok: bool
    loop_lag: LoopLagReport
    max_error_ms: float
    valid: bool
    reason: str
    #: how many worker processes sent the streams (1: this process); with more, each worker's own report (its
    #: share of the streams, its own loop lag) is kept, and the whole is valid only when every worker's is too
    workers: int = 1
    per_worker: tuple[CalibrationDict, ...] = ()
    #: samples left out, counted: server send stamps that were not integers, and streams whose delivery delay could
    #: not be paired chunk by chunk (their stamps do not match their chunks)
    stamps_dropped: int = 0
    streams_unpaired: int = 0


class CalibrationDict(TypedDict):
    """A `CalibrationReport` as `calibration_dict` gives it: the record a load phase's summary and the capacity
    evidence keep."""

    url: str
    concurrency: int
    requests: int
    ok: int
    known_ttft_ms: float
    known_itl_ms: float
    chunks_per_request: int
    ttft_ms_p50: float | None
    ttft_error_ms_p50: float | None
    ttft_error_ms_p99: float | None
    ttft_error_ms_max: float | None
    itl_error_ms_p50: float | None
    itl_error_ms_p99: float | None
    delivery_ms_p50: float | None
    delivery_ms_p99: float | None
    delivery_ms_max: float | None
    itl_count_ok: bool
    tokens_from_usage_ok: bool
    loop_lag: LoopLagDict
    max_error_ms: float
    valid: bool
    reason: str
    workers: int
    per_worker: tuple[CalibrationDict, ...]
    stamps_dropped: int
    streams_unpaired: int


def calibration_dict(report: CalibrationReport) -> CalibrationDict:
    """The report as plain data (`dataclasses.asdict`: its loop lag and per-worker reports as dicts)."""
    return cast(CalibrationDict, asdict(report))


def _server_stamps(rec: ChatRecord) -> tuple[list[int], int]:
    """The server's send stamps of a stream's chunks, and how many stamps were unreadable (counted, not hidden)."""
    stamps, bad = [], 0
    for line in rec.raw_lines:
        if '"k3_sent_ns"' in line:
            try:
                stamps.append(int(json.loads(line)["k3_sent_ns"]))
            except (ValueError, KeyError, TypeError):
                bad += 1
    return stamps, bad


def assess(records: Sequence[ChatRecord], *, url: str, concurrency: int, known_ttft_ms: float,
           known_itl_ms: float, chunks: int, tokens_per_chunk: int, loop_lag: LoopLagReport,
           max_error_ms: float = DEFAULT_MAX_ERROR_MS) -> CalibrationReport:
    """Pure: turn calibration records into a report and a verdict."""
    ok = [r for r in records if r.ok]
    ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    ttft_err = [t - known_ttft_ms for t in ttft]
    itl_err = [g - known_itl_ms for r in ok for g in r.itl_ms]
    delivery: list[float] = []
    dropped = unpaired = 0
    for r in ok:
        stamps, bad = _server_stamps(r)
        dropped += bad
        if len(stamps) == len(r.output_chunk_ns):
            delivery.extend((c - s) / 1e6 for c, s in zip(r.output_chunk_ns, stamps))
        else:
            unpaired += 1
    itl_count_ok = all(len(r.itl_ms) == chunks - 1 for r in ok) and bool(ok)
    tokens_ok = all(r.completion_tokens == chunks * tokens_per_chunk for r in ok) and bool(ok)
    reasons = []
    if len(ok) < len(records) or not ok:
        reasons.append(f"{len(records) - len(ok)} of {len(records)} calibration requests failed")
    p99_ttft = percentile([abs(e) for e in ttft_err], 99)
    p99_itl = percentile([abs(e) for e in itl_err], 99)
    p99_delivery = percentile(delivery, 99)
    for label, value in (("TTFT error p99", p99_ttft), ("ITL error p99", p99_itl),
                         ("delivery delay p99", p99_delivery)):
        if value is not None and value > max_error_ms:
            reasons.append(f"{label} {value:.2f} ms > bound {max_error_ms:g} ms")
    if not itl_count_ok:
        reasons.append(f"not every stream showed {chunks - 1} inter-chunk gaps")
    if not tokens_ok:
        reasons.append("completion tokens from usage do not match the server's count")
    return CalibrationReport(
        url=url, concurrency=concurrency, requests=len(records), ok=len(ok), known_ttft_ms=known_ttft_ms,
        known_itl_ms=known_itl_ms, chunks_per_request=chunks, ttft_ms_p50=percentile(ttft, 50),
        ttft_error_ms_p50=percentile(ttft_err, 50), ttft_error_ms_p99=percentile(ttft_err, 99),
        ttft_error_ms_max=max(ttft_err, default=None), itl_error_ms_p50=percentile(itl_err, 50),
        itl_error_ms_p99=percentile(itl_err, 99), delivery_ms_p50=percentile(delivery, 50),
        delivery_ms_p99=p99_delivery, delivery_ms_max=max(delivery, default=None), itl_count_ok=itl_count_ok,
        tokens_from_usage_ok=tokens_ok, loop_lag=loop_lag, max_error_ms=max_error_ms, valid=not reasons,
        reason=("; ".join(reasons) or "client timing error within bound") + _dropped_text(dropped, unpaired, len(ok)),
        stamps_dropped=dropped, streams_unpaired=unpaired)


def _dropped_text(dropped: int, unpaired: int, streams: int) -> str:
    """What the delivery figures left out, said beside the verdict (empty when nothing was left out)."""
    said = [f"{dropped} server send stamp(s) unreadable" if dropped else "",
            f"{unpaired} of {streams} streams' delivery not paired chunk by chunk" if unpaired else ""]
    return ("; left out of the delivery delay: " + ", ".join(x for x in said if x)) if dropped or unpaired else ""


async def calibrate(client: ChatClient | None, url: str | None = None, *, concurrency: int,
                    known_ttft_ms: float, known_itl_ms: float, chunks: int = 20, tokens_per_chunk: int = 2,
                    rounds: int = 1, max_error_ms: float = DEFAULT_MAX_ERROR_MS) -> CalibrationReport:
    """Run `concurrency` simultaneous streams (× `rounds`) against a known-timing server at `url`.

    The server must honour the `k3_ttft_ms`/`k3_itl_ms`/`k3_chunks` knobs (`KnownTimingServer` does) and send
    `tokens_per_chunk` tokens per chunk. `client` lends its settings (timeouts, pool size); its target is
    replaced by `url` when both are given.
    """
    if client is None:
        if url is None:
            raise ValueError("calibrate needs a client or a url")
        client = ChatClient(url)
        own = True
    elif url is not None and client.base_url != ChatClient(url).base_url:
        client = client.with_base_url(url)
        own = True
    else:
        own = False
    body = calibration_body(client.model, known_ttft_ms=known_ttft_ms, known_itl_ms=known_itl_ms, chunks=chunks,
                            tokens_per_chunk=tokens_per_chunk)
    timeout_s = calibration_timeout_s(known_ttft_ms, known_itl_ms, chunks)
    try:
        await warm_up(client, body, timeout_s)
        records, lag = await calibration_records(client, body, concurrency=concurrency, rounds=rounds,
                                                 timeout_s=timeout_s)
    finally:
        if own:
            await client.aclose()
    return assess(records, url=client.base_url, concurrency=concurrency, known_ttft_ms=known_ttft_ms,
                  known_itl_ms=known_itl_ms, chunks=chunks, tokens_per_chunk=tokens_per_chunk, loop_lag=lag,
                  max_error_ms=max_error_ms)


class CalibrationBody(TypedDict):
    """A chat body with the known-timing server's knobs (k3lib.io.knowntiming)."""

    model: str
    stream: bool
    max_tokens: int
    messages: list[ChatMessage]
    k3_ttft_ms: float
    k3_itl_ms: float
    k3_chunks: int


def calibration_body(model: str | None, *, known_ttft_ms: float, known_itl_ms: float, chunks: int,
                     tokens_per_chunk: int = 2) -> CalibrationBody:
    """The request every calibration stream sends: the known-timing server's knobs set to the schedule."""
    return {"model": model or "known-timing", "stream": True, "max_tokens": chunks * tokens_per_chunk,
            "messages": [{"role": "user", "content": "calibrate"}],
            "k3_ttft_ms": known_ttft_ms, "k3_itl_ms": known_itl_ms, "k3_chunks": chunks}


def calibration_timeout_s(known_ttft_ms: float, known_itl_ms: float, chunks: int) -> float:
    return 30.0 + (known_ttft_ms + chunks * known_itl_ms) / 1e3 * 4


async def warm_up(client: ChatClient, body: CalibrationBody, timeout_s: float) -> None:
    """One unmeasured request: a fresh server's first answer pays for imports, connection set-up and page faults
    that no load phase sees, and would be charged to the client as timing error."""
    tpc = max(1, int(body["max_tokens"]) // max(1, int(body["k3_chunks"])))
    warm: CalibrationBody = {**body, "k3_ttft_ms": 0, "k3_itl_ms": 0, "k3_chunks": 2, "max_tokens": 2 * tpc}
    await client.chat_body(warm, strict=False, timeout_s=timeout_s, request_id="calib-warmup")


async def calibration_records(client: ChatClient, body: CalibrationBody, *, concurrency: int, rounds: int,
                              timeout_s: float, start_ns: int | None = None,
                              first_id: int = 0) -> tuple[list[ChatRecord], LoopLagReport]:
    """`rounds` rounds of `concurrency` simultaneous streams of `body`, with the loop lag measured beside them;
    from `start_ns` (a `perf_counter_ns` instant) when given, so that worker processes start together."""
    stop = asyncio.Event()
    records: list[ChatRecord] = []
    with quiet_collector():  # as in the load phases it vouches for
        lag_task = asyncio.create_task(measure_event_loop_lag(timeout_s * rounds + 1.0, stop=stop))
        try:
            while start_ns is not None and (delay := (start_ns - time.perf_counter_ns()) / 1e9) > 0:
                await asyncio.sleep(delay)
            for _ in range(rounds):
                batch = await asyncio.gather(*(
                    client.chat_body(body, strict=False, timeout_s=timeout_s, request_id=f"calib-{first_id + i}")
                    for i in range(concurrency)))
                records.extend(batch)
        finally:
            stop.set()
            lag = await lag_task
    return records, lag


def gate_phase(summary: Any, report: CalibrationReport) -> Any:
    """Mark a load-phase summary invalid when the calibration at its concurrency failed.

    Works on any frozen dataclass with `valid` and `invalid_reason` fields (k3lib.io.load.PhaseSummary).
    """
    if report.valid:
        return replace(summary, calibration=calibration_dict(report))
    over = f" over {report.workers} worker processes" if report.workers > 1 else ""
    reason = f"client self-calibration failed at concurrency {report.concurrency}{over}: {report.reason}"
    return replace(summary, valid=False, invalid_reason=reason, calibration=calibration_dict(report))
