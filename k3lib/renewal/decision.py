"""The renewal decision: converging indicators from all six analyses, judged by rules fixed in advance, give
renew, reduce, dual-circuit or exit-to-api — each with its exit or re-examination condition (seed 004's final
table).

The four decisions and their exit codes are `RenewalOutcome`, defined here once. Which decision wins is one precedence
table, `RULES`: the first row whose condition holds decides, and each row names the analyses it reads. Never
decided from a throughput figure: every indicator is a share of time, of tasks, of hours or of money. An
indicator without evidence (None: an axis missing, a blank in the cost sheet, a question the drill did not show)
is never counted as favourable, and a review decided on built-in default thresholds says so.

A live run of the same task set on both paths (`k3 paths`, named by `review.live_paths`) weighs in: exit-to-api
needs the API path to meet the quality rule there, the API's equivalence is judged on its paired tasks (the task
log's figure kept as context only), and a dual circuit's routing names the task categories that fail on one path
only. Without one the comparison rests on the task log only, and the decision says so as an open item.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from typing import TYPE_CHECKING, Any, Callable, Mapping

from pydantic import SerializerFunctionWrapHandler, computed_field, model_serializer

from ..core.numbers import figure
from ..core.record import Record
from .findings import RenewalFinding, money  # noqa: F401  (money: re-exported for the views)
from .indicators import AXES, Indicators, indicators, typed_axes  # noqa: F401  (re-exported)
from .live import category_routing
from .rules import RenewalRules
from .shapes import Axes, ChecklistItem, RenewalLoosened, RoutingData, TaskCategories

if TYPE_CHECKING:
    from ..axes.paths.record import PathsResult


class RenewalOutcome(enum.StrEnum):
    """The four renewal decisions, with the exit code `k3 review` returns for each."""

    RENEW = "renew"
    REDUCE = "reduce"
    DUAL_CIRCUIT = "dual-circuit"
    EXIT_TO_API = "exit-to-api"

    @property
    def exit_code(self) -> int:
        return {"renew": 0, "reduce": 3, "dual-circuit": 4, "exit-to-api": 5}[self.value]


DECISIONS = tuple(d.value for d in RenewalOutcome)
EXIT_CODES = {d.value: d.exit_code for d in RenewalOutcome}
TRANSFER_TRIGGERS = ("capacity unavailable", "queue too long", "repeated tool-call errors",
                     "business deadline exceeded", "consumption below expectation")


class RenewalDecision(Record):
    """The decision with its findings as values; its reasons are the findings' sentences, rendered from them.
    `decision.json` is its `model_dump()`; `model_validate` reads one back (the reasons rendered again)."""

    decision: str
    findings: tuple[RenewalFinding, ...]
    checklist: tuple[ChecklistItem, ...]
    condition: str
    routing: RoutingData | None = None
    reexamine_on: str | None = None
    rule: str | None = None  # the id of the RULES row that decided
    # "embedded-emulator" for a generated demo (`review.demo`: its data and its drill are the kit's): a
    # demonstration, which `k3 sign` refuses without --demo; None for a review of a team's own records
    target_kind: str | None = None

    @property
    def exit_code(self) -> int:
        return RenewalOutcome(self.decision).exit_code

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(f.sentence for f in self.findings)

    def finding(self, rule: str) -> RenewalFinding | None:
        """The finding with this rule id (e.g. "production.quality"), or None when the decision has none."""
        return next((f for f in self.findings if f.rule == rule), None)

    @model_serializer(mode="wrap")
    def _unset_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A decision without routing (not a dual circuit) or target kind (a team's own records) stores neither."""
        return {k: v for k, v in handler(self).items() if v is not None or k not in ("routing", "target_kind")}


# --- the precedence table ----------------------------------------------------------------------------------------

def _under_used(i: Indicators) -> bool:
    return i.large_idle is not False or i.regular_load is not True


def _heavy(i: Indicators) -> bool:
    return i.recoverable is not True or i.effort_ok is not True


@dataclasses.dataclass(frozen=True)
class RenewalRule:
    id: str
    decision: RenewalOutcome
    analyses: tuple[str, ...]  # which of the six analyses (and the declared benefits) the row reads
    when: str  # the condition, as the README's table and the decision's first reason state it
    holds: Callable[[Indicators], bool]


def _exit_on_quality(i: Indicators) -> bool:
    # a firm exit needs the quality miss shown (its interval below the rule, on enough tasks): a production not
    # shown — too few tasks, a task log covering too little — is inconclusive, never an exit
    return i.quality_ok is False and (_under_used(i) or _heavy(i))


def _load_not_shown(i: Indicators) -> bool:
    return i.regular_load is None or i.large_idle is None


def _exit_on_equivalence(i: Indicators) -> bool:
    return i.api_equivalent is True and i.cheaper_than_api is False and not i.control_need


RULES: tuple[RenewalRule, ...] = (
    RenewalRule("exit.quality-use-recovery", RenewalOutcome.EXIT_TO_API, ("production", "load", "stability", "operations"),
         "useful production below the rule together with idle capacity, unrecoverable incidents or heavy "
         "operations: quality, use and recovery do not hold",
         lambda i: _exit_on_quality(i) and i.api_meets_quality is not False),
    RenewalRule("exit.api-equivalent-and-cheaper", RenewalOutcome.EXIT_TO_API, ("comparison", "cost", "benefits"),
         "the API reaches equivalent quality on the same task set at a lower cost per accepted task, and no "
         "control need is declared",
         lambda i: _exit_on_equivalence(i) and i.api_meets_quality is not False),
    RenewalRule("dual.api-misses-quality", RenewalOutcome.DUAL_CIRCUIT,
         ("comparison", "production", "load", "stability", "operations", "cost", "benefits"),
         "exit-to-api is not allowed: its conditions hold, but on the same tasks run live on both paths the API path "
         "misses the quality rule — keep the capacity for the task categories the API fails, route the others",
         lambda i: (_exit_on_quality(i) or _exit_on_equivalence(i)) and i.api_meets_quality is False),
    RenewalRule("dual.peaks-and-control", RenewalOutcome.DUAL_CIRCUIT, ("load", "benefits"),
         "strong unpredictable peaks and a declared data-control need: keep a controlled path for those tasks, "
         "send the irregular rest to the API",
         lambda i: bool(i.spiky) and i.control_need),
    RenewalRule("dual.recovery-or-effort", RenewalOutcome.DUAL_CIRCUIT, ("production", "load", "stability", "operations"),
         "frequent useful tasks but incidents not shown recoverable or operations effort above the rule or above "
         "the delivery gain: test the dual circuit first",
         lambda i: i.quality_ok is True and i.regular_load is True and _heavy(i)),
    RenewalRule("dual.quality-missed", RenewalOutcome.DUAL_CIRCUIT, ("production",),
         "the quality rule is missed or not shown (too few tasks, an interval straddling the rule): route the "
         "failing task types to the API and keep measuring",
         lambda i: i.quality_ok is not True),
    RenewalRule("dual.load-not-shown", RenewalOutcome.DUAL_CIRCUIT, ("load",),
         "the load is not shown (a series covers too little of the window, or none is the deployment's): neither "
         "idle nor busy is shown, so neither renewing nor resizing is — keep the API path beside the capacity and "
         "measure the load",
         _load_not_shown),
    RenewalRule("reduce.idle-or-irregular", RenewalOutcome.REDUCE, ("load",),
         "useful tasks but large idle periods or irregular load: test a smaller capacity first",
         lambda i: _under_used(i) or bool(i.spiky)),
    RenewalRule("dual.gain-not-shown", RenewalOutcome.DUAL_CIRCUIT, ("cost", "comparison"),
         "the gain over the API is not shown: the self-hosted cost per accepted task is blank (a blank cost item) "
         "or above the API's on the same tasks, or the total exceeds the value delivered — keep the API path "
         "beside the capacity and measure it",
         lambda i: i.cheaper_than_api is not True or i.within_value is False),
    RenewalRule("dual.loosened-not-accepted", RenewalOutcome.DUAL_CIRCUIT, ("rules",),
         "the evidence converges only under rules or scopes looser than the reference review (task set, business "
         "hours, time zone, thresholds) that nobody accepted before the review: renewing is not shown under the "
         "reference rules — keep the API path beside the capacity, or accept each loosening "
         "(review.accepted_loosened: name, value, by, why) and re-run",
         lambda i: i.loosened_unaccepted),
    RenewalRule("renew.converge", RenewalOutcome.RENEW, AXES,
         "regular load, accepted tasks, recoverable incidents, contained effort and a lower cost per accepted task "
         "than the API converge",
         lambda i: True),
)


def choose(ind: Indicators) -> tuple[str, str]:
    """The decision and the rule that fired: the first row of RULES whose condition holds."""
    rule = decide_rule(ind)
    return rule.decision.value, rule.when


def decide_rule(ind: Indicators) -> RenewalRule:
    return next(r for r in RULES if r.holds(ind))


def routing(rules: RenewalRules, categories: RenewalFinding | None = None) -> RoutingData:
    """The dual circuit's transfer triggers and exit rules, fixed now, before the next bill is read; with a live
    run, the task categories each path takes (`task_categories`; null: none named, an open item)."""
    cats = categories.measured if categories is not None and categories.outcome is True else None
    return {
        "task_categories": None if cats is None else TaskCategories(
            self_hosted=cats["self_hosted"], api=cats["api"], split=cats["split"], by_category=cats["by_category"],
            source=cats["source"]),

        "self_hosted": "tasks with a declared control need (data control, residency, internal latency, "
                       "customised inference chain) and the regular agent/batch load",
        "api": "irregular peaks and any task whose trigger below fires",
        "transfer_triggers": [
            {"trigger": "capacity unavailable", "when": "/health not 200 or the engine dead for 2 consecutive checks"},
            {"trigger": "queue too long",
             "when": f"waiting-queue p95 above {figure(rules.queue_wait_p95_max_s, ' s')} over 15 min"},
            {"trigger": "repeated tool-call errors",
             "when": f"more than {rules.max_tool_error_rate:.0%} of a task type's calls malformed over 1 h"},
            {"trigger": "business deadline exceeded",
             "when": f"a task not delivered {figure(rules.business_deadline_s, ' s')} after submission"},
            {"trigger": "consumption below expectation",
             "when": f"mean GPU utilisation under {rules.idle_util_max:.0%} for a week"},
        ],
        "exit_rules": [
            "the self-hosted tasks no longer carry a specific control need",
            "utilisation no longer justifies the reserved capacity",
            "the API reaches equivalent quality on the representative task set",
            "operations effort exceeds the delivery gain",
            f"incidents cannot be recovered within {figure(rules.max_recovery_min, ' min')}",
        ],
        "exit_when_persisting_for_days": rules.reexamine_after_days,
    }


def condition(decision: str, rules: RenewalRules, reexamine_on: str) -> str:
    return {
        "renew": f"re-examine at the next billing cycle ({reexamine_on}) with the same rules",
        "reduce": "restore the previous capacity if the waiting-queue p95 exceeds "
                  f"{figure(rules.queue_wait_p95_max_s, ' s')} "
                  f"(the business threshold); re-examine on {reexamine_on}",
        "dual-circuit": "the task types sent to each path are fixed in advance (routing); leave the dual circuit "
                        f"when an exit rule persists for {rules.reexamine_after_days} days",
        "exit-to-api": "keep the logs and this review; re-run the review on a fresh test before any new rental",
    }[decision]


def checklist(axes: Axes, statuses: Mapping[str, str]) -> list[ChecklistItem]:
    return [{"id": a, "status": statuses.get(a, "not-run" if axes.get(a) is None else "pass"),
             "evidence": f"evidence/{a}.json" if axes.get(a) is not None else None} for a in AXES]


def thin_evidence(rule: RenewalRule, ind: Indicators, found: list[RenewalFinding]) -> RenewalFinding | None:
    """The decision fired on a premise the evidence does not show (the load, or the useful production): the data
    is too thin for any of the four decisions — it is stated and not signed (the dual circuit is no fallback for
    missing evidence)."""
    shown_by = {"dual.load-not-shown": ("load.regular", "load.large_idle"), "dual.quality-missed": ("production.quality",)}
    if rule.id not in shown_by or (rule.id == "dual.quality-missed" and ind.quality_ok is not None):
        return None
    why = [s for f in found if f.rule in shown_by[rule.id] and f.outcome is None
           for s in (f.measured.get("not_shown_because") or [])]
    return RenewalFinding("review.thin", None, {"rule": rule.id, "because": sorted(set(why))})


def _value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return figure(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def decide_renewal(axes: Axes, rules: RenewalRules, declared_benefits: list[str],
                   *, statuses: Mapping[str, str] | None = None, today: dt.date | None = None,
                   defaulted: list[str] | tuple[str, ...] = (), live: PathsResult | None = None,
                   live_source: str | None = None, loosened: list[RenewalLoosened] | tuple[()] = (),
                   live_refused: str | None = None) -> RenewalDecision:
    """The decision from the six analyses and, when given, the live run of the same tasks on both paths (`live`, a
    `k3 paths` record; `live_refused`: why a run named was not read); `defaulted` names the thresholds and fixed
    elements left at their built-in defaults and `loosened` those set past their default toward renew — the
    decision's reasons and its condition state both."""
    ind, found = indicators(axes, rules, declared_benefits, live, live_source, live_refused)
    if any(not x.get("accepted_by") for x in loosened):
        ind = dataclasses.replace(ind, loosened_unaccepted=True)
    rule = decide_rule(ind)
    verdict = rule.decision.value
    reexamine = ((today or dt.date.today()) + dt.timedelta(days=rules.reexamine_after_days)).isoformat()
    missing = [a for a in AXES if axes.get(a) is None]
    findings = [RenewalFinding("decision.rule", True, {"decision": verdict, "rule": rule.id, "when": rule.when})]
    cond = condition(verdict, rules, reexamine)
    if loosened:
        findings.append(RenewalFinding("review.loosened", None, {"rules": [dict(x) for x in loosened]}))
        cond += ("; decided on loosened rules — " + ", ".join(
            f"{x['name']} {_value(x['value'])} (built-in {_value(x['default'])})"
            + (f", accepted by {x['accepted_by']}" if x.get("accepted_by") else ", not accepted")
            for x in loosened) + ": the decision holds only under them")
    if defaulted:
        findings.append(RenewalFinding("review.defaults", None,
                                       {"names": [k.removeprefix("review.") for k in defaulted]}))
        cond += (f"; decided on built-in defaults for {len(defaulted)} threshold(s) or fixed element(s) — write "
                 "them in the parameters file and re-run before signing")
    findings += found
    categories = category_routing(None if live_refused else live, live_source) if verdict == "dual-circuit" else None
    if categories is not None:
        findings.append(categories)
    if missing:
        findings.append(RenewalFinding("review.missing", None, {"axes": missing}))
    thin = thin_evidence(rule, ind, found)
    if thin is not None:
        findings.insert(1, thin)
        cond += "; not signable: decided on data too thin to show its premise (k3 sign refuses it)"
    return RenewalDecision(decision=verdict, findings=tuple(findings), checklist=tuple(checklist(axes, statuses or {})),
                           condition=cond, routing=routing(rules, categories) if verdict == "dual-circuit" else None,
                           reexamine_on=reexamine, rule=rule.id)
