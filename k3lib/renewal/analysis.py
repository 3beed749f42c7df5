"""The six renewal axes as pure functions: load frame, task log, costs, incidents and hours in, JSON-ready
figures out. Nothing here reads a file or a clock; a blank cost stays None through every sum it enters."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence
from zoneinfo import ZoneInfo

from ..core.numbers import figure
from ..core.stats import percentile
from .inputs import FIVE_QUESTIONS, CostsInput, HoursRecord, IncidentRecord, TaskRecord
from .rules import DeclaredBenefits, FixedElements, RenewalRules, accepted as is_accepted
from .series import Grid

CATEGORIES = ("batch", "agent", "peak", "test", "maintenance")
PERIODS = ("business", "night", "weekend", "peak-slots")
SELF, API = "self-hosted", "api"


def _r(x: float | None, nd: int = 3) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), nd)


def _slot_index(ts: float, grid: Grid) -> int:
    """Slot k covers (t_k − step, t_k] with t_k = start + (k+1)·step."""
    return math.ceil((ts - grid.start_s) / grid.step_s) - 1


def _occupancy(intervals: Iterable[tuple[float, float]], grid: Grid, n: int) -> list[float]:
    """How many intervals overlap each slot (a difference array, linear in tasks + slots)."""
    diff = [0.0] * (n + 1)
    for a, b in intervals:
        i, j = max(_slot_index(a, grid), 0), min(_slot_index(b, grid), n - 1)
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


# --- 1. load ----------------------------------------------------------------------------------------------------

def analyse_load(frame, tasks: Sequence[TaskRecord], rules: RenewalRules, grid: Grid, gpus: int) -> dict[str, Any]:
    """Used vs reserved capacity per load category and per period; idle time split into demand and scheduling."""
    n = len(frame)
    step_h = grid.step_s / 3600
    util = [0.0 if math.isnan(u) else float(u) for u in frame["gpu_util"]]
    waiting_srv = [0.0 if math.isnan(w) else float(w) for w in frame["waiting"]]
    sh = [t for t in tasks if t.path == SELF]
    waiting_log = _occupancy(((t.submitted_at.timestamp(), t.started_at.timestamp()) for t in sh
                              if t.started_at is not None and t.wait_s > 0), grid, n)
    active = {c: _occupancy(((t.started_at.timestamp(), t.finished_at.timestamp()) for t in sh
                             if t.category == c and t.started_at and t.finished_at), grid, n) for c in CATEGORIES}
    tz = ZoneInfo(rules.timezone)
    periods = []
    for ts in frame.index:
        local = ts.tz_convert(tz)
        periods.append(_period(local.hour, local.weekday(), rules))
    reserved_gpu_h = gpus * n * step_h
    used_by_cat: dict[str, float] = defaultdict(float)
    hours_by_cat: dict[str, float] = defaultdict(float)
    idle_kind = []
    per = {p: {"slots": 0, "busy": 0, "util_sum": 0.0, "idle_demand": 0, "idle_scheduling": 0, "waiting_sum": 0.0}
           for p in PERIODS}
    for k in range(n):
        used = util[k] * gpus * step_h
        counts = {c: active[c][k] for c in CATEGORIES}
        total = sum(counts.values())
        if total > 0:
            for c, v in counts.items():
                used_by_cat[c] += used * v / total
                hours_by_cat[c] += step_h * v / total
        else:
            used_by_cat["none"] += used
            hours_by_cat["none"] += step_h
        busy = util[k] >= rules.idle_util_max
        queued = waiting_srv[k] > 0 or waiting_log[k] > 0
        kind = "busy" if busy else ("scheduling" if queued else "demand")
        idle_kind.append(kind)
        names = [periods[k]] + (["peak-slots"] if util[k] >= rules.peak_util_min else [])
        for p in names:
            agg = per[p]
            agg["slots"] += 1
            agg["busy"] += busy
            agg["util_sum"] += util[k]
            agg["waiting_sum"] += waiting_srv[k]
            agg["idle_demand"] += kind == "demand"
            agg["idle_scheduling"] += kind == "scheduling"
    # idle stretches at least large_idle_min_h long
    large_slots, run = 0, 0
    min_run = max(1, math.ceil(rules.large_idle_min_h / step_h))
    for kind in idle_kind + ["busy"]:
        if kind != "busy":
            run += 1
            continue
        if run >= min_run:
            large_slots += run
        run = 0
    # weekday GPU-hours: regular load means a similar amount of work every working day
    daily: dict[str, float] = defaultdict(float)
    for k, ts in enumerate(frame.index):
        local = ts.tz_convert(tz)
        if local.weekday() < 5:
            daily[local.date().isoformat()] += util[k] * gpus * step_h
    days = list(daily.values())
    cv = statistics.pstdev(days) / statistics.mean(days) if days and statistics.mean(days) > 0 else None
    # demand shape: arrivals per hour over the window (both paths: demand exists wherever it was served)
    hourly = Counter(int((t.submitted_at.timestamp() - grid.start_s) // 3600) for t in sh)
    n_hours = max(1, int(n * step_h))
    arrivals = [hourly.get(h, 0) for h in range(n_hours)]
    mean_arr = sum(arrivals) / n_hours
    p99 = percentile(arrivals, 99)
    assert p99 is not None  # arrivals holds at least one hour
    used_total = sum(used_by_cat.values())
    idle_slots = sum(1 for k in idle_kind if k != "busy")
    return {
        "gpus": gpus,
        "window_h": _r(n * step_h, 2),
        "step_s": grid.step_s,
        "reserved_gpu_h": _r(reserved_gpu_h, 1),
        "used_gpu_h": _r(used_total, 1),
        "utilisation": _r(used_total / reserved_gpu_h if reserved_gpu_h else None),
        "by_category": [
            {"category": c, "hours": _r(hours_by_cat.get(c, 0.0), 1), "used_gpu_h": _r(used_by_cat.get(c, 0.0), 1),
             "share_of_reserved": _r(used_by_cat.get(c, 0.0) / reserved_gpu_h if reserved_gpu_h else None)}
            for c in (*CATEGORIES, "none")],
        "by_period": [
            {"period": p, "hours": _r(a["slots"] * step_h, 1),
             "mean_util": _r(a["util_sum"] / a["slots"] if a["slots"] else None),
             "busy_share": _r(a["busy"] / a["slots"] if a["slots"] else None),
             "idle_demand_share": _r(a["idle_demand"] / a["slots"] if a["slots"] else None),
             "idle_scheduling_share": _r(a["idle_scheduling"] / a["slots"] if a["slots"] else None),
             "mean_waiting": _r(a["waiting_sum"] / a["slots"] if a["slots"] else None, 2)}
            for p, a in per.items()],
        "idle_share": _r(idle_slots / n if n else None),
        "idle_demand_share": _r(idle_kind.count("demand") / n if n else None),
        "idle_scheduling_share": _r(idle_kind.count("scheduling") / n if n else None),
        "large_idle_share": _r(large_slots / n if n else None),
        "business_busy_share": _r(per["business"]["busy"] / per["business"]["slots"]
                                  if per["business"]["slots"] else None),
        "weekday_gpu_h_cv": _r(cv),
        "arrivals_per_h_mean": _r(mean_arr, 2),
        "arrivals_per_h_p99": _r(p99, 2),
        "peak_to_mean": _r(p99 / mean_arr if mean_arr else None, 2),
        "slots": {"busy": idle_kind.count("busy"), "idle_demand": idle_kind.count("demand"),
                  "idle_scheduling": idle_kind.count("scheduling")},
    }


# --- 2. useful production ---------------------------------------------------------------------------------------

def _saturated_slots(frame, rules: RenewalRules) -> set[int]:
    return {k for k, (w, kv) in enumerate(zip(frame["waiting"], frame["kv_usage"]))
            if (not math.isnan(w) and w > 0) or (not math.isnan(kv) and kv >= 0.9)}


def analyse_production(frame, tasks: Sequence[TaskRecord], rules: RenewalRules, grid: Grid,
                       fixed: FixedElements = FixedElements()) -> dict[str, Any]:
    """Accepted tasks (under the fixed quality rule) per operating hour and what was lost on the way
    (self-hosted path)."""
    sh = [t for t in tasks if t.path == SELF]
    operating_h = len(frame) * grid.step_s / 3600
    accepted = sum(is_accepted(t, fixed.quality_rule) for t in sh)
    finished = sum(1 for t in sh if t.finished_at is not None)
    saturated = _saturated_slots(frame, rules)
    sat_wait_s = sum(t.wait_s for t in sh if _slot_index(t.submitted_at.timestamp(), grid) in saturated)
    gen_tokens = float(frame["generation_tokens"].fillna(0).sum())
    n = len(sh)
    return {
        "tasks": n,
        "finished": finished,
        "accepted": accepted,
        "acceptance_rate": _r(accepted / n if n else None),
        "operating_h": _r(operating_h, 1),
        "accepted_per_operating_h": _r(accepted / operating_h if operating_h else None),
        "generation_tokens": int(gen_tokens),
        "generation_tokens_per_accepted_task": _r(gen_tokens / accepted if accepted else None, 0),
        "losses": {
            "retries": sum(t.retries for t in sh),
            "retries_per_task": _r(sum(t.retries for t in sh) / n if n else None),
            "tasks_with_malformed_tool_calls": sum(1 for t in sh if t.tool_call_errors > 0),
            "tool_error_share": _r(sum(1 for t in sh if t.tool_call_errors > 0) / n if n else None),
            "timeouts": sum(t.timed_out for t in sh),
            "manual_corrections": sum(t.manual_correction for t in sh),
            "routed_to_api": sum(t.routed_to_api for t in sh),
            "wait_h": _r(sum(t.wait_s for t in sh) / 3600, 1),
            "saturation_wait_h": _r(sat_wait_s / 3600, 1),
        },
        # the retry policy fixed before the review: a task retried more often was not run under it
        "over_retry_policy": sum(t.retries > fixed.retry_policy.max_retries for t in sh),
        "retry_policy_max_retries": fixed.retry_policy.max_retries,
    }


# --- 3. the same task set on both paths -------------------------------------------------------------------------

def _path_figures(rows: Sequence[TaskRecord], fixed: FixedElements) -> dict[str, Any]:
    n = len(rows)
    delivery = [(t.finished_at - t.submitted_at).total_seconds() for t in rows if t.finished_at is not None]
    return {
        "tasks": n,
        "accepted": sum(is_accepted(t, fixed.quality_rule) for t in rows),
        "acceptance_rate": _r(sum(is_accepted(t, fixed.quality_rule) for t in rows) / n if n else None),
        "over_retry_policy": sum(t.retries > fixed.retry_policy.max_retries for t in rows),
        "delivery_median_s": _r(statistics.median(delivery) if delivery else None, 1),
        "delivery_p95_s": _r(percentile(delivery, 95), 1),
        "retries_per_task": _r(sum(t.retries for t in rows) / n if n else None),
        "tool_error_share": _r(sum(1 for t in rows if t.tool_call_errors > 0) / n if n else None),
        "manual_correction_share": _r(sum(t.manual_correction for t in rows) / n if n else None),
    }


def compare_paths(tasks: Sequence[TaskRecord], hours: Sequence[HoursRecord], fixed: FixedElements = FixedElements(),
                  rules: RenewalRules = RenewalRules()) -> dict[str, Any]:
    """Acceptance, delivery time, retries, tool-call quality and human time on the tasks of the fixed task set
    both paths ran, judged by the same quality rule; whether the API reaches equivalent quality."""
    by_path: dict[str, dict[str, TaskRecord]] = {SELF: {}, API: {}}
    for t in tasks:
        if t.category in fixed.task_set.categories:
            by_path[t.path][t.task_id] = t
    paired = sorted(set(by_path[SELF]) & set(by_path[API]))
    basis = "paired" if paired else "all"
    sets = {p: ([by_path[p][i] for i in paired] if paired else list(by_path[p].values())) for p in (SELF, API)}
    human: defaultdict[str, float] = defaultdict(float)
    for h in hours:
        human[h.category] += h.hours
    monitoring_h = human["monitoring"] + human["failed-task-diagnosis"] + human["out-of-hours"]
    sh, api = _path_figures(sets[SELF], fixed), _path_figures(sets[API], fixed)
    gap = rules.api_equivalent_gap_max
    equivalent = None
    if paired and None not in (sh["acceptance_rate"], api["acceptance_rate"], sh["tool_error_share"],
                               api["tool_error_share"]):
        equivalent = api["acceptance_rate"] >= sh["acceptance_rate"] - gap \
            and api["tool_error_share"] <= sh["tool_error_share"] + gap
    out = {"basis": basis, "paired_tasks": len(paired), "task_set": list(fixed.task_set.categories),
           SELF: {**sh, "human_monitoring_h": _r(monitoring_h, 1)},
           API: {**api,
                 # the hours file has no API monitoring line; unknown is shown as unknown
                 "human_monitoring_h": None},
           # None: no task ran on both paths, so equivalence is not shown either way
           "api_equivalent": equivalent}
    return out


# --- 4. full cost -----------------------------------------------------------------------------------------------

SELF_COST_ITEMS = ("capacity", "storage", "network", "monitoring", "install_upgrade_rollback", "on_call",
                   "failed_requests", "tasks_transferred_to_api", "teams_waiting_time")


def full_cost(costs: CostsInput, production: dict[str, Any], comparison: dict[str, Any]) -> dict[str, Any]:
    """Self-hosted and API cost per accepted task where every item is known; a blank item leaves the total blank
    (its known part is shown apart, labelled as partial)."""
    hours_cost = (costs.install_upgrade_rollback_hours * costs.hourly_rate
                  if costs.install_upgrade_rollback_hours is not None and costs.hourly_rate is not None else None)
    items = {k: getattr(costs, k) for k in SELF_COST_ITEMS if k != "install_upgrade_rollback"}
    items["install_upgrade_rollback"] = hours_cost
    blanks = [k for k in SELF_COST_ITEMS if items[k] is None]
    known = sum(v for v in items.values() if v is not None)
    total = None if blanks else known
    accepted = production.get("accepted") or 0
    api = comparison.get(API, {})
    api_accepted = api.get("accepted") or 0
    sh_paired = comparison.get(SELF, {})
    sh_per = _r(total / accepted if total is not None and accepted else None, 2)
    api_per = _r(costs.api_bill_same_tasks / api_accepted
                 if costs.api_bill_same_tasks is not None and api_accepted else None, 2)
    return {
        "currency": costs.currency,
        "self_hosted": {
            "items": [{"item": k, "amount": items[k]} for k in SELF_COST_ITEMS],
            "blank_items": blanks,
            "known_subtotal": _r(known, 2),
            "total": _r(total, 2),
            "accepted_tasks": accepted,
            "per_accepted_task": sh_per,
        },
        "api": {
            "bill_same_tasks": costs.api_bill_same_tasks,
            "tasks": api.get("tasks"),
            "accepted_tasks": api_accepted,
            "per_accepted_task": api_per,
            "self_hosted_accepted_on_same_set": sh_paired.get("accepted") or 0,
        },
        "delivered_tasks_value": costs.delivered_tasks_value,
        "hourly_rate": costs.hourly_rate,
        # None when a blank leaves either side blank: the comparison is then not shown, never assumed
        "self_hosted_cheaper_per_task": None if sh_per is None or api_per is None else sh_per <= api_per,
        "total_within_delivered_value": None if total is None or costs.delivered_tasks_value is None
        else total <= costs.delivered_tasks_value,
    }


# --- 5. stability -----------------------------------------------------------------------------------------------

UNCLASSIFIED = "unclassified"  # an incident whose class is blank (imported, its postmortem not written yet)

def analyse_stability(incidents: Sequence[IncidentRecord], rules: RenewalRules,
                      drill: dict[str, Any] | None = None) -> dict[str, Any]:
    """Incidents by class, time to recover, the five questions over the log, and the drill's answers if any."""
    by_cat: dict[str, list[IncidentRecord]] = defaultdict(list)
    for inc in incidents:
        by_cat[inc.category or UNCLASSIFIED].append(inc)
    rows = []
    for cat, items in sorted(by_cat.items()):
        mins = [i.minutes_to_recover for i in items if i.minutes_to_recover is not None]
        rows.append({"category": cat, "incidents": len(items),
                     "median_minutes_to_recover": _r(statistics.median(mins) if mins else None, 1),
                     "max_minutes_to_recover": _r(max(mins) if mins else None, 1),
                     "not_measured": len(items) - len(mins)})
    questions = {q: {"yes": sum(1 for i in incidents if getattr(i, q) is True),
                     "no": sum(1 for i in incidents if getattr(i, q) is False),
                     "unknown": sum(1 for i in incidents if getattr(i, q) is None)} for q in FIVE_QUESTIONS}
    slow = [i.id for i in incidents if i.minutes_to_recover is None or i.minutes_to_recover > rules.max_recovery_min]
    drill_answers = {q: a.get("answer") for q, a in ((drill or {}).get("answers") or {}).items()}
    drill_no = [q for q, a in drill_answers.items() if a == "no"]
    log_no = [q for q, c in questions.items() if c["no"] > 0]
    # a question is shown when the drill or a logged incident answered it yes; a blank or "not shown" never is
    unshown = [q for q in FIVE_QUESTIONS if q not in drill_no and q not in log_no
               and drill_answers.get(q) != "yes" and questions[q]["yes"] == 0]
    failed = bool(slow or drill_no or log_no)
    unclassified = [i.id for i in incidents if i.category is None]  # a blank class is not shown, never favourable
    return {
        "incidents": len(incidents),
        "by_category": rows,
        "questions": questions,
        "slow_or_unrecovered": slow,
        "recovered_within_rule_share": _r((len(incidents) - len(slow)) / len(incidents) if incidents else None),
        "drill": drill,
        "not_shown": unshown,
        # False: a failure was seen; None: nothing failed but some question was never shown (never counted as yes)
        "recoverable": False if failed else None if unshown or unclassified else True,
        "not_recoverable_because": ([f"{len(slow)} incident(s) recovered later than "
                                     f"{figure(rules.max_recovery_min, ' min')} or never: {', '.join(slow)}"]
                                    if slow else [])
        + ([f"the incident log answers no to: {', '.join(log_no)}"] if log_no else [])
        + ([f"the drill answers no to: {', '.join(drill_no)}"] if drill_no else [])
        + ([f"neither the drill nor the incident log shows: {', '.join(unshown)}"] if unshown else [])
        + ([f"{len(unclassified)} incident(s) not classified: {', '.join(unclassified)}"] if unclassified else []),
    }


# --- 6. operations ----------------------------------------------------------------------------------------------

def analyse_operations(hours: Sequence[HoursRecord], comparison: dict[str, Any], production: dict[str, Any],
                       rules: RenewalRules) -> dict[str, Any]:
    """Hours by category and week against the delivery gain: time saved on the accepted self-hosted tasks."""
    by_cat: dict[str, float] = defaultdict(float)
    by_week: dict[str, float] = defaultdict(float)
    for h in hours:
        by_cat[h.category] += h.hours
        by_week[h.week] += h.hours
    total = sum(by_cat.values())
    weeks = len(by_week) or 1
    sh, api = comparison.get(SELF, {}), comparison.get(API, {})
    gain_h = None
    if sh.get("delivery_median_s") is not None and api.get("delivery_median_s") is not None:
        gain_h = (api["delivery_median_s"] - sh["delivery_median_s"]) * (production.get("accepted") or 0) / 3600
    return {
        "total_h": _r(total, 1),
        "per_week_h": _r(total / weeks, 1),
        "weeks": weeks,
        "by_category": [{"category": c, "hours": _r(v, 1)} for c, v in sorted(by_cat.items(), key=lambda x: -x[1])],
        "by_week": [{"week": w, "hours": _r(v, 1)} for w, v in sorted(by_week.items())],
        "delivery_gain_h": _r(gain_h, 1),
        "gain_basis": "API median delivery − self-hosted median delivery, × accepted self-hosted tasks",
        "effort_contained": total / weeks <= rules.max_ops_hours_per_week,
        "effort_exceeds_gain": None if gain_h is None else total > gain_h,
    }


def benefits_summary(benefits: DeclaredBenefits) -> dict[str, Any]:
    return {"declared": benefits.declared(), "note": benefits.note}
