"""The load analysis: used vs reserved capacity of the one deployment over the window, per load category and per
period, idle time split into lack of demand and scheduling — from slot means, never instants.

A slot without a measure from every reserved GPU is not shown: it is neither idle nor busy, it breaks no idle
stretch, and when such slots leave less of the window than `rules.min_coverage_share` the load as a whole is not
shown (the decision then never reads it as idle, nor as busy).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any, Literal, Sequence
from zoneinfo import ZoneInfo

from ..core.numbers import figure
from ..core.stats import percentile
from .inputs import TaskRecord
from .rules import RenewalRules
from .series import Grid
from .shapes import (
    CategoryUseData,
    CoverageData,
    LoadFigures,
    PeriodSlots,
    PeriodUseData,
    SourceCoverage,
    WaitingCausesData,
    WorstCaseData,
)

CATEGORIES = ("batch", "agent", "peak", "test", "maintenance")
PERIODS = ("business", "night", "weekend", "peak-slots")
SELF = "self-hosted"
_Summed = Literal["busy", "util_sum", "idle_demand", "idle_scheduling", "waiting_sum"]  # a period's sums


def _r(x: float | None, nd: int = 3) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), nd)


def slot_index(ts: float, grid: Grid) -> int:
    """Slot k covers (t_k − step, t_k] with t_k = start + (k+1)·step."""
    return math.ceil((ts - grid.start_s) / grid.step_s) - 1


def occupancy(intervals: Any, grid: Grid, n: int) -> list[float]:
    """How many intervals overlap each slot (a difference array, linear in tasks + slots)."""
    diff = [0.0] * (n + 1)
    for a, b in intervals:
        i, j = max(slot_index(a, grid), 0), min(slot_index(b, grid), n - 1)
        if j < 0 or i >= n or j < i:
            continue
        diff[i] += 1
        diff[j + 1] -= 1
    out, acc = [], 0.0
    for k in range(n):
        acc += diff[k]
        out.append(acc)
    return out


def _period(local_hour: int, weekday: int, rules: RenewalRules) -> str:
    if weekday >= 5:
        return "weekend"
    lo, hi = rules.business_hours
    return "business" if lo <= local_hour < hi else "night"


def _kinds(util: list[float | None], waiting_srv: list[float], waiting_log: list[float], rules: RenewalRules
           ) -> list[str | None]:
    """Each slot busy, idle for lack of demand, idle while tasks wait (scheduling), or None: not shown. Idle while
    tasks wait needs its cause shown by both sources: the server's queue gauge AND the task log's waiting tasks —
    a gauge alone may be stuck, a log alone may hold one row waiting for days (`waiting_causes` names both)."""
    out: list[str | None] = []
    for u, ws, wl in zip(util, waiting_srv, waiting_log):
        if u is None:
            out.append(None)
        elif u >= rules.idle_util_max:
            out.append("busy")
        else:
            out.append("scheduling" if ws > 0 and wl > 0 else "demand")
    return out


def waiting_causes(util: list[float | None], waiting_srv: list[float], waiting_log: list[float],
                   long_waits: list[str], rules: RenewalRules) -> WaitingCausesData:
    """What an idle slot with something "waiting" rests on, when only one source says so: the queue gauge without
    a waiting task in the log (a stuck gauge), the log without the gauge, and the rows waiting longer than a large
    idle stretch (named, not read as demand waiting)."""
    idle = [k for k, u in enumerate(util) if u is not None and u < rules.idle_util_max]
    return {"gauge_only_idle_slots": sum(1 for k in idle if waiting_srv[k] > 0 and waiting_log[k] <= 0),
            "log_only_idle_slots": sum(1 for k in idle if waiting_log[k] > 0 and waiting_srv[k] <= 0),
            "long_waiting_tasks": long_waits[:10], "long_waiting_count": len(long_waits)}


def large_idle_slots(kinds: list[str | None], step_h: float, rules: RenewalRules) -> int:
    """Idle slots in stretches at least `large_idle_min_h` long. A slot not shown neither extends nor breaks a
    stretch (removing samples cannot cut a long idle period into short ones)."""
    total, run = 0, 0
    min_run = max(1, math.ceil(rules.large_idle_min_h / step_h))
    for kind in [k for k in kinds if k is not None] + ["busy"]:
        if kind != "busy":
            run += 1
            continue
        if run >= min_run:
            total += run
        run = 0
    return total


def _weekday_cv(frame: Any, util: list[float | None], tz: ZoneInfo, step_h: float) -> float | None:
    """Coefficient of variation of the weekday GPU utilisation, day by day (days at least half shown)."""
    days: dict[str, list[float]] = defaultdict(list)
    slots_per_day = 24 / step_h
    for k, ts in enumerate(frame.index):
        local = ts.tz_convert(tz)
        if local.weekday() < 5 and util[k] is not None:
            days[local.date().isoformat()].append(util[k])  # type: ignore[arg-type]
    means = [sum(v) / len(v) for v in days.values() if len(v) >= slots_per_day / 2]
    if not means or statistics.mean(means) <= 0:
        return None
    return statistics.pstdev(means) / statistics.mean(means)


def _arrivals(tasks: Sequence[TaskRecord], grid: Grid, n: int, step_h: float) -> tuple[float, float | None]:
    hourly = Counter(int((t.submitted_at.timestamp() - grid.start_s) // 3600) for t in tasks)
    n_hours = max(1, int(n * step_h))
    arrivals = [hourly.get(h, 0) for h in range(n_hours)]
    return sum(arrivals) / n_hours, percentile(arrivals, 99)


def _per_period(frame: Any, util: list[float | None], kinds: list[str | None], waiting: list[float],
                rules: RenewalRules, step_h: float) -> list[PeriodUseData]:
    tz = ZoneInfo(rules.timezone)
    per: dict[str, PeriodSlots] = {p: {"slots": 0, "busy": 0, "util_sum": 0.0, "idle_demand": 0,
                                       "idle_scheduling": 0, "waiting_sum": 0.0} for p in PERIODS}
    for k, ts in enumerate(frame.index):
        u = util[k]
        if u is None:
            continue
        local = ts.tz_convert(tz)
        names = [_period(local.hour, local.weekday(), rules)] + (["peak-slots"] if u >= rules.peak_util_min else [])
        for p in names:
            agg = per[p]
            agg["slots"] += 1
            agg["busy"] += kinds[k] == "busy"
            agg["util_sum"] += u
            agg["waiting_sum"] += waiting[k]
            agg["idle_demand"] += kinds[k] == "demand"
            agg["idle_scheduling"] += kinds[k] == "scheduling"

    def share(a: PeriodSlots, key: _Summed, nd: int = 3) -> float | None:
        return _r(a[key] / a["slots"] if a["slots"] else None, nd)

    return [{"period": p, "hours": _r(a["slots"] * step_h, 1), "mean_util": share(a, "util_sum"),
             "busy_share": share(a, "busy"), "idle_demand_share": share(a, "idle_demand"),
             "idle_scheduling_share": share(a, "idle_scheduling"), "mean_waiting": share(a, "waiting_sum", 2)}
            for p, a in per.items()]


def _by_category(util: list[float | None], active: dict[str, list[float]], gpus: int, step_h: float,
                 reserved: float) -> list[CategoryUseData]:
    used_by: dict[str, float] = defaultdict(float)
    hours_by: dict[str, float] = defaultdict(float)
    for k, u in enumerate(util):
        if u is None:
            continue
        used = u * gpus * step_h
        counts = {c: active[c][k] for c in CATEGORIES}
        total = sum(counts.values())
        for c, v in (counts.items() if total > 0 else [("none", 1.0)]):
            share = v / total if total > 0 else 1.0
            used_by[c] += used * share
            hours_by[c] += step_h * share
    return [{"category": c, "hours": _r(hours_by.get(c, 0.0), 1), "used_gpu_h": _r(used_by.get(c, 0.0), 1),
             "share_of_reserved": _r(used_by.get(c, 0.0) / reserved if reserved else None)}
            for c in (*CATEGORIES, "none")]


def coverage(frame: Any) -> SourceCoverage:
    """The share of the window's slots each series source shows: every reserved GPU (utilisation) and vLLM."""
    n = len(frame)
    if not n:
        return {"gpu_util": None, "vllm": None}
    return {"gpu_util": _r(float(frame["gpu_util"].notna().sum()) / n, 4),
            "vllm": _r(float(frame["running"].notna().sum()) / n, 4)}


def period_coverage(frame: Any, util: list[float | None], rules: RenewalRules) -> dict[str, float | None]:
    """The share of each period type's slots (business, night, weekend) that every reserved GPU shows: a gap is
    judged against its own period (a weekend lost is a third of the weekends, not 5 % of the window)."""
    tz = ZoneInfo(rules.timezone)
    seen: Counter[str] = Counter()
    shown: Counter[str] = Counter()
    for k, ts in enumerate(frame.index):
        local = ts.tz_convert(tz)
        p = _period(local.hour, local.weekday(), rules)
        seen[p] += 1
        shown[p] += util[k] is not None
    return {p: _r(shown[p] / seen[p], 4) if seen[p] else None for p in PERIODS[:3]}


def not_shown(cover: CoverageData, gpus: int, rules: RenewalRules) -> list[str]:
    """Why the load is not shown ([] when it is)."""
    if not gpus:
        return ["no GPU utilisation series of the deployment in the window"]
    share = cover["gpu_util"] or 0.0
    if share < rules.min_coverage_share:
        return [f"the GPU utilisation series cover {share:.0%} of the window's slots with every one of the "
                f"{gpus} reserved GPUs (rule: at least {rules.min_coverage_share:.0%}); a slot not shown is never "
                f"read as idle or busy"]
    low = {p: c for p, c in (cover.get("by_period") or {}).items() if c is not None and c < rules.min_coverage_share}
    if low:
        return [f"the GPU utilisation series cover {', '.join(f'{c:.0%} of the {p} slots' for p, c in low.items())} "
                f"(rule: at least {rules.min_coverage_share:.0%} of each period type): missing data is not random, "
                "a gap is judged against its own period"]
    return []


def worst_case(kinds: list[str | None], util: list[float | None], step_h: float, rules: RenewalRules,
               business: list[bool]) -> WorstCaseData:
    """The shares with every slot not shown read the least favourable way (idle for lack of demand, utilisation 0):
    what the gap could hide. The decision reads the load only where this worst case decides the same."""
    n = len(kinds)
    if not n:
        return {"utilisation": None, "idle_demand_share": None, "large_idle_share": None,
                "business_busy_share": None}
    worst: list[str | None] = [k if k is not None else "demand" for k in kinds]
    biz = [k for k, b in zip(worst, business) if b]
    return {"utilisation": _r(sum(u for u in util if u is not None) / n),
            "idle_demand_share": _r(worst.count("demand") / n),
            "large_idle_share": _r(large_idle_slots(worst, step_h, rules) / n),
            "business_busy_share": _r(biz.count("busy") / len(biz)) if biz else None}


def analyse_load(frame, tasks: Sequence[TaskRecord], rules: RenewalRules, grid: Grid, gpus: int) -> LoadFigures:
    """Used vs reserved capacity per load category and per period; idle time split into demand and scheduling.
    `gpus`: the GPUs the capacity reserves (the deployment's stated count)."""
    n = len(frame)
    step_h = grid.step_s / 3600
    util: list[float | None] = [None if math.isnan(u) else float(u) for u in frame["gpu_util"]]
    waiting_srv = [0.0 if math.isnan(w) else float(w) for w in frame["waiting"]]
    sh = [t for t in tasks if t.path == SELF]
    long_s = rules.large_idle_min_h * 3600
    long_waits = [t.task_id for t in sh if t.wait_s > long_s]
    waiting_log = occupancy(((t.submitted_at.timestamp(), t.started_at.timestamp()) for t in sh
                             if t.started_at is not None and 0 < t.wait_s <= long_s), grid, n)
    active = {c: occupancy(((t.started_at.timestamp(), t.finished_at.timestamp()) for t in sh
                            if t.category == c and t.started_at and t.finished_at), grid, n) for c in CATEGORIES}
    kinds = _kinds(util, waiting_srv, waiting_log, rules)
    shown_slots = [u for u in util if u is not None]
    n_shown = len(shown_slots)
    reserved_gpu_h = gpus * n * step_h
    used_total = sum(shown_slots) * gpus * step_h
    cover: CoverageData = {**coverage(frame), "by_period": period_coverage(frame, util, rules)}
    why = not_shown(cover, gpus, rules)
    tz = ZoneInfo(rules.timezone)
    business_slot = [_period(ts.tz_convert(tz).hour, ts.tz_convert(tz).weekday(), rules) == "business"
                     for ts in frame.index]
    per = _per_period(frame, util, kinds, waiting_srv, rules, step_h)
    mean_arr, p99 = _arrivals(sh, grid, n, step_h)
    business = next(p for p in per if p["period"] == "business")

    def share(count: int) -> float | None:  # of the shown slots; None when the load is not shown
        return None if why or not n_shown else _r(count / n_shown)

    return {
        "gpus": gpus,
        "window_h": _r(n * step_h, 2),
        "step_s": grid.step_s,
        "reserved_gpu_h": _r(reserved_gpu_h, 1),
        "used_gpu_h": _r(used_total, 1),
        # the mean of the slot means over the shown slots: what the reserved GPUs did on average
        "utilisation": None if why or not n_shown else _r(sum(shown_slots) / n_shown),
        "by_category": _by_category(util, active, gpus, step_h, reserved_gpu_h),
        "by_period": per,
        "idle_share": share(sum(k in ("demand", "scheduling") for k in kinds)),
        "idle_demand_share": share(kinds.count("demand")),
        "idle_scheduling_share": share(kinds.count("scheduling")),
        "large_idle_share": share(large_idle_slots(kinds, step_h, rules)),
        "business_busy_share": None if why else business["busy_share"],
        "weekday_gpu_h_cv": None if why else _r(_weekday_cv(frame, util, ZoneInfo(rules.timezone), step_h)),
        "arrivals_per_h_mean": _r(mean_arr, 2),
        "arrivals_per_h_p99": _r(p99, 2),
        "peak_to_mean": _r(p99 / mean_arr if mean_arr and p99 is not None else None, 2),
        "slots": {"busy": kinds.count("busy"), "idle_demand": kinds.count("demand"),
                  "idle_scheduling": kinds.count("scheduling"), "not_shown": kinds.count(None)},
        "coverage": {**cover, "min_share": rules.min_coverage_share},
        "worst_case": worst_case(kinds, util, step_h, rules, business_slot),
        "waiting_causes": waiting_causes(util, waiting_srv, waiting_log, long_waits, rules),
        "shown": not why,
        "not_shown_because": why,
    }


def describe_left_out(left_out: Sequence[Any]) -> str:
    """The series left out of the review, in one phrase (e.g. "4 DCGM_FI_DEV_GPU_UTIL series of another host")."""
    if not left_out:
        return "none"
    return "; ".join(f"{figure(x.series)} {x.name} series: {x.reason}" for x in left_out)
