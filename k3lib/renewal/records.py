"""Axis results → evidence records (findings as values), and back: the summary decides from records alone."""

from __future__ import annotations

from typing import Any

from ..evidence import EvidenceRecord, Finding, axis_status
from ..paths.record import RECORD_FILE, read_paths_record
from ..store import RunStore
from .decision import AXES, RenewalDecision, indicators, money
from .params import RenewalParams
from .results import read_record_data, record_data, typed
from .review import decide_from_axes

TITLES = {"load": "Load: used vs reserved capacity", "production": "Useful production",
          "comparison": "Self-hosted vs API on the same tasks", "cost": "Full cost per accepted task",
          "stability": "Stability and the incident drill", "operations": "Operations effort"}
_ANSWER_STATUS = {"yes": "pass", "no": "fail", "not shown": "not-observable"}
_SHOWN = {True: "pass", False: "fail", None: "not-observable"}  # an indicator the evidence did not show is open


def _findings(axis: str, result: Any, params: RenewalParams) -> list[Finding]:
    """The axis' evidence findings, from the decision's findings on its typed result (values, never sentences
    read back)."""
    rules = params.review.rules
    result = typed(axis, result)
    _, found = indicators({axis: result}, rules, params.review.benefits.declared())
    by = {f.rule: f for f in found}
    out: list[Finding] = []

    def add(rule: str, status: str, **extra: Any) -> None:
        f = by[rule]
        out.append(Finding(rule=f"renewal.{rule}", status=status, message=f.sentence, **extra))  # type: ignore[arg-type]

    if axis == "load":
        m = by["load.large_idle"].measured
        add("load.regular", "pass" if by["load.regular"].outcome else "warn",
            observed=by["load.regular"].measured["business_busy_share"])
        add("load.large_idle", "warn" if by["load.large_idle"].outcome else "pass", observed=m["large_idle_share"],
            expected=f"≤ {m['large_idle_share_max']}")
        add("load.peaks", "info", observed=by["load.peaks"].measured["peak_to_mean"])
    elif axis == "production":
        m = by["production.quality"].measured
        add("production.quality", "pass" if by["production.quality"].outcome else "fail",
            observed=m["acceptance_rate"], expected=f"≥ {m['min_acceptance_rate']}")
        over, allowed = m["over_retry_policy"], m["retry_policy_max_retries"]
        if over:
            out.append(Finding(rule="renewal.production.retry_policy", status="warn",
                               message=f"{over} self-hosted task(s) retried more than the fixed retry policy's "
                                       f"{allowed}: not run under the same policy as the API path", observed=over,
                               expected=f"≤ {allowed} retries per task"))
    elif axis == "comparison":
        f = by["comparison.api_equivalent"]
        add("comparison.api_equivalent", {True: "warn", False: "pass", None: "not-observable"}[f.outcome],
            observed=f.outcome, expected=f"gap ≤ {f.measured['api_equivalent_gap_max']}")
    elif axis == "cost":
        m = by["cost.per_accepted_task"].measured
        cur, blanks = m["currency"], m["blank_items"]
        add("cost.per_accepted_task", _SHOWN[by["cost.per_accepted_task"].outcome],
            observed=money(m["self_hosted_per_accepted_task"], cur),
            expected=f"≤ {money(m['api_per_accepted_task'], cur)} (the API's)")
        out.append(Finding(rule="renewal.cost.blanks", status="info",
                           message=f"blank cost items (left blank, never estimated): {', '.join(blanks)}" if blanks
                           else "every self-hosted cost item is known", observed=blanks))
    elif axis == "stability":
        add("stability.recoverable", _SHOWN[by["stability.recoverable"].outcome])
        for q, a in (result.drill.answers if result.drill is not None else ()):
            out.append(Finding(rule=f"renewal.drill.{q}", status=_ANSWER_STATUS[a.answer],  # type: ignore[arg-type]
                               message=f"{a.question} {a.answer}: {a.evidence}", observed=a.answer))
    elif axis == "operations":
        add("operations.effort", _SHOWN[by["operations.effort"].outcome])
    return out


def axis_record(ctx: Any, result: dict[str, Any]) -> EvidenceRecord:
    """The evidence record of `ctx.axis` from its result, validated against the axis' typed model."""
    data = record_data(ctx.axis, result)
    findings = _findings(ctx.axis, data["result"], ctx.params)
    if ctx.axis == "comparison":  # the live run of the same tasks on both paths, when the notebook kept one
        findings += live_findings(ctx.store, ctx.params.review.rules)
    return EvidenceRecord(axis=ctx.axis, title=TITLES[ctx.axis], status=axis_status(findings),
                          summary="; ".join(f.message for f in findings)[:400],
                          findings=findings, data=data)


def axes_from_records(records: dict[str, EvidenceRecord]) -> tuple[dict[str, Any], dict[str, str]]:
    """Each axis' typed result as its record holds it (None when absent or failed), and each axis' status. A
    record whose result does not fit this kit's model (another kit version) is refused with one line."""
    axes: dict[str, Any] = {}
    statuses: dict[str, str] = {}
    for axis in AXES:
        rec = records.get(axis)
        ok = rec is not None and not rec.error
        axes[axis] = read_record_data(axis, rec.data, f"evidence/{axis}.json") if ok else None
        statuses[axis] = rec.status if rec else "not-run"
    return axes, statuses


def decide_review(params: RenewalParams, store: RunStore, records: dict[str, EvidenceRecord]) -> RenewalDecision:
    """Decide from the records alone, with the rules fixed in the parameters, and write `decision.json`."""
    axes, statuses = axes_from_records(records)
    decision = decide_from_axes(params, axes, statuses)
    store.write_json("decision.json", decision.to_dict())
    return decision


def live_findings(store: Any, rules: Any) -> list[Any]:
    """The comparison axis' live findings, when the live section kept a `paths` record in this review's run: does
    the API path meet the quality rule on the same tasks (the paired difference self-hosted − API against the
    review's `api_equivalent_gap_max`), and the four fixed elements it ran under."""
    if not store.path(RECORD_FILE).exists():
        return []
    result = read_paths_record(store.path(RECORD_FILE))
    gap = rules.api_equivalent_gap_max
    out = [Finding(rule="renewal.comparison.live_fixed", status="info",
                   message="live run under " + "; ".join(f"{f.name} sha256 {f.sha256[:12]}…" for f in result.fixed),
                   observed={f.name: f.sha256 for f in result.fixed})]
    for p in result.pairs:
        if p.difference is None or p.low is None or p.high is None:
            out.append(Finding(rule=f"renewal.comparison.live.{p.b}", status="not-observable",
                               message=f"no task ran on both {p.a} and {p.b}"))
            continue
        span = f"{p.a} − {p.b} acceptance {p.difference:+.1%} on {p.pairs} paired tasks (95 % {p.low:+.1%}–{p.high:+.1%})"
        if p.high <= gap:
            status, what = "warn", f"{p.b} meets the quality rule on the same tasks (gap ≤ {gap:.1%})"
        elif p.low > gap:
            status, what = "pass", f"{p.b} misses the quality rule on the same tasks (gap > {gap:.1%})"
        else:
            status, what = "not-observable", f"inconclusive whether {p.b} meets the quality rule (gap {gap:.1%})"
        only = f"; accepted on {p.a} only: {', '.join(p.only_a_tasks)}" if p.only_a_tasks else ""
        out.append(Finding(rule=f"renewal.comparison.live.{p.b}", status=status, message=f"{what}: {span}{only}",
                           observed=p.difference, expected=f"{p.a} − {p.b} ≤ {gap}"))
    return out
