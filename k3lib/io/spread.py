"""The parent's side of a load phase or a calibration spread over worker processes (k3lib.io.workers): one job per
worker on one start instant, every record they send delivered as it arrives, and the summary or the calibration
report over all of them, with what a worker that ended early lost."""

from __future__ import annotations

import pickle
import signal
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .calibration import (DEFAULT_MAX_ERROR_MS, CalibrationReport, LoopLagReport, assess, calibration_body,
                          calibration_timeout_s)
from .client import ChatClient, ChatRecord
from ..core import progress
from ..core.errors import BadInputError
from .load import CANCEL_GRACE_S, _Phase
from .workerproc import ClientSettings

if TYPE_CHECKING:
    from .workers import Outcome, WorkerPool

#: a spread phase starts this long after its jobs are sent, so that every worker has its job before the start
START_MARGIN_S = 0.25
#: beyond a phase's own bounds (deadline, drain, cancel grace), how long the parent waits for a worker's end
END_GRACE_S = 20.0


def degraded_reason(outcomes: Sequence[Outcome], what: str = "phase") -> str | None:
    """Why a spread phase sent less than planned: each worker that ended before its share did, and what was kept."""
    parts = []
    n = len(outcomes)
    for o in outcomes:
        if o.status == "done":
            continue
        if o.status == "error":
            how = f"failed ({o.error})"
        elif o.error:
            how = o.error
        elif o.returncode is not None and o.returncode < 0:
            try:
                name = signal.Signals(-o.returncode).name
            except ValueError:
                name = "?"
            how = f"was killed by signal {-o.returncode} ({name})"
        else:
            how = f"exited with code {o.returncode}"
        after = f" {o.gone_after_s:.1f} s into the {what}" if o.gone_after_s is not None else ""
        parts.append(f"load worker {o.worker + 1} of {n} {how}{after}: its {o.records} finished records were "
                     "received and kept; its requests in flight were lost and its streams sent nothing after")
    return "; ".join(parts) or None


async def spread_phase(pool: WorkerPool, client: ChatClient, bodies: Any, *,
                       offsets_s: Sequence[float], name: str, kind: str, max_requests: int, max_duration_s: float,
                       drain_s: float, request_timeout_s: float, sink: Any, window_s: float | None,
                       concurrency: int | None, planned: int) -> Any:
    """A closed-loop load phase (k3lib.io.load), one stream per start offset in `offsets_s`, sent by the pool's
    worker processes; the summary is the parent's, over every record."""
    # the phase's own checks, before any process is touched
    _Phase(client, bodies, name=name, max_requests=max_requests, max_duration_s=max_duration_s,
           request_timeout_s=request_timeout_s, sink=None, drain_s=drain_s)
    settings = ClientSettings.of(client)
    try:
        pickle.dumps(bodies)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise BadInputError(f"a phase spread over worker processes needs bodies that pickle (a list, or an instance "
                            f"of a module-level class): {exc}", field="bodies") from None
    n = max(1, min(pool.size, len(offsets_s)))
    perf, wall = time.perf_counter_ns(), time.time_ns()
    start_ns = perf + int(START_MARGIN_S * 1e9)
    phase = _Phase(client, bodies, name=name, max_requests=max_requests, max_duration_s=max_duration_s,
                   request_timeout_s=request_timeout_s, sink=sink, drain_s=drain_s, start_ns=start_ns,
                   wall_ns=wall + (start_ns - perf))
    jobs = [{"kind": "phase", "client": settings, "bodies": bodies, "name": name,
             "max_requests": max_requests, "max_duration_s": max_duration_s, "drain_s": drain_s,
             "request_timeout_s": request_timeout_s, "start_ns": start_ns, "wall_ns": phase.wall_ns,
             "first_index": w, "index_step": n, "offsets_s": list(offsets_s[w::n])}
            for w in range(n)]

    def on_record(w: int, rec: ChatRecord) -> None:
        had = phase.sink_error
        progress.tick()  # a worker's request ended: it counts in this process' running axis
        phase.deliver(rec)
        if had is None and phase.sink_error is not None:
            pool.stop()

    cpu0 = time.process_time()
    outcomes = await pool.run(jobs, on_record, started_ns=start_ns, timeout_s=START_MARGIN_S + max_duration_s
                              + drain_s + 3 * CANCEL_GRACE_S + END_GRACE_S)
    parent_cpu = time.process_time() - cpu0
    lags = tuple(o.info.get("lag_p99_ms") for o in outcomes)
    worst = max((x for x in lags if x is not None), default=None)
    summary = phase.summary(kind=kind, concurrency=concurrency, planned=planned,
                            lag_ms_p99=worst, window_s=window_s)
    return replace(summary, client_cpu_s=parent_cpu + sum(o.info.get("cpu_s", 0.0) for o in outcomes), workers=n,
                   worker_loop_lag_ms_p99=lags, degraded=degraded_reason(outcomes))


def _shares(total: int, n: int) -> list[int]:
    return [total // n + (1 if w < total % n else 0) for w in range(n)]


async def calibrate_workers(pool: WorkerPool, url: str, *, concurrency: int, known_ttft_ms: float,
                            known_itl_ms: float, chunks: int = 20, tokens_per_chunk: int = 2, rounds: int = 1,
                            max_error_ms: float = DEFAULT_MAX_ERROR_MS,
                            connect_timeout_s: float = 5.0) -> CalibrationReport:
    """`calibrate` with the streams spread over the pool's workers as a load phase spreads them, from one start
    instant: judged per worker (its share, its own loop lag) and for the whole (every record; the worst worker's
    loop lag), valid only when the whole and every worker are."""
    n = max(1, min(pool.size, concurrency))
    body = calibration_body(None, known_ttft_ms=known_ttft_ms, known_itl_ms=known_itl_ms, chunks=chunks,
                            tokens_per_chunk=tokens_per_chunk)
    timeout_s = calibration_timeout_s(known_ttft_ms, known_itl_ms, chunks)
    settings = ClientSettings(url, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, keep_raw=True)
    shares = _shares(concurrency, n)
    base = {"client": settings, "body": body, "timeout_s": timeout_s}
    await pool.run([{**base, "kind": "warm"}] * n, lambda w, r: None, timeout_s=timeout_s + END_GRACE_S)
    per: list[list[ChatRecord]] = [[] for _ in range(n)]
    start_ns = time.perf_counter_ns() + int(START_MARGIN_S * 1e9)
    jobs = [{**base, "kind": "calibrate", "concurrency": shares[w], "rounds": rounds, "start_ns": start_ns,
             "first_id": sum(shares[:w])} for w in range(n)]
    outcomes = await pool.run(jobs, lambda w, r: per[w].append(r), started_ns=start_ns,
                              timeout_s=START_MARGIN_S + timeout_s * rounds + END_GRACE_S)
    empty = LoopLagReport(duration_s=0.0, interval_ms=0.0, samples=0, p50_ms=None, p99_ms=None, max_ms=None)
    lags = [LoopLagReport(**o.info["lag"]) if o.info.get("lag") else empty for o in outcomes]
    kw: dict[str, Any] = {"url": settings.base_url, "known_ttft_ms": known_ttft_ms, "known_itl_ms": known_itl_ms,
                          "chunks": chunks, "tokens_per_chunk": tokens_per_chunk, "max_error_ms": max_error_ms}
    reports = [assess(per[w], concurrency=shares[w], loop_lag=lags[w], **kw) for w in range(n)]
    worst = max(lags, key=lambda r: -1.0 if r.p99_ms is None else r.p99_ms)
    whole = assess([r for rs in per for r in rs], concurrency=concurrency, loop_lag=worst, **kw)
    reasons = [] if whole.valid else [whole.reason]
    lost = degraded_reason(outcomes, "calibration")
    if lost:
        reasons.append(lost)
    reasons += [f"worker {w + 1} of {n} ({shares[w]} streams): {r.reason}" for w, r in enumerate(reports)
                if not r.valid]
    return replace(whole, workers=n, per_worker=tuple(r.to_dict() for r in reports), valid=not reasons,
                   reason="; ".join(reasons) or f"client timing error within bound in each of {n} workers")
