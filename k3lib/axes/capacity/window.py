"""The numbers of one load window: each request record sorted by how it failed, the client's counts and
percentiles over a window's records, and the server's counter and histogram deltas between the window's two
boundary scrapes. Pure: records and snapshots in, plain dicts for the run folder out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...core.stats import percentile_interval, percentile_rounded
from ...io.metrics import HistogramWindow, Snapshot, delta, window_histogram, window_quantile
from .shapes import ClientStats, WindowNumbers


def failure_kind(rec: Mapping[str, Any]) -> str | None:
    """How a request record failed: None (ok), "cancelled", "refused" (4xx), "server-error" (5xx, or an error
    event inside a 200 stream), "timeout" or "unreachable"."""
    if rec.get("ok"):
        return None
    if rec.get("cancelled"):
        return "cancelled"
    status = rec.get("http_status")
    kind = rec.get("error_kind")
    if isinstance(status, int) and 400 <= status < 500:
        return "refused"
    if isinstance(status, int) and status >= 500:
        return "server-error"
    if kind == "Timeout":
        return "timeout"
    if kind == "TargetUnreachable" and status is None:
        return "unreachable"
    return "server-error"



def window_numbers(before: Snapshot | None, after: Snapshot | None) -> WindowNumbers:
    """Counter and histogram deltas between two boundary scrapes (None where a scrape failed).

    The queue p95 is kept as what the histogram can prove: `queue_p95_low_ms` ≤ p95 ≤ `queue_p95_high_ms`
    (`queue_p95_basis` says why), and `queue_p95_ms` is a figure only where the buckets allow one (never an
    interpolation inside vLLM's first bucket, [0, 0.3 s], which would turn 0.1 ms waits into ~285 ms)."""
    if before is None or after is None:
        return {"preemptions": None, "queue_p95_ms": None, "server_ttft_p95_ms": None}
    pre = delta(before, after, "num_preemptions_total").value
    queue = window_histogram(before, after, "request_queue_time_seconds")
    t95 = window_quantile(before, after, "time_to_first_token_seconds", 0.95)
    return {"preemptions": pre, **queue_numbers(queue),
            "server_ttft_p95_ms": None if t95 is None else round(t95 * 1000, 3)}


def queue_numbers(queue: HistogramWindow | None) -> WindowNumbers:
    """The queue-time p95 of one window in ms: a figure where decided, else its bounds (see window_numbers)."""
    if queue is None or not queue.count:
        return {"queue_p95_ms": None}
    bounds = queue.quantile_bounds(0.95)
    if bounds is None:
        return {"queue_p95_ms": None}
    ms = lambda v: None if v is None or math.isinf(v) else round(v * 1000, 3)  # noqa: E731
    point = {"bucket": bounds.estimate, "above-last-bucket": bounds.low}.get(bounds.basis)
    return {"queue_p95_ms": ms(point), "queue_p95_low_ms": ms(bounds.low), "queue_p95_high_ms": ms(bounds.high),
            "queue_p95_basis": bounds.basis, "queue_p95_text": bounds.describe(1000, " ms"),
            "queue_mean_ms": ms(queue.mean), "queue_count": queue.count}


def _p95_interval(values: Sequence[float]) -> dict[str, float] | None:
    got = percentile_interval(values, 95)
    return None if got is None else got.model_dump()


def record_stats(records: Sequence[Mapping[str, Any]], *, intervals: bool = False) -> ClientStats:
    """Client-side numbers of a set of request records; with `intervals`, the bootstrap interval of the TTFT and
    e2e p95 over the requests (a load step's latency is judged against its objective on that interval)."""
    kinds = [failure_kind(r) for r in records]
    ok = [r for r, k in zip(records, kinds) if k is None]
    ttft = [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None]
    e2e = [r["e2e_ms"] for r in ok if r.get("e2e_ms") is not None]
    statuses: dict[str, int] = {}
    for r, k in zip(records, kinds):
        if k is not None and isinstance(r.get("http_status"), int):
            statuses[str(r["http_status"])] = statuses.get(str(r["http_status"]), 0) + 1
    return {"sent": len(records), "ok": len(ok), "server_errors": kinds.count("server-error"),
            "refused": kinds.count("refused"), "timeouts": kinds.count("timeout"),
            "unreachable": kinds.count("unreachable"), "cancelled": kinds.count("cancelled"),
            "error_statuses": dict(sorted(statuses.items())),
            "ttft_p50_ms": percentile_rounded(ttft, 50), "ttft_p95_ms": percentile_rounded(ttft, 95),
            "e2e_p95_ms": percentile_rounded(e2e, 95),
            "prompt_tokens_mean": (round(sum(r.get("prompt_tokens") or 0 for r in ok) / len(ok), 1) if ok else None),
            "completion_tokens_mean": (round(sum(r.get("completion_tokens") or 0 for r in ok) / len(ok), 1)
                                       if ok else None),
            **({"ttft_p95_interval": _p95_interval(ttft), "e2e_p95_interval": _p95_interval(e2e)} if intervals else {})}
