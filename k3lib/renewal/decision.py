"""The renewal decision: converging indicators from the six axes, judged by rules fixed in advance, give renew,
reduce, dual-circuit or exit-to-api — each with its exit or re-examination condition (seed 004's final table).

Never decided from a throughput figure: every indicator is a share of time, of tasks or of hours. An axis without
evidence counts against renewal and says so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Mapping

from .rules import RenewalRules

DECISIONS = ("renew", "reduce", "dual-circuit", "exit-to-api")
EXIT_CODES = {"renew": 0, "reduce": 3, "dual-circuit": 4, "exit-to-api": 5}
AXES = ("load", "production", "comparison", "cost", "stability", "operations")
TRANSFER_TRIGGERS = ("capacity unavailable", "queue too long", "repeated tool-call errors",
                     "business deadline exceeded", "consumption below expectation")


@dataclasses.dataclass(frozen=True)
class Indicators:
    """What the rules read. None: the axis gave no evidence (never counted as favourable)."""

    regular_load: bool | None
    large_idle: bool | None
    spiky: bool | None
    quality_ok: bool | None
    recoverable: bool | None
    effort_ok: bool | None
    control_need: bool


@dataclasses.dataclass(frozen=True)
class RenewalDecision:
    decision: str
    reasons: tuple[str, ...]
    checklist: tuple[dict[str, Any], ...]
    condition: str
    routing: dict[str, Any] | None = None
    reexamine_on: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.decision]

    def to_dict(self) -> dict[str, Any]:
        out = {"decision": self.decision, "reasons": list(self.reasons), "checklist": list(self.checklist),
               "condition": self.condition, "reexamine_on": self.reexamine_on}
        if self.routing is not None:
            out["routing"] = self.routing
        return out

    def _repr_html_(self) -> str:
        from .figures import decision_html

        return decision_html(self)


def indicators(axes: Mapping[str, Mapping[str, Any] | None], rules: RenewalRules,
               declared_benefits: list[str]) -> tuple[Indicators, list[str]]:
    """Indicators and, for each, the sentence with the figure and the rule it came from."""
    why: list[str] = []
    load, prod, stab, ops = (axes.get(a) for a in ("load", "production", "stability", "operations"))
    regular = large_idle = spiky = quality = recoverable = effort = None
    if load:
        bb, cv = load.get("business_busy_share"), load.get("weekday_gpu_h_cv")
        regular = bb is not None and cv is not None and bb >= rules.regular_busy_share_min \
            and cv <= rules.regular_daily_cv_max
        why.append(f"load {'regular' if regular else 'not regular'}: business-hour slots busy {bb:.0%} "
                   f"(rule ≥ {rules.regular_busy_share_min:.0%}), weekday GPU-hours CV {_f(cv)} "
                   f"(rule ≤ {rules.regular_daily_cv_max:g})" if bb is not None else "load: no business-hour slots")
        li = load.get("large_idle_share") or 0.0
        large_idle = li > rules.large_idle_share_max
        why.append(f"{li:.0%} of the window in idle stretches ≥ {rules.large_idle_min_h:g} h "
                   f"(rule: large idle above {rules.large_idle_share_max:.0%}); utilisation {_p(load.get('utilisation'))}"
                   f", idle for lack of demand {_p(load.get('idle_demand_share'))}, idle while tasks wait "
                   f"{_p(load.get('idle_scheduling_share'))}")
        ptm = load.get("peak_to_mean")
        spiky = ptm is not None and ptm >= rules.peak_to_mean_min
        why.append(f"demand {'spiky' if spiky else 'not spiky'}: hourly arrivals p99/mean {_f(ptm)} "
                   f"(rule: spiky from {rules.peak_to_mean_min:g})")
    else:
        why.append("load: no evidence")
    if prod:
        acc, rpt, tes = prod.get("acceptance_rate"), prod["losses"].get("retries_per_task"), \
            prod["losses"].get("tool_error_share")
        quality = acc is not None and acc >= rules.min_acceptance_rate and (rpt or 0) <= rules.max_retries_per_task \
            and (tes or 0) <= rules.max_tool_error_rate
        why.append(f"useful production {'meets' if quality else 'misses'} the rule: acceptance {_p(acc)} "
                   f"(≥ {rules.min_acceptance_rate:.0%}), retries/task {_f(rpt)} (≤ {rules.max_retries_per_task:g}), "
                   f"tasks with malformed tool calls {_p(tes)} (≤ {rules.max_tool_error_rate:.0%}); "
                   f"{_f(prod.get('accepted_per_operating_h'))} accepted tasks per operating hour")
    else:
        why.append("useful production: no evidence")
    if stab:
        recoverable = stab.get("recoverable")
        drill = stab.get("drill")
        drill_text = "; no live drill run" if not drill else f"; drill: {drill.get('summary', '')}"
        verdict = {True: "recoverable", False: "not recoverable", None: "recovery not shown"}[recoverable]
        why.append(f"incidents {verdict}: {stab.get('incidents')} in the "
                   f"log, {_p(stab.get('recovered_within_rule_share'))} recovered within "
                   f"{rules.max_recovery_min:g} min"
                   + ("" if recoverable else " — " + "; ".join(stab.get("not_recoverable_because", []))) + drill_text)
    else:
        why.append("stability: no evidence")
    if ops:
        per_week = ops.get("per_week_h")
        effort = per_week is not None and per_week <= rules.max_ops_hours_per_week
        why.append(f"operations effort {'contained' if effort else 'heavy'}: {_f(per_week)} h/week "
                   f"(rule ≤ {rules.max_ops_hours_per_week:g}); delivery gain {_f(ops.get('delivery_gain_h'))} h "
                   f"against {_f(ops.get('total_h'))} h spent")
    else:
        why.append("operations: no evidence")
    control = bool(declared_benefits)
    why.append(f"declared benefits: {', '.join(declared_benefits) if control else 'none'}")
    return Indicators(regular, large_idle, spiky, quality, recoverable, effort, control), why


def _f(x: Any) -> str:
    return "blank" if x is None else f"{x:g}" if isinstance(x, (int, float)) else str(x)


def _p(x: Any) -> str:
    return "blank" if x is None else f"{x:.0%}"


def choose(ind: Indicators) -> tuple[str, str]:
    """The decision and the rule that fired, strongest first (seed 004: "when acceptance fails")."""
    quality_bad = ind.quality_ok is not True
    under_used = ind.large_idle is not False or ind.regular_load is not True
    heavy = ind.recoverable is not True or ind.effort_ok is not True
    if quality_bad and (under_used or heavy):
        return "exit-to-api", "useful production below the rule together with idle capacity or unrecoverable " \
                              "incidents / heavy operations: quality, use and recovery do not hold"
    if ind.spiky and ind.control_need:
        return "dual-circuit", "strong unpredictable peaks and a declared data-control need: keep a controlled " \
                               "path for those tasks, send the irregular rest to the API"
    if not quality_bad and ind.regular_load and heavy:
        return "dual-circuit", "frequent useful tasks but incidents or operations effort above the rule: test the " \
                               "dual circuit first"
    if quality_bad:
        return "dual-circuit", "capacity well used but the quality rule is missed: route the failing task types " \
                               "to the API"
    if under_used or ind.spiky:
        return "reduce", "useful tasks but large idle periods or irregular load: test a smaller capacity first"
    return "renew", "regular load, accepted tasks, recoverable incidents and contained effort converge"


def routing(rules: RenewalRules) -> dict[str, Any]:
    """The dual circuit's transfer triggers and exit rules, fixed now, before the next bill is read."""
    return {
        "self_hosted": "tasks with a declared control need (data control, residency, internal latency, "
                       "customised inference chain) and the regular agent/batch load",
        "api": "irregular peaks and any task whose trigger below fires",
        "transfer_triggers": [
            {"trigger": "capacity unavailable", "when": "/health not 200 or the engine dead for 2 consecutive checks"},
            {"trigger": "queue too long", "when": f"waiting-queue p95 above {rules.queue_wait_p95_max_s:g} s over 15 min"},
            {"trigger": "repeated tool-call errors",
             "when": f"more than {rules.max_tool_error_rate:.0%} of a task type's calls malformed over 1 h"},
            {"trigger": "business deadline exceeded",
             "when": f"a task not delivered {rules.business_deadline_s:g} s after submission"},
            {"trigger": "consumption below expectation",
             "when": f"mean GPU utilisation under {rules.idle_util_max:.0%} for a week"},
        ],
        "exit_rules": [
            "the self-hosted tasks no longer carry a specific control need",
            "utilisation no longer justifies the reserved capacity",
            "the API reaches equivalent quality on the representative task set",
            "operations effort exceeds the delivery gain",
            f"incidents cannot be recovered within {rules.max_recovery_min:g} min",
        ],
        "exit_when_persisting_for_days": rules.reexamine_after_days,
    }


def condition(decision: str, rules: RenewalRules, reexamine_on: str) -> str:
    return {
        "renew": f"re-examine at the next billing cycle ({reexamine_on}) with the same rules",
        "reduce": f"restore the previous capacity if the waiting-queue p95 exceeds {rules.queue_wait_p95_max_s:g} s "
                  f"(the business threshold); re-examine on {reexamine_on}",
        "dual-circuit": "the task types sent to each path are fixed in advance (routing); leave the dual circuit "
                        f"when an exit rule persists for {rules.reexamine_after_days} days",
        "exit-to-api": "keep the logs and this review; re-run the review on a fresh test before any new rental",
    }[decision]


def checklist(axes: Mapping[str, Mapping[str, Any] | None], statuses: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"id": a, "status": statuses.get(a, "not-run" if axes.get(a) is None else "pass"),
             "evidence": f"evidence/{a}.json" if axes.get(a) is not None else None} for a in AXES]


def decide_renewal(axes: Mapping[str, Mapping[str, Any] | None], rules: RenewalRules, declared_benefits: list[str],
                   *, statuses: Mapping[str, str] | None = None, today: dt.date | None = None) -> RenewalDecision:
    ind, why = indicators(axes, rules, declared_benefits)
    verdict, rule = choose(ind)
    reexamine = ((today or dt.date.today()) + dt.timedelta(days=rules.reexamine_after_days)).isoformat()
    missing = [a for a in AXES if axes.get(a) is None]
    reasons = [f"{verdict}: {rule}"] + why + ([f"no evidence for: {', '.join(missing)}"] if missing else [])
    return RenewalDecision(verdict, tuple(reasons), tuple(checklist(axes, statuses or {})),
                           condition(verdict, rules, reexamine),
                           routing(rules) if verdict == "dual-circuit" else None, reexamine)
