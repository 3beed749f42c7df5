"""The renewal decision's findings as values: each indicator the rules read, with its outcome and the measured
figures and thresholds it was judged on, under a stable rule id.

An outcome is the indicator its rule id names, so True is not always the good case (`load.large_idle` is True when
the idle periods are large). Each finding therefore carries its `polarity` — which outcome favours keeping the
self-hosted capacity — from one table, `POLARITY`, and states its `status` in the acceptance `Finding`'s
vocabulary (pass · warn · fail · info · not-observable): no reader has to know a rule id to read an outcome.

The sentences of the decision's reasons are rendered from these values, one renderer per rule id; nothing reads a
sentence back — the evidence records and the report take the values (`RenewalDecision.finding(rule)`).
"""

from __future__ import annotations

import enum
from pathlib import PurePath
from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field, computed_field

from ..core.evidence import FindingStatus
from ..core.numbers import figure
from .results import CreditLine

Measured = Mapping[str, Any]


class Polarity(enum.StrEnum):
    """Which outcome of a finding favours keeping the self-hosted capacity."""

    HOLDS_IS_GOOD = "holds-is-good"  # True favours it (load.regular, production.quality, ...)
    HOLDS_IS_BAD = "holds-is-bad"  # True counts against it (load.large_idle, comparison.api_equivalent, ...)
    CONTEXT = "context"  # neither: what the decision was decided on or under (decision.rule, review.*, ...)


# Each rule id's polarity, and the status its unfavourable outcome takes on the axis' evidence record ("warn": an
# indicator that steers the decision but is no defect of the deployment; "fail": a premise of renew not met).
POLARITY: dict[str, tuple[Polarity, FindingStatus]] = {
    "load.regular": (Polarity.HOLDS_IS_GOOD, "warn"),
    "load.large_idle": (Polarity.HOLDS_IS_BAD, "warn"),
    "production.quality": (Polarity.HOLDS_IS_GOOD, "fail"),
    "comparison.api_equivalent": (Polarity.HOLDS_IS_BAD, "warn"),
    "comparison.live": (Polarity.HOLDS_IS_BAD, "warn"),  # True: the API path meets the quality rule live
    "cost.per_accepted_task": (Polarity.HOLDS_IS_GOOD, "fail"),
    "stability.recoverable": (Polarity.HOLDS_IS_GOOD, "fail"),
    "operations.effort": (Polarity.HOLDS_IS_GOOD, "fail"),
}
_CONTEXT: tuple[Polarity, FindingStatus] = (Polarity.CONTEXT, "info")  # load.peaks, benefits, routing, review.*


class RenewalFinding(BaseModel):
    """One finding of the decision. `outcome` is the indicator the rule id names (`load.large_idle`: True when the
    idle periods are large): True holds, False does not, None not shown by the evidence — never favourable.
    `polarity` says which of True and False is the good case; `status` reads the outcome through it. Stored as
    `model_dump()` (rule, outcome, measured and the rendered sentence), read back by `model_validate`."""

    model_config = ConfigDict(frozen=True)

    rule: str  # a stable id, e.g. "load.regular"; the axis record's finding is "renewal.<rule>"
    outcome: bool | None = None
    measured: dict[str, Any] = Field(default_factory=dict)  # JSON-ready figures and thresholds, by name

    def __init__(self, rule: str, outcome: bool | None = None, measured: Measured | None = None,
                 **stored: Any) -> None:  # positional, as the rules write it; `stored`: the sentence read back, unused
        super().__init__(rule=rule, outcome=outcome, measured=dict(measured or {}), **stored)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sentence(self) -> str:
        render = SENTENCES.get(self.rule) or SENTENCES.get(self.rule.split(".", 1)[1] if "." in self.rule else "")
        if render is None:
            raise KeyError(f"no sentence for renewal finding {self.rule!r}")
        return render(self.outcome, self.measured)

    @property
    def polarity(self) -> Polarity:
        return POLARITY.get(self.rule, _CONTEXT)[0]

    @property
    def favourable(self) -> bool | None:
        """Whether the outcome favours keeping the capacity: None when not shown, or for a context finding."""
        if self.outcome is None or self.polarity is Polarity.CONTEXT:
            return None
        return self.outcome is (self.polarity is Polarity.HOLDS_IS_GOOD)

    @property
    def status(self) -> FindingStatus:
        """The outcome as the acceptance `Finding` states one: pass, the rule's unfavourable status, not-observable
        (never favourable) or info (a context finding)."""
        polarity, against = POLARITY.get(self.rule, _CONTEXT)
        if polarity is Polarity.CONTEXT:
            return "info"
        if self.outcome is None:
            return "not-observable"
        return "pass" if self.favourable else against


# --- formatting: a blank stays blank, never 0 ------------------------------------------------------------------------

def money(x: Any, currency: str | None) -> str:
    """An amount with its currency, or "blank" (never 0)."""
    return "blank" if x is None else f"{x:,.2f} {currency or '(no currency)'}"


def _f(x: Any, unit: str = "") -> str:
    return "blank" if x is None else figure(x, unit)


def _p(x: Any) -> str:
    return "blank" if x is None else f"{x:.0%}"


def _pp(x: Any) -> str:
    return "blank" if x is None else f"{x:.1%}"


# --- one renderer per rule id ----------------------------------------------------------------------------------------

def _decision(o: bool | None, m: Measured) -> str:
    return f"{m['decision']}: {m['when']}"


def _v(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return figure(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _loosened(o: bool | None, m: Measured) -> str:
    rows = m["rules"]
    open_ = [x for x in rows if not x.get("accepted_by")]
    return ("decided on loosened rules or scopes (set past the reference review's toward renew, or other than it): "
            + ", ".join(f"{x['name']} {_v(x['value'])} (built-in {_v(x['default'])}, from {x['origin']}"
                        + (f"; accepted by {x['accepted_by']}: {x.get('accepted_why')}" if x.get("accepted_by")
                           else "; not accepted") + ")" for x in rows)
            + (f" — {len(open_)} not accepted: renew is not allowed on them" if open_ else ""))


def _scope(o: bool | None, m: Measured) -> str:
    where = ", ".join(m["hostnames"]) or f"{m['gpu_uuids']} named GPU(s)"
    left = "; ".join(f"{x['series']} {x['name']} series: {x['reason']}" for x in m["left_out"])
    outside = [f"{n} {what}" for n, what in ((m["tasks_outside"], "task(s)"), (m["incidents_outside"], "incident(s)"),
                                              (m["hours_rows_outside"], "hours row(s)")) if n]
    return (f"one deployment, one window: {m['model_name']} on {where}, {m['gpus']} reserved GPU(s) "
            f"({m['gpus_in_series']} in the series)"
            + (f", identified from acceptance run {_run_name(m['acceptance_run'])}" if m.get("acceptance_run") else "")
            + f"; window {m['start'][:10]} to {m['end'][:10]} ({figure(m['days'])} days, slot means over "
            f"{figure(m['step_s'])} s)"
            + (f"; series left out: {left}" if left else "")
            + (f"; outside the window, not read: {', '.join(outside)}" if outside else ""))


def _defaults(o: bool | None, m: Measured) -> str:
    return f"decided on built-in defaults (illustrative values, not this team's rules) for: {', '.join(m['names'])}"


def _thin(o: bool | None, m: Measured) -> str:
    return (f"too thin to decide: {'; '.join(m['because']) or 'a premise is not shown'} — {m['rule']} fired on what "
            "the evidence does not show, so none of the four decisions is signed on it; supply the missing data "
            "(the task log, the series of the window) and re-run")


def _missing(o: bool | None, m: Measured) -> str:
    return f"no evidence for: {', '.join(m['axes'])}"


def _no_evidence(o: bool | None, m: Measured) -> str:
    return f"{m['analysis']}: no evidence"


def _not_shown(m: Measured) -> str:
    return "; ".join(m.get("not_shown_because") or []) or "no figure"


def _regular(o: bool | None, m: Measured) -> str:
    bb = m["business_busy_share"]
    if o is None:
        return f"load not shown (neither idle nor busy): {_not_shown(m)}" if not m.get("shown", True) else \
            f"load regularity not shown: business-hour slots busy {_p(bb)}, utilisation {_p(m.get('utilisation'))}"
    return (f"load {'regular' if o else 'not regular'}: business-hour slots busy {bb:.0%} "
            f"(rule ≥ {m['regular_busy_share_min']:.0%}), weekday GPU-hours CV {_f(m['weekday_gpu_h_cv'])} "
            f"(rule ≤ {figure(m['regular_daily_cv_max'])}), mean utilisation of the reserved GPUs "
            f"{_p(m.get('utilisation'))} (rule ≥ {m.get('min_utilisation', 0):.0%})")


def _large_idle(o: bool | None, m: Measured) -> str:
    if not m.get("shown", True):
        return f"idle periods not shown: {_not_shown(m)}"
    return (f"{_p(m['large_idle_share'])} of the window in idle stretches ≥ {figure(m['large_idle_min_h'])} h "
            f"(rule: large idle above {m['large_idle_share_max']:.0%}); utilisation {_p(m['utilisation'])}"
            f", idle for lack of demand {_p(m['idle_demand_share'])}"
            + (f" (rule: under-used above {m['idle_demand_share_max']:.0%})" if "idle_demand_share_max" in m else "")
            + f", idle while tasks wait {_p(m['idle_scheduling_share'])}"
            + _worst(m)
            + _waiting(m.get("waiting_causes"))
            + (f" — slot means over {figure(m['step_s'])} s" if m.get("step_s") else "")
            + (f"; worst case over the gap: {_not_shown(m)}" if not m.get("shown", True) else ""))


def _worst(m: Measured) -> str:
    """Each share with its worst case over the gap (every slot not shown read idle), when the gap could move it."""
    w = m.get("worst_case")
    if not w or (w["idle_demand_share"], w["large_idle_share"]) == (m["idle_demand_share"], m["large_idle_share"]):
        return ""
    return (f" (worst case over the slots not shown: idle for lack of demand {_p(w['idle_demand_share'])}, large "
            f"idle {_p(w['large_idle_share'])}, utilisation {_p(w['utilisation'])})")


def _waiting(w: Any) -> str:
    """Idle time is read as "tasks waiting" only where the queue gauge and the task log both show it."""
    if not w:
        return ""
    parts = []
    if w["gauge_only_idle_slots"]:
        parts.append(f"{w['gauge_only_idle_slots']} idle slot(s) where only the queue gauge shows requests waiting "
                     "(no task of the log waiting: a stuck gauge?)")
    if w["log_only_idle_slots"]:
        parts.append(f"{w['log_only_idle_slots']} where only the task log does")
    if w["long_waiting_count"]:
        parts.append(f"{w['long_waiting_count']} task(s) waiting longer than a large idle stretch "
                     f"({', '.join(w['long_waiting_tasks'])})")
    return (" (read as tasks waiting only where the queue gauge and the task log both show it; not read: "
            + "; ".join(parts) + ")") if parts else ""


def _peaks(o: bool | None, m: Measured) -> str:
    return (f"demand {'spiky' if o else 'not spiky'}: hourly arrivals p99/mean {_f(m['peak_to_mean'])} "
            f"(rule: spiky from {figure(m['peak_to_mean_min'])})")


def _ci(low: Any, high: Any) -> str:
    return "" if low is None or high is None else f", 95 % {_pp(low)}–{_pp(high)}"


def _quality(o: bool | None, m: Measured) -> str:
    over = m["over_retry_policy"]
    verdict = {True: "meets", False: "misses", None: "is not shown to meet"}[o]
    outside = m.get("outside_task_set") or {}
    tasks = m.get("tasks")
    return (f"useful production {verdict} the rule: acceptance {_p(m['acceptance_rate'])}"
            f"{_ci(m.get('acceptance_low'), m.get('acceptance_high'))} (≥ {m['min_acceptance_rate']:.0%})"
            + ("" if tasks is None else f" on {figure(tasks)} task(s) of the task set ({', '.join(m['task_set'])})")
            + f", retries/task {_f(m['retries_per_task'])} (≤ {figure(m['max_retries_per_task'])}, each task's "
            f"bounded by the retry policy's {m['retry_policy_max_retries']}), tasks with malformed tool calls "
            f"{_p(m['tool_error_share'])}{_ci(m.get('tool_error_low'), m.get('tool_error_high'))} "
            f"(≤ {m['max_tool_error_rate']:.0%}); "
            f"{_f(m['accepted_per_operating_h'], ' accepted tasks per operating hour')}"
            + (f"; {over} task(s) retried more than the fixed retry policy's {m['retry_policy_max_retries']}, not "
               f"accepted under it: {', '.join(m.get('over_retry_policy_tasks') or [])}" if over else "")
            + (f"; not counted: {', '.join(f'{n} {c}' for c, n in outside.items())} task(s) outside the task set"
               if outside else "")
            + (f"; not shown: {_not_shown(m)}" if m.get("not_shown_because") else ""))


def _api_equivalent(o: bool | None, m: Measured) -> str:
    verdict = {True: "reaches", False: "does not reach", None: "is not shown to reach"}[o]
    if m.get("source") == "live":
        return _api_equivalent_live(verdict, m)
    few = m.get("min_sample_tasks") is not None and m["paired_tasks"] < m["min_sample_tasks"]
    diff = ("" if m.get("difference_low") is None else
            f" (self-hosted − API {m['difference']:+.1%}, 95 % {m['difference_low']:+.1%} to "
            f"{m['difference_high']:+.1%})")
    return (f"the API {verdict} equivalent quality on {m['paired_tasks']} tasks run on both paths in the task log"
            + (f" (fewer than {m['min_sample_tasks']}, rules.min_sample_tasks: not shown)" if few else "") + ": "
            f"acceptance {_p(m['self_hosted_acceptance_rate'])} self-hosted vs {_p(m['api_acceptance_rate'])} API{diff}, "
            f"malformed tool calls {_p(m['self_hosted_tool_error_share'])} vs {_p(m['api_tool_error_share'])} "
            f"(equivalent within {m['api_equivalent_gap_max']:.0%}), median delivery "
            f"{_f(m['self_hosted_delivery_median_s'], ' s')} vs {_f(m['api_delivery_median_s'], ' s')}")


def _api_equivalent_live(verdict: str, m: Measured) -> str:
    n, gap, log = m["tasks"], m["api_equivalent_gap_max"], m["task_log"]

    def signed(x: Any) -> str:
        return "blank" if x is None else f"{x:+.1%}"

    interval = ("no interval" if m["difference_low"] is None else
                f"95 % {signed(m['difference_low'])} to {signed(m['difference_high'])}")
    log_verdict = None if log is None else {True: "equivalent", False: "not equivalent",
                                            None: "not shown"}[log["api_equivalent"]]
    rule = m["quality_rule_sha256"]
    context = ("; the task log holds no comparison" if log is None else
               f"; the task log's figure, context only: {log['paired_tasks']} tasks on both paths, acceptance "
               f"{_p(log['self_hosted_acceptance_rate'])} self-hosted vs {_p(log['api_acceptance_rate'])} API "
               f"({log_verdict}), not used")
    return (f"the API {verdict} equivalent quality on the same {n} tasks run live on both paths "
            f"({_run_name(m['run'] or 'live run')}"
            + ("" if rule is None else f", quality rule sha256 {rule[:12]}…")
            + f"): self-hosted − API acceptance {signed(m['difference'])} ({interval}; equivalent when at most "
            f"{gap:.0%}), self-hosted {m['self_hosted_accepted']}/{n} (95 % Wilson "
            f"{_pp(m['self_hosted_acceptance_low'])}–{_pp(m['self_hosted_acceptance_high'])}) vs API "
            f"{m['api_accepted']}/{n} ({_pp(m['api_acceptance_low'])}–{_pp(m['api_acceptance_high'])}), tasks with "
            f"malformed tool calls {_p(m['self_hosted_tool_error_share'])} vs {_p(m['api_tool_error_share'])}"
            + context)


def _range(low: Any, high: Any, cur: str | None) -> str:
    if low is None:
        return ""
    return f" (95 % {money(low, cur)}–{'no bound' if high is None else money(high, cur)})"


def _cost(o: bool | None, m: Measured) -> str:
    cur, blanks = m["currency"], m["blank_items"]
    verdict = {True: "at most", False: "above", None: "not comparable with"}[o]
    why = m.get("not_comparable_because") or []
    return (f"full cost per accepted task {money(m['self_hosted_per_accepted_task'], cur)} self-hosted"
            f"{_range(m.get('self_hosted_low'), m.get('self_hosted_high'), cur)}, {verdict} "
            f"the API's {money(m['api_per_accepted_task'], cur)}{_range(m.get('api_low'), m.get('api_high'), cur)} "
            f"on the same tasks"
            + (f" — {'; '.join(why)}" if why else "")
            + f"; self-hosted total {money(m['self_hosted_total'], cur)}"
            + (f" (blank: {', '.join(blanks)} — a blank item leaves the total blank, never estimated)"
               if blanks else "")
            + ("" if m["delivered_tasks_value"] is None else
               f"; value of the delivered tasks {money(m['delivered_tasks_value'], cur)}")
            + _credit_lines(m.get("credits") or [], cur)
            + (f"; {m['routed_to_api_tasks']} self-hosted task(s) finished by the API, counted as self-hosted "
               "failures" if m.get("routed_to_api_tasks") else ""))


def _credit_lines(stored: list[Any], cur: str | None) -> str:
    """The cost's credits (`measured["credits"]`: each a `CreditLine` as JSON, validated back), netted or apart."""
    credits = [CreditLine.model_validate(c) for c in stored]
    if not credits:
        return ""
    def one(c: CreditLine) -> str:
        what = c.charge_category or "credit"
        return (f"{money(c.amount, cur)} ({what}, {c.item}"
                + (f", {c.description}" if c.description else "") + ")")
    netted = [one(c) for c in credits if c.netted]
    apart = [one(c) for c in credits if not c.netted]
    return ((f"; credits and refunds listed apart, not netted (netted only when recurring and accepted): "
             f"{', '.join(apart)}" if apart else "")
            + (f"; recurring credits netted as accepted: {', '.join(netted)}" if netted else ""))


def _recoverable(o: bool | None, m: Measured) -> str:
    verdict = {True: "recoverable", False: "not recoverable", None: "recovery not shown"}[o]
    drill = m["drill_summary"]
    return (f"incidents {verdict}: {m['incidents']} in the log, "
            f"{_p(m['recovered_within_rule_share'])} recovered within {figure(m['max_recovery_min'])} min"
            + ("" if o else " — " + "; ".join(m["not_recoverable_because"]))
            + (f"; {m['outside_window']} incident(s) outside the window not read" if m.get("outside_window") else "")
            + ("; no live drill run" if drill is None else f"; drill: {drill}"))


def _effort(o: bool | None, m: Measured) -> str:
    verdict = {True: "contained", False: "heavy", None: "not shown contained"}[o]
    if m.get("not_shown_because"):
        return f"operations effort not shown: {_not_shown(m)}"
    exceeds = m["effort_exceeds_gain"]
    return (f"operations effort {verdict}: {_f(m['per_week_h'], ' h/week')} "
            f"(rule ≤ {figure(m['max_ops_hours_per_week'])}); "
            f"delivery gain {_f(m['delivery_gain_h'], ' h')} against {_f(m['total_h'], ' h')} spent"
            + {True: " (effort exceeds the gain)", False: "", None: " (gain unknown)"}[exceeds]
            + (f"; {figure(m['unclassified_h'])} h of it unclassified (no category mapped), counted"
               if m.get("unclassified_h") else ""))


def _benefits(o: bool | None, m: Measured) -> str:
    return f"declared benefits: {', '.join(m['declared']) if m['declared'] else 'none'}"


def _run_name(source: str) -> str:
    """A live run by its folder's name (the report names no machine path; the finding keeps the whole path)."""
    p = PurePath(source)
    return p.parent.parent.name if p.name == "paths.json" and p.parent.name == "evidence" else p.name


def _aside(aside: Any) -> str:
    return "; ".join(f"{p}: " + ", ".join(f"{n} on {k}" for k, n in kinds.items()) for p, kinds in (aside or {}).items())


def _live(o: bool | None, m: Measured) -> str:
    if m.get("refused"):
        return (f"open: the live run {_run_name(m['source'] or 'named')} is not the review's — {m['refused']}; it is not "
                "read (the comparison rests on the task log only)")
    if m.get("source") is not None and "tasks" not in m and "paired" in m:
        aside = _aside(m.get("set_aside"))
        return (f"open: the live run {_run_name(m['source'])} is inconclusive — {m['paired']} task(s) on both paths "
                f"with an answer attempt (rule: at least {m['min_sample_tasks']})"
                + (f"; set aside as transport or authentication failures, not quality misses: {aside}" if aside else "")
                + " — it neither allows nor blocks exit-to-api")
    if m.get("source") is None:
        return ("open: the self-hosted vs API comparison rests on the task log only, not on the same tasks run on "
                "both paths (no `k3 paths` run named by review.live_paths) — exit-to-api is not backed by a live run")
    if "tasks" not in m:
        return (f"open: the live run {_run_name(m['source'])} has no self_hosted and api paths run on the same tasks "
                f"(its paths: {', '.join(m['paths']) or 'none'}) — the comparison rests on the task log only")
    n = m["tasks"]
    sign = "≥" if o else "<"
    return (f"live run of the same {n} tasks on both paths ({_run_name(m['source'])}): API accepted "
            f"{m['api_accepted']}/{n} = {m['api_acceptance_rate']:.0%} (95 % Wilson {_pp(m['api_acceptance_low'])}–"
            f"{_pp(m['api_acceptance_high'])}), self-hosted {m['self_hosted_accepted']}/{n} = "
            f"{m['self_hosted_acceptance_rate']:.0%} ({_pp(m['self_hosted_acceptance_low'])}–"
            f"{_pp(m['self_hosted_acceptance_high'])}); the API path {'meets' if o else 'misses'} the quality rule: "
            f"its lower bound {_pp(m['api_acceptance_low'])} {sign} {_pp(m['bar'])} ({m['bar_from']})"
            + ("" if o else " — exit-to-api is not allowed")
            + (f"; set aside as transport or authentication failures: {_aside(m['set_aside'])}"
               if m.get("set_aside") else ""))


def _categories(o: bool | None, m: Measured) -> str:
    if o is None:
        return ("open: the dual circuit's routing names no task category — that needs a live run of the same tasks "
                "on both paths (review.live_paths); until then the transfer triggers alone route")
    rows = {r["category"]: r for r in m["by_category"]}
    if not rows:
        return (f"routing by task category ({_run_name(m['source'])}): no task of the {m['tasks']} fails on one "
                "path only; either path serves every category, the transfer triggers route")

    def tasks(cats: list[str], side: str) -> str:
        return "; ".join(f"{c} ({', '.join(rows[c][side])})" for c in cats)

    parts = []
    if m["self_hosted"]:
        parts.append(f"kept self-hosted: {tasks(m['self_hosted'], 'fail_on_api_only')} — failing on the API only")
    if m["api"]:
        parts.append(f"sent to the API: {tasks(m['api'], 'fail_on_self_hosted_only')} — failing self-hosted only")
    if m["split"]:
        parts.append("split task by task: " + "; ".join(
            f"{c} (self-hosted: {', '.join(rows[c]['fail_on_api_only'])}; API: "
            f"{', '.join(rows[c]['fail_on_self_hosted_only'])})" for c in m["split"]))
    return (f"routing by task category, from the live run's per-task differences ({_run_name(m['source'])}): "
            + "; ".join(parts))


SENTENCES: dict[str, Callable[[bool | None, Measured], str]] = {
    "decision.rule": _decision,
    "review.defaults": _defaults,
    "review.loosened": _loosened,
    "review.scope": _scope,
    "review.missing": _missing,
    "review.thin": _thin,
    "no_evidence": _no_evidence,  # "<axis>.no_evidence"
    "load.regular": _regular,
    "load.large_idle": _large_idle,
    "load.peaks": _peaks,
    "production.quality": _quality,
    "comparison.api_equivalent": _api_equivalent,
    "cost.per_accepted_task": _cost,
    "stability.recoverable": _recoverable,
    "operations.effort": _effort,
    "benefits.declared": _benefits,
    "comparison.live": _live,
    "routing.categories": _categories,
}
