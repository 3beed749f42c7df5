"""What the decision table reads: one indicator per question, each judged from an analysis' typed result by the
review's rules, with the finding that states the figures, their intervals and the rule.

None is "not shown by the evidence": an axis missing, a source covering too little of the window, a sample smaller
than `rules.min_sample_tasks`, an interval straddling its rule. It is never counted as favourable.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TypedDict

from .findings import RenewalFinding
from .live import live_equivalence, live_quality
from .results import typed
from .rules import RenewalRules
from .shapes import Axes, AxisId, TaskLogComparison

if TYPE_CHECKING:
    from ..axes.paths.record import PathsResult

AXES: tuple[AxisId, ...] = ("load", "production", "comparison", "cost", "stability", "operations")
_ANALYSIS = {"load": "load", "production": "useful production", "comparison": "self-hosted vs API",
             "cost": "full cost", "stability": "stability", "operations": "operations"}


@dataclasses.dataclass(frozen=True)
class Indicators:
    """What the rules read. None: not shown by the evidence (never counted as favourable)."""

    regular_load: bool | None = None  # load
    large_idle: bool | None = None  # load
    spiky: bool | None = None  # load
    quality_ok: bool | None = None  # useful production
    recoverable: bool | None = None  # stability (incident log and drill)
    effort_ok: bool | None = None  # operations: hours per week within the rule and not above the delivery gain
    control_need: bool = False  # declared benefits
    api_equivalent: bool | None = None  # comparison: the API reaches equivalent quality on the same tasks
    cheaper_than_api: bool | None = None  # cost: self-hosted cost per accepted task ≤ the API's (None: a blank)
    within_value: bool | None = None  # cost: the self-hosted total ≤ the value of the delivered tasks
    # live (`k3 paths`): the API path's acceptance on the same tasks meets the quality rule (None: no live run)
    api_meets_quality: bool | None = None
    # a rule or scope set looser than the reference review and not accepted before it (review.accepted_loosened)
    loosened_unaccepted: bool = False


def typed_axes(axes: Axes) -> tuple[Any, ...]:
    """The six results as their typed models (None: no evidence); a dict that does not fit is refused."""

    return tuple(None if axes.get(a) is None else typed(a, axes[a]) for a in AXES)


class _Values(TypedDict, total=False):
    """The indicators read from the axes (`Indicators`' fields; one left out: not shown)."""

    regular_load: bool | None
    large_idle: bool | None
    spiky: bool | None
    quality_ok: bool | None
    recoverable: bool | None
    effort_ok: bool | None
    api_equivalent: bool | None
    cheaper_than_api: bool | None
    within_value: bool | None


def _all(*parts: bool | None) -> bool | None:
    """False when any part fails, None when none fails but one is not shown, True when all hold."""
    return False if False in parts else None if None in parts else True


def _bound(low: float | None, high: float | None, *, at_least: float | None = None,
           at_most: float | None = None) -> bool | None:
    """A rate's 95 % interval against its rule: wholly on the right side (True), wholly on the wrong side (False),
    straddling it or unknown (None)."""
    if low is None or high is None:
        return None
    if at_least is not None:
        return True if low >= at_least else False if high < at_least else None
    assert at_most is not None
    return True if high <= at_most else False if low > at_most else None


def load_indicators(load: Any, rules: RenewalRules) -> tuple[bool | None, bool | None, bool | None,
                                                                list[RenewalFinding]]:
    """Regular load (business-hour slots busy, weekday regularity, mean utilisation), large idle (long idle
    stretches or idle for lack of demand) and spiky demand; the first two None when the load is not shown."""
    bb, cv, util = load.business_busy_share, load.weekday_gpu_h_cv, load.utilisation
    shown = load.shown and None not in (bb, cv, util)
    regular = None if not shown else (bb >= rules.regular_busy_share_min and cv <= rules.regular_daily_cv_max
                                      and util >= rules.min_utilisation)
    li, idle_demand = load.large_idle_share, load.idle_demand_share
    large_idle = None if not shown or None in (li, idle_demand) else (
        li > rules.large_idle_share_max or idle_demand > rules.idle_demand_share_max)
    gap = _gap_changes(load, rules, regular, large_idle)
    if gap:
        regular, large_idle = None, None
    common = {"shown": load.shown and not gap, "not_shown_because": list(load.not_shown_because) + gap,
              "coverage_gpu_util": load.coverage.gpu_util, "min_coverage_share": rules.min_coverage_share,
              "worst_case": None if load.worst_case is None else load.worst_case.model_dump(mode="json")}
    ptm = load.peak_to_mean
    spiky = ptm is not None and ptm >= rules.peak_to_mean_min
    return regular, large_idle, spiky, [
        RenewalFinding("load.regular", regular, {
            **common, "business_busy_share": bb, "weekday_gpu_h_cv": cv, "utilisation": util,
            "regular_busy_share_min": rules.regular_busy_share_min,
            "regular_daily_cv_max": rules.regular_daily_cv_max, "min_utilisation": rules.min_utilisation}),
        RenewalFinding("load.large_idle", large_idle, {
            **common, "large_idle_share": li, "large_idle_min_h": rules.large_idle_min_h,
            "large_idle_share_max": rules.large_idle_share_max, "utilisation": util,
            "idle_demand_share": idle_demand, "idle_demand_share_max": rules.idle_demand_share_max,
            "idle_scheduling_share": load.idle_scheduling_share, "step_s": load.step_s,
            "waiting_causes": None if load.waiting_causes is None else load.waiting_causes.model_dump(mode="json")}),
        RenewalFinding("load.peaks", spiky, {"peak_to_mean": ptm, "peak_to_mean_min": rules.peak_to_mean_min})]


def _gap_changes(load: Any, rules: RenewalRules, regular: bool | None, large_idle: bool | None) -> list[str]:
    """Why the slots not shown could change the load premise ([] when they cannot): the worst case over the gap —
    every slot not shown idle for lack of demand, at utilisation 0 — judged by the same rules."""
    w = load.worst_case
    if w is None or regular is None or large_idle is None or not load.slots.not_shown:
        return []
    worst_regular = (w.business_busy_share is not None and w.utilisation is not None
                     and w.business_busy_share >= rules.regular_busy_share_min
                     and load.weekday_gpu_h_cv <= rules.regular_daily_cv_max and w.utilisation >= rules.min_utilisation)
    worst_idle = (None not in (w.large_idle_share, w.idle_demand_share)
                  and (w.large_idle_share > rules.large_idle_share_max
                       or w.idle_demand_share > rules.idle_demand_share_max))
    if worst_regular == regular and worst_idle == large_idle:
        return []
    def p(x: float | None) -> str:
        return "blank" if x is None else f"{x:.0%}"

    return [f"the {load.slots.not_shown} slot(s) not shown could change the load premise: read idle, as the worst "
            f"case, idle for lack of demand would be {p(w.idle_demand_share)} (measured "
            f"{p(load.idle_demand_share)}), large idle {p(w.large_idle_share)}, utilisation {p(w.utilisation)}, "
            f"business-hour slots busy {p(w.business_busy_share)} — missing data is not random"]


def production_quality(prod: Any, rules: RenewalRules) -> RenewalFinding:
    """The useful production against the quality rule, each rate by its 95 % interval; not shown (None) on too few
    tasks of the task set or a task log covering too little of the window."""
    losses = prod.losses
    quality = None
    if prod.shown:
        quality = _all(_bound(prod.acceptance_low, prod.acceptance_high, at_least=rules.min_acceptance_rate),
                       None if losses.retries_per_task is None else losses.retries_per_task <= rules.max_retries_per_task,
                       _bound(prod.tool_error_low, prod.tool_error_high, at_most=rules.max_tool_error_rate))
    return RenewalFinding("production.quality", quality, {
        "tasks": prod.tasks, "task_set": list(prod.task_set), "acceptance_rate": prod.acceptance_rate,
        "acceptance_low": prod.acceptance_low, "acceptance_high": prod.acceptance_high,
        "min_acceptance_rate": rules.min_acceptance_rate, "retries_per_task": losses.retries_per_task,
        "max_retries_per_task": rules.max_retries_per_task, "tool_error_share": losses.tool_error_share,
        "tool_error_low": prod.tool_error_low, "tool_error_high": prod.tool_error_high,
        "max_tool_error_rate": rules.max_tool_error_rate, "accepted_per_operating_h": prod.accepted_per_operating_h,
        "over_retry_policy": prod.over_retry_policy, "over_retry_policy_tasks": list(prod.over_retry_policy_tasks),
        "retry_policy_max_retries": prod.retry_policy_max_retries, "outside_task_set": dict(prod.outside_task_set),
        "outside_window": prod.outside_window.outside, "not_shown_because": list(prod.not_shown_because)})


def task_log_comparison(comp: Any, rules: RenewalRules) -> TaskLogComparison:
    sh, api = comp.self_hosted, comp.api
    return {"paired_tasks": comp.paired_tasks, "min_sample_tasks": comp.min_sample_tasks,
            "api_equivalent_gap_max": rules.api_equivalent_gap_max,
            "self_hosted_acceptance_rate": sh.acceptance_rate, "self_hosted_tool_error_share": sh.tool_error_share,
            "self_hosted_delivery_median_s": sh.delivery_median_s, "api_acceptance_rate": api.acceptance_rate,
            "api_tool_error_share": api.tool_error_share, "api_delivery_median_s": api.delivery_median_s,
            "difference": comp.difference, "difference_low": comp.difference_low,
            "difference_high": comp.difference_high, "api_equivalent": comp.api_equivalent}


def cost_finding(cost: Any) -> RenewalFinding:
    sh, api = cost.self_hosted, cost.api
    return RenewalFinding("cost.per_accepted_task", cost.self_hosted_cheaper_per_task, {
        "currency": cost.currency, "self_hosted_per_accepted_task": sh.per_accepted_task,
        "self_hosted_low": sh.per_accepted_task_low, "self_hosted_high": sh.per_accepted_task_high,
        "api_per_accepted_task": api.per_accepted_task, "api_low": api.per_accepted_task_low,
        "api_high": api.per_accepted_task_high, "self_hosted_total": sh.total,
        "blank_items": list(sh.blank_items), "delivered_tasks_value": cost.delivered_tasks_value,
        "within_value": cost.total_within_delivered_value,
        "not_comparable_because": list(cost.not_comparable_because),
        "credits": [c.model_dump(mode="json") for c in cost.credits], "routed_to_api_tasks": cost.routed_to_api_tasks})


def effort_finding(ops: Any, rules: RenewalRules) -> RenewalFinding:
    per_week, exceeds = ops.per_week_h, ops.effort_exceeds_gain
    # contained: within the weekly rule AND not above the delivery gain; an unknown gain (or effort) is not shown
    if per_week is None:
        effort = None
    else:
        effort = False if per_week > rules.max_ops_hours_per_week or exceeds is True else \
            None if exceeds is None else True
    return RenewalFinding("operations.effort", effort, {
        "per_week_h": per_week, "max_ops_hours_per_week": rules.max_ops_hours_per_week,
        "delivery_gain_h": ops.delivery_gain_h, "total_h": ops.total_h, "effort_exceeds_gain": exceeds,
        "weeks": ops.weeks, "not_shown_because": list(ops.not_shown_because), "unclassified_h": ops.unclassified_h,
        "outside_window": ops.outside_window.outside})


def scope_finding(load: Any, prod: Any, stab: Any, ops: Any) -> RenewalFinding | None:
    """One deployment, one window: what the review counted and what it left out (series of other hosts or
    models, rows outside the window, tasks outside the task set)."""
    if load is None:
        return None
    d, w = load.deployment, load.window
    return RenewalFinding("review.scope", None, {
        "model_name": d.model_name, "hostnames": list(d.hostnames), "gpu_uuids": len(d.gpu_uuids),
        "instances": list(d.instances), "gpus": d.gpus, "gpus_in_series": d.gpus_in_series,
        "acceptance_run": d.acceptance_run, "left_out": [x.model_dump() for x in d.left_out],
        "start": w.start, "end": w.end, "days": w.days, "step_s": w.step_s,
        "tasks_outside": None if prod is None else prod.outside_window.outside,
        "outside_task_set": None if prod is None else dict(prod.outside_task_set),
        "incidents_outside": None if stab is None else stab.outside_window.outside,
        "hours_rows_outside": None if ops is None else ops.outside_window.outside})


def indicators(axes: Axes, rules: RenewalRules,
               declared_benefits: list[str], live: PathsResult | None = None,
               live_source: str | None = None, live_refused: str | None = None
               ) -> tuple[Indicators, list[RenewalFinding]]:
    """Indicators and, for each, the finding with the figures and the rule it was judged by; `live` is the `k3 paths`
    record of the same tasks on both paths (None: the comparison rests on the task log only, an open item;
    `live_refused`: why the run named was not read)."""
    found: list[RenewalFinding] = []
    load, prod, comp, cost, stab, ops = typed_axes(axes)
    values: _Values = {}
    live = None if live_refused else live  # a run that does not match the review is not read at all
    for axis, result in zip(AXES, (load, prod, comp, cost, stab, ops)):
        if result is None:
            found.append(RenewalFinding(f"{axis}.no_evidence", None, {"analysis": _ANALYSIS[axis]}))
    scope = scope_finding(load, prod, stab, ops)
    found += [scope] if scope is not None else []
    if load is not None:
        values["regular_load"], values["large_idle"], values["spiky"], more = load_indicators(load, rules)
        found += more
    if prod is not None:
        found.append(production_quality(prod, rules))
        values["quality_ok"] = found[-1].outcome
    task_log = task_log_comparison(comp, rules) if comp is not None else None
    # a live run of the same tasks on both paths judges the equivalence; the task log's figure is then context only
    live_equivalent = live_equivalence(live, live_source, rules, task_log)
    if live_equivalent is not None:
        values["api_equivalent"] = live_equivalent.outcome
        found.append(live_equivalent)
    elif task_log is not None:
        values["api_equivalent"] = task_log["api_equivalent"]
        found.append(RenewalFinding("comparison.api_equivalent", task_log["api_equivalent"],
                                    {k: v for k, v in task_log.items() if k != "api_equivalent"}))
    live_finding = live_quality(live, live_source, rules, refused=live_refused)
    found.append(live_finding)
    if cost is not None:
        found.append(cost_finding(cost))
        values["cheaper_than_api"], values["within_value"] = (cost.self_hosted_cheaper_per_task,
                                                               cost.total_within_delivered_value)
    if stab is not None:
        values["recoverable"] = stab.recoverable
        found.append(RenewalFinding("stability.recoverable", stab.recoverable, {
            "incidents": stab.incidents, "recovered_within_rule_share": stab.recovered_within_rule_share,
            "max_recovery_min": rules.max_recovery_min, "not_recoverable_because": list(stab.not_recoverable_because),
            "drill_summary": None if stab.drill is None else stab.drill.summary,
            "outside_window": stab.outside_window.outside}))
    if ops is not None:
        found.append(effort_finding(ops, rules))
        values["effort_ok"] = found[-1].outcome
    control = bool(declared_benefits)
    found.append(RenewalFinding("benefits.declared", control, {"declared": list(declared_benefits)}))
    return Indicators(control_need=control, api_meets_quality=live_finding.outcome, **values), found
