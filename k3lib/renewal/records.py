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
    """The axis' findings, read from its typed result."""
    rules = params.review.rules
    result = typed(axis, result)
    ind, why = indicators({axis: result}, rules, params.review.benefits.declared())
    out: list[Finding] = []
    if axis == "load":
        out.append(Finding(rule="renewal.load.regular", status="pass" if ind.regular_load else "warn",
                           message=why[0], observed=result.business_busy_share))
        out.append(Finding(rule="renewal.load.large_idle", status="warn" if ind.large_idle else "pass", message=why[1],
                           observed=result.large_idle_share, expected=f"≤ {rules.large_idle_share_max}"))
        out.append(Finding(rule="renewal.load.peaks", status="info", message=why[2], observed=result.peak_to_mean))
    elif axis == "production":
        out.append(Finding(rule="renewal.production.quality", status="pass" if ind.quality_ok else "fail",
                           message=next(w for w in why if w.startswith("useful production")),
                           observed=result.acceptance_rate, expected=f"≥ {rules.min_acceptance_rate}"))
        over = result.over_retry_policy
        if over:
            out.append(Finding(rule="renewal.production.retry_policy", status="warn",
                               message=f"{over} self-hosted task(s) retried more than the fixed retry policy's "
                                       f"{result.retry_policy_max_retries}: not run under the same policy as "
                                       "the API path", observed=over,
                               expected=f"≤ {result.retry_policy_max_retries} retries per task"))
    elif axis == "comparison":
        out.append(Finding(rule="renewal.comparison.api_equivalent",
                           status={True: "warn", False: "pass", None: "not-observable"}[ind.api_equivalent],
                           message=next(w for w in why if w.startswith("the API")),
                           observed=ind.api_equivalent, expected=f"gap ≤ {rules.api_equivalent_gap_max}"))
    elif axis == "cost":
        cur = result.currency
        blanks = list(result.self_hosted.blank_items)
        out.append(Finding(rule="renewal.cost.per_accepted_task", status=_SHOWN[ind.cheaper_than_api],
                           message=next(w for w in why if w.startswith("full cost")),
                           observed=money(result.self_hosted.per_accepted_task, cur),
                           expected=f"≤ {money(result.api.per_accepted_task, cur)} (the API's)"))
        out.append(Finding(rule="renewal.cost.blanks", status="info",
                           message=f"blank cost items (left blank, never estimated): {', '.join(blanks)}" if blanks
                           else "every self-hosted cost item is known", observed=blanks))
    elif axis == "stability":
        out.append(Finding(rule="renewal.stability.recoverable", status=_SHOWN[ind.recoverable],
                           message=next(w for w in why if w.startswith("incidents"))))
        for q, a in (result.drill.answers if result.drill is not None else ()):
            out.append(Finding(rule=f"renewal.drill.{q}", status=_ANSWER_STATUS[a.answer],  # type: ignore[arg-type]
                               message=f"{a.question} {a.answer}: {a.evidence}", observed=a.answer))
    elif axis == "operations":
        out.append(Finding(rule="renewal.operations.effort", status=_SHOWN[ind.effort_ok],
                           message=next(w for w in why if w.startswith("operations"))))
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
