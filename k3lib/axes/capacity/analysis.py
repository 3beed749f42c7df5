"""Reading the sampled series of a capacity run: settled step statistics, whether a step held, the saturation
point, and the soak's accumulation, eviction, fragmentation and preemption signals. Pure, over plain rows.

Rows are what the samplers produce: metrics rows carry `t_wall` and the canonical series (KV usage, running,
waiting, cumulative counters); GPU rows carry `t_wall`, `host`, `gpu`, `fb_used_bytes`, `fb_total_bytes`.
vLLM reserves its memory at start, so a flat GPU curve is normal; KV usage, waiting and preemptions carry the
pressure signal, and usage counts evictable prefix blocks as free (notes §1.1), so it falls back when idle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from ...core.numbers import figure
from ...core.stats import Interval, min_samples
from .config import KV_FULL
from .shapes import GpuRow, MemoryAt, MemoryGrowth, MemoryPoint, MetricRow, SeriesName, SettledStats, SoakAnalysis
from .shapes import IntervalRow

MIB = 1024 * 1024
Row = TypeVar("Row", MetricRow, GpuRow)  # a sampled row: a /metrics sample or a GPU one


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def window(rows: Iterable[Row], start: float, end: float) -> list[Row]:
    """Rows with start ≤ t_wall ≤ end, in time order."""
    return sorted((r for r in rows if _num(r.get("t_wall")) is not None and start <= float(r["t_wall"]) <= end),
                  key=lambda r: float(r["t_wall"]))


def series(rows: Sequence[MetricRow], column: SeriesName) -> list[tuple[float, float]]:
    return [(float(r["t_wall"]), v) for r in rows if (v := _num(r.get(column))) is not None]


def increase(values: Sequence[float]) -> float:
    """A cumulative counter's increase over consecutive samples; a drop is a reset and counts its new value."""
    total = 0.0
    for a, b in zip(values, values[1:]):
        total += b - a if b >= a else b
    return total


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Least squares (slope, intercept, r²); None with fewer than 3 points or no spread in x."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    slope = sxy / sxx
    r2 = 1.0 if syy == 0 else (sxy * sxy) / (sxx * syy)
    return slope, my - slope * mx, r2


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# -----------------------------------------------------------------------------------------------------------
# Steps


def waiting_while_full(rows: Sequence[MetricRow], admit_limit: int | None, kv_full: float = KV_FULL) -> float | None:
    """Mean waiting requests, a sample's waiting counted only when the engine could not admit them: running at its
    admission limit (max_num_seqs × DP) or the KV pool full. Requests waiting while the engine had room only wait
    for its next step — scheduling latency that a busy machine stretches, not saturation. Without the admission
    limit nothing can be ruled out: every waiting request counts."""
    values = []
    for r in rows:
        waiting = _num(r.get("num_requests_waiting"))
        if waiting is None:
            continue
        running, usage = _num(r.get("num_requests_running")), _num(r.get("kv_cache_usage_perc"))
        full = (admit_limit is None or running is None or running >= admit_limit
                or (usage is not None and usage >= kv_full))
        values.append(waiting if full else 0.0)
    return _mean(values)


def settled_stats(metric_rows: Sequence[MetricRow], start: float, end: float, settle_fraction: float,
                  admit_limit: int | None = None) -> SettledStats:
    """Server gauges over the settled part of a window (its head is the ramp-up) and counters over all of it."""
    whole = window(metric_rows, start, end)
    settled = window(metric_rows, start + (end - start) * settle_fraction, end)
    waiting = [v for _, v in series(settled, "num_requests_waiting")]
    running = [v for _, v in series(settled, "num_requests_running")]
    usage = [v for _, v in series(settled, "kv_cache_usage_perc")]
    pre = [v for _, v in series(whole, "num_preemptions_total")]
    return {
        "samples": len(settled),
        "waiting_mean": _mean(waiting), "waiting_max": max(waiting, default=None),
        "running_mean": _mean(running), "running_max": max(running, default=None),
        "kv_usage_mean": _mean(usage), "kv_usage_max": max(usage, default=None),
        "preemptions_sampled": increase(pre) if len(pre) >= 2 else None,
        "admit_limit": admit_limit, "waiting_full_mean": waiting_while_full(settled, admit_limit),
    }


# How a request that did not complete is counted in a load window (k3lib.axes.capacity.window.record_stats), and
# how the findings name it. Every kind counts against the contract's completed share: a request a gateway refused (429,
# 503), one the client gave up on, one that never connected and one cut at the window's end were all load the
# deployment did not serve.
INCOMPLETE_KINDS: tuple[tuple[str, str], ...] = (
    ("refused", "refused with a client-error status"), ("server_errors", "failed on the server side"),
    ("timeouts", "timed out"), ("unreachable", "unreachable (no connection)"),
    ("cancelled", "cut unfinished at the window's end"))


def incomplete_counts(window: Mapping[str, Any]) -> tuple[int, int, dict[str, int]]:
    """(sent, completed, {kind: count} for the kinds that occurred) of a load window's client counts."""
    kinds = {k: int(window.get(k) or 0) for k, _ in INCOMPLETE_KINDS}
    ok = int(window.get("ok") or 0)
    sent = window.get("sent")
    sent = int(sent) if sent is not None else ok + sum(kinds.values())
    return sent, ok, {k: n for k, n in kinds.items() if n}


def describe_incomplete(window: Mapping[str, Any]) -> str:
    """"396 of 400 requests did not complete: 396 refused with a client-error status (HTTP 429 ×396)"."""
    sent, ok, kinds = incomplete_counts(window)
    statuses = window.get("error_statuses") or {}
    by_kind: dict[str, list[str]] = {}
    for code, n in sorted(statuses.items(), key=lambda kv: str(kv[0])):
        kind = "refused" if str(code).startswith("4") else "server_errors"
        by_kind.setdefault(kind, []).append(f"HTTP {code} ×{n}")
    parts = [f"{n} {label}" + (f" ({', '.join(by_kind[k])})" if by_kind.get(k) else "")
             for k, label in INCOMPLETE_KINDS if (n := kinds.get(k))]
    missing = max(sent - ok, 0)
    return f"{missing} of {sent} request(s) did not complete" + (f": {'; '.join(parts)}" if parts else "")


def incomplete_load(window: Mapping[str, Any], max_error_share: float) -> tuple[bool, str | None]:
    """Whether a load window's requests fell short of the contract's completed share: (short, the sentence naming
    each kind that did not complete, with its HTTP statuses), or (False, None) when every request completed."""
    sent, ok, _ = incomplete_counts(window)
    if sent <= 0 or ok >= sent:
        return False, None
    share = (sent - ok) / sent
    short = share > max_error_share + 1e-12
    said = (f"{describe_incomplete(window)} — {ok / sent:.1%} completed, the contract allows at most "
            f"{max_error_share:.1%} not to (contract.max_error_share)")
    return short, said


def judge_step(step: Mapping[str, Any], *, queue_objective_ms: float | None,
               waiting_tolerance: float, max_error_share: float = 0.0) -> tuple[bool, list[str]]:
    """Did a concurrency step hold? Not when fewer of its requests completed than the contract's share (refused,
    timed out, unreachable, cut or failed on the server: each counted and named), when requests were preempted, or
    when they queued beyond the objective (the contract's queue p95 when set, else a settled waiting queue above
    the tolerance). Only the client's counts and the server's counters, gauges and histograms are read: a step
    whose client latency failed the self-calibration gate (`latency_valid` False) is judged exactly as if it had
    passed, its counts and preemptions still count."""
    why: list[str] = []
    short, said = incomplete_load(step, max_error_share)
    if short and said:
        why.append(said)
    if not step.get("ok"):
        why.append("no request completed")
    preempted = step.get("preemptions")
    if preempted is None:
        preempted = step.get("preemptions_sampled")
    if preempted:
        why.append(f"{preempted:g} preemption(s)")
    status, text = queue_verdict(step, queue_objective_ms)
    if status == "fail":
        why.append(text)
    if "waiting_full_mean" in step:
        waiting = step.get("waiting_full_mean")
        if waiting is not None and waiting > waiting_tolerance:
            why.append(f"{figure(waiting)} requests waiting on average once settled, while the engine was full "
                       f"(running at its admission limit {step.get('admit_limit') or 'unknown'} or KV ≥ "
                       f"{KV_FULL:.0%})")
    elif (waiting := step.get("waiting_mean")) is not None and waiting > waiting_tolerance:
        why.append(f"{figure(waiting)} requests waiting on average once settled")
    return not why, why


def queue_verdict(step: Mapping[str, Any], objective_ms: float | None
                  ) -> tuple[Literal["pass", "fail", "undecided"] | None, str]:
    """Whether a window's queue-time p95 meets the objective, as far as its histogram can tell:
    ("pass" | "fail" | "undecided" | None, the sentence). None: no objective or no queue data. A fail needs the
    p95's lower bound above the objective and a pass its upper bound at or below it; in between the buckets
    cannot decide, and an objective the data cannot decide is never failed."""
    low, high = step.get("queue_p95_low_ms"), step.get("queue_p95_high_ms")
    point = step.get("queue_p95_ms")
    if low is None:  # a step recorded before bounds were kept: its figure is all there is
        if point is None:
            return None, "no queue-time histogram in the window"
        low = high = point
    said = step.get("queue_p95_text") or f"{point:.0f} ms"
    if objective_ms is None:
        return None, f"queue time p95 {said}"
    if low > objective_ms:
        return "fail", f"queue time p95 {said} above the objective {objective_ms:g} ms"
    if high is not None and high <= objective_ms:
        return "pass", f"queue time p95 {said}, within the objective {objective_ms:g} ms"
    return "undecided", (f"queue time p95 {said}: the histogram cannot tell whether it is within the objective "
                         f"{objective_ms:g} ms")


def latency_verdict(step: Mapping[str, Any], key: str, objective_ms: float | None
                    ) -> tuple[Literal["pass", "fail", "inconclusive"] | None, str, IntervalRow | None]:
    """Whether a window's client p95 (`key`: "ttft" or "e2e") meets the objective, judged on the bootstrap interval
    of the p95 over the window's requests (`<key>_p95_interval`, see k3lib.axes.capacity.window.record_stats):
    ("pass" | "fail" | "inconclusive" | None, the sentence, the interval). None: no objective. A pass needs the
    whole interval at or under the objective, a fail the whole interval above it; an interval that straddles it
    (or too few requests for one) is inconclusive — never a pass or a fail that the machine's load would flip."""

    name = {"ttft": "TTFT", "e2e": "end-to-end latency"}[key]
    point = step.get(f"{key}_p95_ms")
    interval = step.get(f"{key}_p95_interval")
    if objective_ms is None:
        return None, f"{name} p95 {'n/a' if point is None else f'{point:.0f} ms'} (no objective)", interval
    if interval is None:
        n = step.get("ok") or 0
        return "inconclusive", (f"{name} p95 {'n/a' if point is None else f'{point:.0f} ms'} over {n} completed "
                                f"request(s): fewer than the {min_samples(95)} a p95 interval needs, so the "
                                f"objective {objective_ms:g} ms cannot be judged"), None
    got = Interval.model_validate({"q": 95.0, **interval})  # a p95's, as the step wrote it
    said = f"{name} p95 {got.text(' ms')}"
    verdict = got.at_most(objective_ms)
    if verdict == "pass":
        return "pass", f"{said}, within the objective {objective_ms:g} ms", interval
    if verdict == "fail":
        return "fail", f"{said}, above the objective {objective_ms:g} ms", interval
    return "inconclusive", f"{said}: the interval straddles the objective {objective_ms:g} ms", interval


def saturation_point(steps: Sequence[Mapping[str, Any]]) -> int | None:
    """The highest concurrency such that it and every lower step held; None if the first step did not."""
    point = None
    for step in sorted(steps, key=lambda s: s["concurrency"]):
        if not step.get("held"):
            break
        point = step["concurrency"]
    return point


# -----------------------------------------------------------------------------------------------------------
# Memory


def gpu_keys(gpu_rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    return sorted({(str(r.get("host")), int(r["gpu"])) for r in gpu_rows if r.get("gpu") is not None})


def gpu_label(key: tuple[str, int]) -> str:
    return f"{key[0]}/gpu{key[1]}"


def memory_at(gpu_rows: Sequence[GpuRow], t_wall: float) -> list[MemoryAt]:
    """Each GPU's memory at `t_wall`: its last sample at or before, else its first after."""
    out: list[MemoryAt] = []
    for key in gpu_keys(gpu_rows):
        rows = [r for r in gpu_rows if (str(r.get("host")), r.get("gpu")) == key and _num(r.get("t_wall"))]
        before = [r for r in rows if float(r["t_wall"]) <= t_wall]
        pick = max(before, key=lambda r: r["t_wall"]) if before else min(rows, key=lambda r: r["t_wall"], default=None)
        if pick is None:
            continue
        used, total = _num(pick.get("fb_used_bytes")), _num(pick.get("fb_total_bytes"))
        out.append({"gpu": gpu_label(key), "name": pick.get("name"), "t_wall": pick["t_wall"],
                    "used_mib": None if used is None else round(used / MIB, 1),
                    "total_mib": None if total is None else round(total / MIB, 1),
                    "used_frac": None if used is None or not total else round(used / total, 4)})
    return out


def memory_around(gpu_rows: Sequence[GpuRow], t_wall: float, before_s: float, after_s: float) -> list[MemoryPoint]:
    """The memory curve of every GPU around a moment (an OOM): t relative to it, used MiB."""
    out: list[MemoryPoint] = []
    for r in window(gpu_rows, t_wall - before_s, t_wall + after_s):
        used = _num(r.get("fb_used_bytes"))
        out.append({"gpu": gpu_label((str(r.get("host")), int(r["gpu"]))),
                    "t_rel_s": round(float(r["t_wall"]) - t_wall, 3),
                    "used_mib": None if used is None else round(used / MIB, 1)})
    return out


def memory_growth(gpu_rows: Sequence[GpuRow], start: float, end: float) -> list[MemoryGrowth]:
    """Per GPU: the fitted growth over the window (MiB), its slope per minute and r², first and last values."""
    out: list[MemoryGrowth] = []
    rows = window(gpu_rows, start, end)
    for key in gpu_keys(rows):
        pts = [(float(r["t_wall"]), used / MIB) for r in rows
               if (str(r.get("host")), r.get("gpu")) == key and (used := _num(r.get("fb_used_bytes"))) is not None]
        fit = linear_fit(pts)
        span = (pts[-1][0] - pts[0][0]) if pts else 0.0
        out.append({"gpu": gpu_label(key), "samples": len(pts),
                    "first_mib": round(pts[0][1], 1) if pts else None,
                    "last_mib": round(pts[-1][1], 1) if pts else None,
                    "growth_mib": round(fit[0] * span, 1) if fit else None,
                    "slope_mib_per_min": round(fit[0] * 60, 2) if fit else None,
                    "r2": round(fit[2], 3) if fit else None})
    return out


# -----------------------------------------------------------------------------------------------------------
# Soak


def _thirds(rows: Sequence[MetricRow], start: float, end: float) -> tuple[list[MetricRow], list[MetricRow]]:
    third = (end - start) / 3
    return window(rows, start, start + third), window(rows, end - third, end)


def _hit_rate(rows: Sequence[MetricRow]) -> float | None:
    q = [v for _, v in series(rows, "prefix_cache_queries_total")]
    h = [v for _, v in series(rows, "prefix_cache_hits_total")]
    if len(q) < 2 or len(h) < 2:
        return None
    dq = increase(q)
    return increase(h) / dq if dq > 0 else None


def soak_analysis(metric_rows: Sequence[MetricRow], gpu_rows: Sequence[GpuRow], start: float, end: float, *,
                  concurrency: int, memory_growth_min_mib: float, kv_trend_max: float, hit_rate_drop_max: float,
                  fragmentation_share_max: float, waiting_tolerance: float,
                  settle_fraction: float = 0.0, admit_limit: int | None = None) -> SoakAnalysis:
    """Accumulation (memory slope, KV usage first → last third), eviction (prefix hit rate first → last third),
    fragmentation (usage high while few run) and preemption rate over a soak window. A lasting queue is judged, as
    in the steps, on the settled part only: the head of the window is the ramp-up, where every request of the
    first wave arrives at once and waits for the engine's next step."""
    rows = window(metric_rows, start, end)
    duration = max(end - start, 1e-9)
    growth = memory_growth(gpu_rows, start, end)
    growing = [g for g in growth if g["growth_mib"] is not None and g["growth_mib"] >= memory_growth_min_mib
               and (g["r2"] or 0) >= 0.5]
    first, last = _thirds(metric_rows, start, end)
    kv_first = _mean([v for _, v in series(first, "kv_cache_usage_perc")])
    kv_last = _mean([v for _, v in series(last, "kv_cache_usage_perc")])
    kv_rise = None if kv_first is None or kv_last is None else kv_last - kv_first
    hr_first, hr_last = _hit_rate(first), _hit_rate(last)
    hr_drop = None if hr_first is None or hr_last is None else hr_first - hr_last
    # Fragmentation: the pool looks full while few sequences run (blocks held by something other than the load).
    few = max(1.0, concurrency / 2)
    read = [(_num(r.get("kv_cache_usage_perc")), _num(r.get("num_requests_running"))) for r in rows]
    pairs = [(u, n) for u, n in read if u is not None and n is not None]
    frag = sum(1 for u, n in pairs if u >= 0.9 and n < few)
    frag_share = frag / len(pairs) if pairs else None
    pre = [v for _, v in series(rows, "num_preemptions_total")]
    preemptions = increase(pre) if len(pre) >= 2 else None
    settled = window(metric_rows, start + (end - start) * settle_fraction, end)
    waiting = [v for _, v in series(settled, "num_requests_waiting")]
    waiting_mean = _mean(waiting)
    waiting_full = waiting_while_full(settled, admit_limit)
    return {
        "duration_s": round(duration, 3), "samples": len(rows),
        "memory": growth, "memory_growing": [g["gpu"] for g in growing],
        "kv_usage_first": kv_first, "kv_usage_last": kv_last, "kv_rise": kv_rise,
        "kv_accumulating": kv_rise is not None and kv_rise > kv_trend_max,
        "hit_rate_first": hr_first, "hit_rate_last": hr_last, "hit_rate_drop": hr_drop,
        "evicting": hr_drop is not None and hr_drop > hit_rate_drop_max,
        "fragmentation_share": frag_share,
        "fragmented": frag_share is not None and frag_share > fragmentation_share_max,
        "preemptions": preemptions,
        "preemptions_per_min": None if preemptions is None else round(preemptions / duration * 60, 3),
        "waiting_mean": waiting_mean, "waiting_full_mean": waiting_full, "admit_limit": admit_limit,
        "queueing": waiting_full is not None and waiting_full > waiting_tolerance,
    }
