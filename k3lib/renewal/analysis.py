"""The renewal analyses other than the load (`load.py`) as pure functions: task log, costs, incidents and hours in,
JSON-ready figures out. Nothing here reads a file or a clock; a blank cost stays None through every sum it enters.

Only the fixed task set counts (`fixed.task_set.categories`); a task retried more often than the fixed retry policy
allows is counted and named, its retries enter the means at the policy's bound and it is not accepted under the
policy; a rate on fewer than `rules.min_sample_tasks` tasks is inconclusive, and above that its 95 % interval
(Wilson; Newcombe for a paired difference) decides, never the point estimate.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Final, Literal, Sequence

from ..core.numbers import figure
from ..core.stats import paired_difference_interval, percentile, wilson_interval
from .costsources import USAGE_SCOPED
from .drillshapes import RenewalDrillData
from .inputs import FIVE_QUESTIONS, CostsInput, HoursRecord, IncidentRecord, TaskRecord
from .load import CATEGORIES, PERIODS, analyse_load, slot_index  # noqa: F401  (re-exported)
from .results import (
    ApiCost,
    Clipping,
    CostItem,
    CostResult,
    CreditLine,
    FiveCounts,
    HoursRow,
    IncidentClass,
    Losses,
    ProductionResult,
    QuestionCounts,
    RenewalDrillResult,
    RenewalOperationsResult,
    SelfHostedCost,
    StabilityResult,
    WeekRow,
)
from .rules import DeclaredBenefits, FixedElements, RenewalRules
from .rules import accepted as is_accepted
from .series import Grid
from .shapes import BenefitsData, ComparisonData, EquivalenceData, PathFiguresData

SELF: Final = "self-hosted"
API: Final = "api"
EXAMPLES = 10  # task ids named in a finding


def _r(x: float | None, nd: int = 3) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), nd)


def interval(k: int, n: int) -> tuple[float | None, float | None]:
    """The 95 % Wilson interval of k of n, rounded; (None, None) without trials."""
    ci = wilson_interval(k, n)
    return (None, None) if ci is None else (round(ci[0], 4), round(ci[1], 4))


def in_policy(t: TaskRecord, fixed: FixedElements) -> bool:
    return t.retries <= fixed.retry_policy.max_retries


def delivered(t: TaskRecord, fixed: FixedElements) -> bool:
    """Accepted under the fixed quality rule AND run under the fixed retry policy (a task that needed more retries
    than the policy allows would have been stopped by it: it is not a delivery under the same conditions)."""
    return is_accepted(t, fixed.quality_rule) and in_policy(t, fixed) and not finished_by_api(t)


def finished_by_api(t: TaskRecord) -> bool:
    """A self-hosted task the API finished (`routed_to_api`): the API's delivery, never the capacity's — a
    self-hosted failure whose API cost is the cost sheet's `tasks_transferred_to_api`."""
    return t.path == SELF and t.routed_to_api


def bounded_retries(rows: Sequence[TaskRecord], fixed: FixedElements) -> int:
    """Retries summed with each task's count bounded by the policy: one row of 100,000 cannot move a mean."""
    cap = fixed.retry_policy.max_retries
    return sum(min(t.retries, cap) for t in rows)


# --- 2. useful production ---------------------------------------------------------------------------------------

def _saturated_slots(frame, rules: RenewalRules) -> set[int]:
    return {k for k, (w, kv) in enumerate(zip(frame["waiting"], frame["kv_usage"]))
            if (not math.isnan(w) and w > 0) or (not math.isnan(kv) and kv >= 0.9)}


def in_task_set(rows: Sequence[TaskRecord], fixed: FixedElements) -> tuple[list[TaskRecord], dict[str, int]]:
    """The rows of the fixed task set's categories, and the others counted by category (they deliver nothing the
    review weighs, however many and however quickly accepted)."""
    cats = set(fixed.task_set.categories)
    outside = Counter(t.category for t in rows if t.category not in cats)
    return [t for t in rows if t.category in cats], dict(sorted(outside.items()))


def _production_not_shown(n: int, coverage: float | None, rules: RenewalRules) -> list[str]:
    why = []
    if n < rules.min_sample_tasks:
        why.append(f"{n} task(s) of the fixed task set in the window, fewer than {rules.min_sample_tasks} "
                   "(rules.min_sample_tasks): the rates are inconclusive")
    if coverage is not None and coverage < rules.min_coverage_share:
        why.append(f"the task log records tasks on {coverage:.0%} of the window's days (rule: at least "
                   f"{rules.min_coverage_share:.0%})")
    return why


def analyse_production(frame, tasks: Sequence[TaskRecord], rules: RenewalRules, grid: Grid,
                       fixed: FixedElements = FixedElements(), *, coverage: float | None = None,
                       outside_window: Clipping | None = None) -> ProductionResult:
    """Accepted tasks of the fixed task set (under the fixed quality rule and retry policy) per operating hour, with
    their 95 % intervals, and what was lost on the way (self-hosted path). `coverage`: the task log's share of the
    window's days; `outside_window`: what clipping the log to the window left out."""
    sh_all = [t for t in tasks if t.path == SELF]
    sh, outside_set = in_task_set(sh_all, fixed)
    n = len(sh)
    operating_h = len(frame) * grid.step_s / 3600
    accepted = sum(delivered(t, fixed) for t in sh)
    off_policy = [t.task_id for t in sh if not in_policy(t, fixed)]
    tool_tasks = sum(1 for t in sh if t.tool_call_errors > 0)
    saturated = _saturated_slots(frame, rules)
    sat_wait_s = sum(t.wait_s for t in sh if slot_index(t.submitted_at.timestamp(), grid) in saturated)
    gen_tokens = float(frame["generation_tokens"].fillna(0).sum())
    retries = bounded_retries(sh, fixed)
    acc_ci, tool_ci = interval(accepted, n), interval(tool_tasks, n)
    why = _production_not_shown(n, coverage, rules)
    return ProductionResult(
        tasks=n,
        finished=sum(1 for t in sh if t.finished_at is not None),
        accepted=accepted,
        acceptance_rate=_r(accepted / n if n else None),
        acceptance_low=acc_ci[0], acceptance_high=acc_ci[1],
        operating_h=_r(operating_h, 1),
        accepted_per_operating_h=_r(accepted / operating_h if operating_h else None),
        generation_tokens=int(gen_tokens),
        generation_tokens_per_accepted_task=_r(gen_tokens / accepted if accepted else None, 0),
        losses=Losses(
            retries=retries,
            retries_per_task=_r(retries / n if n else None),
            tasks_with_malformed_tool_calls=tool_tasks,
            tool_error_share=_r(tool_tasks / n if n else None),
            timeouts=sum(t.timed_out for t in sh),
            manual_corrections=sum(t.manual_correction for t in sh),
            routed_to_api=sum(t.routed_to_api for t in sh),
            wait_h=_r(sum(t.wait_s for t in sh) / 3600, 1),
            saturation_wait_h=_r(sat_wait_s / 3600, 1),
        ),
        tool_error_low=tool_ci[0], tool_error_high=tool_ci[1],
        # the retry policy fixed before the review: a task retried more often was not run under it (named, its
        # retries counted at the policy's bound, not accepted)
        over_retry_policy=len(off_policy),
        over_retry_policy_tasks=tuple(off_policy[:EXAMPLES]),
        retry_policy_max_retries=fixed.retry_policy.max_retries,
        task_set=tuple(fixed.task_set.categories),
        outside_task_set=outside_set,
        outside_window=outside_window or Clipping(inside=len(tasks), outside=0, outside_examples=()),
        task_log_coverage=coverage,
        min_sample_tasks=rules.min_sample_tasks,
        shown=not why,
        not_shown_because=tuple(why),
    )


# --- 3. the same task set on both paths -------------------------------------------------------------------------

def _path_figures(rows: Sequence[TaskRecord], fixed: FixedElements) -> PathFiguresData:
    n = len(rows)
    delivery = [(t.finished_at - t.submitted_at).total_seconds() for t in rows if t.finished_at is not None]
    accepted = sum(delivered(t, fixed) for t in rows)
    low, high = interval(accepted, n)
    return {
        "tasks": n,
        "accepted": accepted,
        "acceptance_rate": _r(accepted / n if n else None),
        "acceptance_low": low, "acceptance_high": high,
        "over_retry_policy": sum(not in_policy(t, fixed) for t in rows),
        "delivery_median_s": _r(statistics.median(delivery) if delivery else None, 1),
        "delivery_p95_s": _r(percentile(delivery, 95), 1),
        "retries_per_task": _r(bounded_retries(rows, fixed) / n if n else None),
        "tool_error_share": _r(sum(1 for t in rows if t.tool_call_errors > 0) / n if n else None),
        "manual_correction_share": _r(sum(t.manual_correction for t in rows) / n if n else None),
    }


def _paired(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, float, float] | None:
    """A − B rate over the same tasks (a[i], b[i] the outcomes of task i) with Newcombe's 95 % interval."""
    cells = Counter((x, y) for x, y in zip(a, b))
    return paired_difference_interval(cells[(True, True)], cells[(True, False)], cells[(False, True)],
                                      cells[(False, False)])


def _within(ci: tuple[float, float, float] | None, gap: float) -> bool | None:
    """A difference wholly at or below `gap` (True), wholly above it (False), straddling it (None)."""
    if ci is None:
        return None
    return True if ci[2] <= gap else False if ci[1] > gap else None


def _equivalence(pairs: list[tuple[TaskRecord, TaskRecord]], fixed: FixedElements, gap: float) -> EquivalenceData:
    """Whether the API reaches equivalent quality on the same tasks: self-hosted − API acceptance, and API −
    self-hosted share of tasks with malformed tool calls, each with its Newcombe interval against the gap."""
    acc = _paired([delivered(s, fixed) for s, _ in pairs], [delivered(a, fixed) for _, a in pairs])
    tools = _paired([a.tool_call_errors > 0 for _, a in pairs], [s.tool_call_errors > 0 for s, _ in pairs])
    ok_acc, ok_tools = _within(acc, gap), _within(tools, gap)
    verdict = False if False in (ok_acc, ok_tools) else None if None in (ok_acc, ok_tools) else True
    return {"difference": None if acc is None else _r(acc[0], 4),
            "difference_low": None if acc is None else _r(acc[1], 4),
            "difference_high": None if acc is None else _r(acc[2], 4),
            "tool_error_difference_high": None if tools is None else _r(tools[2], 4),
            "api_equivalent": verdict}


def compare_paths(tasks: Sequence[TaskRecord], hours: Sequence[HoursRecord], fixed: FixedElements = FixedElements(),
                  rules: RenewalRules = RenewalRules()) -> ComparisonData:
    """Acceptance, delivery time, retries, tool-call quality and human time on the tasks of the fixed task set
    both paths ran, judged by the same quality rule and retry policy; whether the API reaches equivalent quality
    there — shown only on at least `rules.min_sample_tasks` shared tasks, by the interval of the paired difference."""
    by_path: dict[str, dict[str, TaskRecord]] = {SELF: {}, API: {}}
    for t in tasks:
        if t.category in fixed.task_set.categories:
            by_path[t.path][t.task_id] = t
    paired = sorted(set(by_path[SELF]) & set(by_path[API]))
    basis: Literal["paired", "all"] = "paired" if paired else "all"
    sets = {p: ([by_path[p][i] for i in paired] if paired else list(by_path[p].values())) for p in (SELF, API)}
    human: defaultdict[str, float] = defaultdict(float)
    for h in hours:
        human[h.category] += h.hours
    monitoring_h = human["monitoring"] + human["failed-task-diagnosis"] + human["out-of-hours"]
    sh, api = _path_figures(sets[SELF], fixed), _path_figures(sets[API], fixed)
    enough = len(paired) >= rules.min_sample_tasks
    equivalence = _equivalence([(by_path[SELF][i], by_path[API][i]) for i in paired], fixed,
                               rules.api_equivalent_gap_max) if enough else {
        "difference": None, "difference_low": None, "difference_high": None, "tool_error_difference_high": None,
        "api_equivalent": None}
    api_all = list(by_path[API].values())
    # the API bill covers every API task of the log in the window; a task set narrower than the log leaves some of
    # them outside the divisor (the bill is then not for the same tasks: re-import it for the task set)
    api_outside = sum(1 for t in tasks if t.path == API and t.category not in fixed.task_set.categories)
    return {"basis": basis, "paired_tasks": len(paired), "task_set": list(fixed.task_set.categories),
            "min_sample_tasks": rules.min_sample_tasks,
            SELF: {**sh, "human_monitoring_h": _r(monitoring_h, 1)},
            # the hours file has no API monitoring line; unknown is shown as unknown
            API: {**api, "human_monitoring_h": None},
            # every API task of the set (what its bill covers) and how many of them also ran self-hosted
            "api_tasks": len(api_all), "api_accepted": sum(delivered(t, fixed) for t in api_all),
            "api_tasks_not_on_both": len(api_all) - len(paired),
            "api_tasks_outside_task_set": api_outside,
            # None: fewer shared tasks than the rule, or an interval straddling the gap — not shown either way
            **equivalence}


# --- 4. full cost -----------------------------------------------------------------------------------------------

SELF_COST_ITEMS = ("capacity", "storage", "network", "monitoring", "install_upgrade_rollback", "on_call",
                   "failed_requests", "tasks_transferred_to_api", "teams_waiting_time")


def _per_task(total: float | None, n: int, low: float | None, high: float | None
              ) -> tuple[float | None, float | None]:
    """The interval of a total per accepted task that the acceptance rate's 95 % interval gives (n tasks); the
    upper bound is None when no acceptance is shown above zero."""
    if total is None or not n or low is None or high is None or high <= 0:
        return None, None
    return total / (n * high), (total / (n * low) if low > 0 else None)


def _cost_comparable(production: ProductionResult, comparison: ComparisonData, rules: RenewalRules) -> list[str]:
    """Why the cost per accepted task cannot be compared with the API's on the same tasks ([] when it can)."""
    why = []
    paired, api_tasks = comparison.get("paired_tasks") or 0, comparison.get("api_tasks") or 0
    if paired < rules.min_sample_tasks:
        why.append(f"{paired} task(s) of the fixed task set ran on both paths, fewer than {rules.min_sample_tasks} "
                   "(rules.min_sample_tasks): the API bill is not shown to be for the same tasks")
    elif api_tasks and paired / api_tasks < rules.min_coverage_share:
        why.append(f"only {paired} of the {api_tasks} API tasks the bill covers also ran self-hosted "
                   f"({paired / api_tasks:.0%}, rule: at least {rules.min_coverage_share:.0%})")
    outside = comparison.get("api_tasks_outside_task_set") or 0
    if outside:
        why.append(f"the API bill covers the log's API tasks of the window, {outside} of them outside the task set "
                   f"({', '.join(comparison.get('task_set') or [])}): it is not the bill of the tasks it is divided by "
                   "— re-import it for the task set's tasks (k3 import usage --tasks)")
    if not production.shown:
        why.append("the useful production is not shown")
    return why


def _credits(costs: CostsInput, items: dict[str, float | None]) -> list[CreditLine]:
    """The costs file's credits and refunds, each listed; netted into its item only when recurring and accepted."""
    out: list[CreditLine] = []
    for c in costs.credits:
        if c.netted and c.item in items and items[c.item] is not None:
            items[c.item] = items[c.item] + c.amount  # type: ignore[operator]
        out.append(CreditLine(amount=c.amount, item=c.item, description=c.description,
                              charge_category=c.charge_category, recurring=c.recurring, accepted_by=c.accepted_by,
                              netted=c.netted and c.item in items))
    return out


def full_cost(costs: CostsInput, production: ProductionResult, comparison: ComparisonData,
              rules: RenewalRules = RenewalRules(), other_gpu_hosts: Sequence[str] = ()) -> CostResult:
    """Self-hosted and API cost per accepted task of the fixed task set where every item is known, each with the
    interval its acceptance rate's gives; a blank item leaves the total blank (its known part is shown apart,
    labelled as partial). Cheaper is shown only when the two intervals do not overlap, on the same tasks."""
    hours_cost = (costs.install_upgrade_rollback_hours * costs.hourly_rate
                  if costs.install_upgrade_rollback_hours is not None and costs.hourly_rate is not None else None)
    items = {k: getattr(costs, k) for k in SELF_COST_ITEMS if k != "install_upgrade_rollback"}
    items["install_upgrade_rollback"] = hours_cost
    routed = production.losses.routed_to_api
    if routed and not items["tasks_transferred_to_api"]:
        items["tasks_transferred_to_api"] = None  # tasks the API finished without their API cost: not known
    credits = _credits(costs, items)
    blanks = [k for k in SELF_COST_ITEMS if items[k] is None]
    known = sum(v for v in items.values() if v is not None)
    total = None if blanks else known
    accepted, n = production.accepted, production.tasks
    api_n, api_accepted = comparison.get("api_tasks") or 0, comparison.get("api_accepted") or 0
    sh_low, sh_high = _per_task(total, n, production.acceptance_low, production.acceptance_high)
    a_low, a_high = interval(api_accepted, api_n)
    api_low, api_high = _per_task(costs.api_bill_same_tasks, api_n, a_low, a_high)
    sh_per = _r(total / accepted if total is not None and accepted else None, 2)
    api_per = _r(costs.api_bill_same_tasks / api_accepted
                 if costs.api_bill_same_tasks is not None and api_accepted else None, 2)
    why = _cost_comparable(production, comparison, rules)
    if other_gpu_hosts and not costs.capacity_nodes:
        why.append(f"the series show GPU node(s) the review leaves out ({', '.join(other_gpu_hosts)}) and the costs "
                   "file names no capacity_nodes: the capacity bill is not shown to pay for the reviewed node(s) only "
                   "— state the billed nodes (capacity_nodes) so that a billed node cannot be left out unjudged")
    why += [f"the API bill was imported from {s.file} without the task log (k3 import usage --tasks): it bills every "
            "line of the window, not the task set's tasks it is divided by" for s in costs.sources
            if s.importer == "usage" and "api_bill_same_tasks" in s.items and USAGE_SCOPED not in (s.selection or "")]
    if routed and not costs.tasks_transferred_to_api:
        why.append(f"{routed} self-hosted task(s) finished by the API (routed_to_api) but tasks_transferred_to_api is "
                   f"{'blank' if costs.tasks_transferred_to_api is None else 0}: their API cost is missing")
    cheaper = None
    if not why and sh_high is not None and api_low is not None:
        # cheaper: even the self-hosted upper bound ≤ the API's lower bound; dearer: its lower bound above the API's
        # upper bound; overlapping intervals show neither
        cheaper = True if sh_high <= api_low else False if (api_high is not None and sh_low is not None
                                                             and sh_low > api_high) else None
    return CostResult(
        currency=costs.currency,
        self_hosted=SelfHostedCost(
            items=tuple(CostItem(item=k, amount=items[k]) for k in SELF_COST_ITEMS),
            blank_items=tuple(blanks),
            known_subtotal=_r(known, 2),
            total=_r(total, 2),
            accepted_tasks=accepted,
            per_accepted_task=sh_per,
            per_accepted_task_low=_r(sh_low, 2), per_accepted_task_high=_r(sh_high, 2),
        ),
        api=ApiCost(
            bill_same_tasks=costs.api_bill_same_tasks,
            tasks=api_n,
            accepted_tasks=api_accepted,
            per_accepted_task=api_per,
            per_accepted_task_low=_r(api_low, 2), per_accepted_task_high=_r(api_high, 2),
            self_hosted_accepted_on_same_set=(comparison.get(SELF) or {}).get("accepted") or 0,
        ),
        delivered_tasks_value=costs.delivered_tasks_value,
        hourly_rate=costs.hourly_rate,
        credits=tuple(credits),
        routed_to_api_tasks=routed,
        not_comparable_because=tuple(why),
        # None when a blank leaves either side blank, the tasks are not the same, or the intervals overlap
        self_hosted_cheaper_per_task=cheaper,
        total_within_delivered_value=None if total is None or costs.delivered_tasks_value is None
        else total <= costs.delivered_tasks_value,
    )


# --- 5. stability -----------------------------------------------------------------------------------------------

UNCLASSIFIED = "unclassified"  # an incident whose class is blank (imported, its postmortem not written yet)


def drill_answers(drill: RenewalDrillData | None) -> dict[str, str]:
    """The drill's answers about the reviewed deployment: none unless the drill was shown to have touched it (a
    drill against the embedded emulator or another server answers nothing about the deployment)."""
    if not drill or not (drill.get("deployment") or {}).get("is_deployment"):
        return {}
    return {q: a.get("answer") for q, a in (drill.get("answers") or {}).items()}


def drill_not_shown(drill: RenewalDrillData | None) -> str | None:
    """Why a drill given to the analysis shows nothing about the reviewed deployment (None: it touched it, or no
    drill was given — the incident log alone is then read, as in a review computed without its drill)."""
    if not drill:
        return None
    target = drill.get("deployment") or {}
    return None if target.get("is_deployment") else str(target.get("why") or "the drill did not touch the deployment")


def analyse_stability(incidents: Sequence[IncidentRecord], rules: RenewalRules,
                      drill: RenewalDrillData | None = None, *, outside_window: Clipping | None = None
                      ) -> StabilityResult:
    """Incidents of the window by class, time to recover, the five questions over the log, and the drill's answers
    if it touched the deployment. `outside_window`: the incidents clipping left out (counted, never read)."""
    by_cat: dict[str, list[IncidentRecord]] = defaultdict(list)
    for inc in incidents:
        by_cat[inc.category or UNCLASSIFIED].append(inc)
    rows: list[IncidentClass] = []
    for cat, items in sorted(by_cat.items()):
        mins = [i.minutes_to_recover for i in items if i.minutes_to_recover is not None]
        rows.append(IncidentClass(category=cat, incidents=len(items),
                                  median_minutes_to_recover=_r(statistics.median(mins) if mins else None, 1),
                                  max_minutes_to_recover=_r(max(mins) if mins else None, 1),
                                  not_measured=len(items) - len(mins)))
    questions = {q: QuestionCounts(yes=sum(1 for i in incidents if getattr(i, q) is True),
                                   no=sum(1 for i in incidents if getattr(i, q) is False),
                                   unknown=sum(1 for i in incidents if getattr(i, q) is None)) for q in FIVE_QUESTIONS}
    slow = [i.id for i in incidents if i.minutes_to_recover is None or i.minutes_to_recover > rules.max_recovery_min]
    answers = drill_answers(drill)
    drill_no = [q for q, a in answers.items() if a == "no"]
    log_no = [q for q, c in questions.items() if c.no > 0]
    # a question is shown when the drill or a logged incident answered it yes; a blank or "not shown" never is
    unshown = [q for q in FIVE_QUESTIONS if q not in drill_no and q not in log_no
               and answers.get(q) != "yes" and questions[q].yes == 0]
    # each incident is shown by its own answers: one row answering yes answers for itself, never for the others
    blank = {i.id: [q for q in FIVE_QUESTIONS if getattr(i, q) is None] for i in incidents}
    unanswered = {k: v for k, v in blank.items() if v}
    failed = bool(slow or drill_no or log_no)
    unclassified = [i.id for i in incidents if i.category is None]  # a blank class is not shown, never favourable
    # the drill is a premise of its own: a drill that did not touch the reviewed deployment shows nothing
    drill_why = drill_not_shown(drill)
    return StabilityResult(
        incidents=len(incidents),
        by_category=tuple(rows),
        questions=FiveCounts.model_validate(questions),
        slow_or_unrecovered=tuple(slow),
        recovered_within_rule_share=_r((len(incidents) - len(slow)) / len(incidents) if incidents else None),
        drill=None if drill is None else RenewalDrillResult.model_validate(drill),
        outside_window=outside_window or Clipping(inside=len(incidents), outside=0, outside_examples=()),
        not_shown=tuple(unshown),
        # False: a failure was seen; None: nothing failed but some question was never shown (never counted as yes)
        recoverable=False if failed else None if unshown or unclassified or unanswered or drill_why else True,
        incidents_without_evidence=tuple(f"{k} ({', '.join(v)})" for k, v in unanswered.items()),
        not_recoverable_because=tuple(
            ([f"{len(slow)} incident(s) recovered later than "
              f"{figure(rules.max_recovery_min, ' min')} or never: {', '.join(slow)}"] if slow else [])
            + ([f"the incident log answers no to: {', '.join(log_no)}"] if log_no else [])
            + ([f"the drill answers no to: {', '.join(drill_no)}"] if drill_no else [])
            + ([f"neither the drill nor the incident log shows: {', '.join(unshown)}"] if unshown else [])
            + ([f"{len(unclassified)} incident(s) not classified: {', '.join(unclassified)}"] if unclassified else [])
            + ([f"{len(unanswered)} incident(s) without their own answers (one row answers only for itself): "
                + "; ".join(f"{k} ({', '.join(v)})" for k, v in list(unanswered.items())[:EXAMPLES])]
               if unanswered else [])
            + ([f"the drill premise is not shown: {drill_why}"] if drill_why else [])),
    )


# --- 6. operations ----------------------------------------------------------------------------------------------

def analyse_operations(hours: Sequence[HoursRecord], comparison: ComparisonData, production: ProductionResult,
                       rules: RenewalRules, *, window_weeks: float | None = None, coverage: float | None = None,
                       outside_window: Clipping | None = None) -> RenewalOperationsResult:
    """Hours by category and week against the delivery gain: time saved on the accepted self-hosted tasks. The
    weekly effort is the hours of the window over its length in weeks (`window_weeks`), never over the number of
    week labels; hours files covering less of the window than the rule leave the effort not shown."""
    by_cat: dict[str, float] = defaultdict(float)
    by_week: dict[str, float] = defaultdict(float)
    for h in hours:
        by_cat[h.category] += h.hours
        by_week[h.week] += h.hours
    total = sum(by_cat.values())
    weeks = window_weeks if window_weeks else (len(by_week) or 1)
    why = ([f"the hours file covers {coverage:.0%} of the window by ISO week (rule: at least "
            f"{rules.min_coverage_share:.0%})"] if coverage is not None and coverage < rules.min_coverage_share
           else [])
    sh, api = comparison.get(SELF, {}), comparison.get(API, {})
    gain_h = None
    sh_median, api_median = sh.get("delivery_median_s"), api.get("delivery_median_s")
    if sh_median is not None and api_median is not None:
        gain_h = (api_median - sh_median) * production.accepted / 3600
    per_week = None if why else total / weeks
    return RenewalOperationsResult(
        total_h=_r(total, 1),
        per_week_h=_r(per_week, 1),
        weeks=_r(weeks, 2),
        by_category=tuple(HoursRow(category=c, hours=_r(v, 1)) for c, v in sorted(by_cat.items(), key=lambda x: -x[1])),
        by_week=tuple(WeekRow(week=w, hours=_r(v, 1)) for w, v in sorted(by_week.items())),
        delivery_gain_h=_r(gain_h, 1),
        gain_basis="API median delivery − self-hosted median delivery, × accepted self-hosted tasks",
        effort_contained=None if per_week is None else per_week <= rules.max_ops_hours_per_week,
        effort_exceeds_gain=None if gain_h is None or why else total > gain_h,
        hours_coverage=coverage,
        outside_window=outside_window or Clipping(inside=len(hours), outside=0, outside_examples=()),
        not_shown_because=tuple(why),
        unclassified_h=_r(by_cat.get("unclassified"), 1),
    )


def benefits_summary(benefits: DeclaredBenefits) -> BenefitsData:
    return {"declared": benefits.declared(), "note": benefits.note}
