"""Axis results → evidence records (findings as values), and back: the summary decides from records alone."""

from __future__ import annotations

from typing import Any, Protocol, cast

from ..axes.paths.record import REVIEW_COPY, PathsResult, read_paths_record
from ..core.evidence import EvidenceRecord, Finding, FindingStatus, axis_status, read_records
from ..core.store import RunStore
from ..verdict.shapes import DecisionDoc
from .decision import AXES, RenewalDecision, indicators, money
from .live import live_quality
from .params import RenewalParams
from .results import AxisResult, read_record_data, record_data, typed
from .review import decide_from_axes, live_refusal, run_params
from .shapes import AxisData, TypedAxes


class ReviewAxis(Protocol):
    """What recording a review axis reads of its context (`k3lib.renewal.notebook.ReviewContext`, which imports
    this module and passes itself in)."""

    @property
    def axis(self) -> str: ...

    @property
    def params(self) -> RenewalParams: ...

    @property
    def store(self) -> RunStore: ...


TITLES = {"load": "Load: used vs reserved capacity", "production": "Useful production",
          "comparison": "Self-hosted vs API on the same tasks", "cost": "Full cost per accepted task",
          "stability": "Stability and the incident drill", "operations": "Operations effort"}
_ANSWER_STATUS = {"yes": "pass", "no": "fail", "not shown": "not-observable"}


def _findings(axis: str, result: Any, params: RenewalParams, live: PathsResult | None = None) -> list[Finding]:
    """The axis' evidence findings, from the decision's findings on its typed result (values, never sentences
    read back); `live`, the review's live run, judges the comparison's equivalence as the decision does."""
    review = params.review
    result = typed(axis, result)
    _, found = indicators({axis: result}, review.rules, review.benefits.declared(), live, review.live_paths,
                          live_refusal(live, review.deployment.model_name, review.fixed.task_set.live_sha256))
    by = {f.rule: f for f in found}
    out: list[Finding] = []

    def add(rule: str, **extra: Any) -> None:
        f = by[rule]
        out.append(Finding(rule=f"renewal.{rule}", status=f.status, message=f.sentence, **extra))

    if axis == "load":
        m = by["load.large_idle"].measured
        add("review.scope", observed=by["review.scope"].measured["left_out"])
        add("load.regular", observed=by["load.regular"].measured["business_busy_share"])
        add("load.large_idle", observed=m["large_idle_share"], expected=f"≤ {m['large_idle_share_max']}")
        add("load.peaks", observed=by["load.peaks"].measured["peak_to_mean"])
    elif axis == "production":
        m = by["production.quality"].measured
        add("production.quality", observed=m["acceptance_rate"], expected=f"≥ {m['min_acceptance_rate']}")
        over, allowed = m["over_retry_policy"], m["retry_policy_max_retries"]
        if over:
            out.append(Finding(rule="renewal.production.retry_policy", status="warn",
                               message=f"{over} self-hosted task(s) retried more than the fixed retry policy's "
                                       f"{allowed}: not run under the same policy as the API path", observed=over,
                               expected=f"≤ {allowed} retries per task"))
    elif axis == "comparison":
        f = by["comparison.api_equivalent"]
        add("comparison.api_equivalent", observed=f.outcome, expected=f"gap ≤ {f.measured['api_equivalent_gap_max']}")
    elif axis == "cost":
        m = by["cost.per_accepted_task"].measured
        cur, blanks = m["currency"], m["blank_items"]
        add("cost.per_accepted_task", observed=money(m["self_hosted_per_accepted_task"], cur),
            expected=f"≤ {money(m['api_per_accepted_task'], cur)} (the API's)")
        out.append(Finding(rule="renewal.cost.blanks", status="info",
                           message=f"blank cost items (left blank, never estimated): {', '.join(blanks)}" if blanks
                           else "every self-hosted cost item is known", observed=blanks))
    elif axis == "stability":
        add("stability.recoverable")
        for q, a in (result.drill.answers if result.drill is not None else ()):
            out.append(Finding(rule=f"renewal.drill.{q}", status=_ANSWER_STATUS[a.answer],  # type: ignore[arg-type]
                               message=f"{a.question} {a.answer}: {a.evidence}", observed=a.answer))
    elif axis == "operations":
        add("operations.effort")
    return out


def axis_record(ctx: ReviewAxis, result: AxisData | AxisResult) -> EvidenceRecord:
    """The evidence record of `ctx.axis` from its result, validated against the axis' typed model."""
    data = record_data(ctx.axis, result)
    live = live_run(ctx.params, ctx.store) if ctx.axis == "comparison" else None
    findings = _findings(ctx.axis, data["result"], ctx.params, live)
    if ctx.axis == "comparison":  # the live run of the same tasks on both paths, or why there is none
        findings += live_findings(ctx.params, ctx.store)
    return EvidenceRecord(axis=ctx.axis, title=TITLES[ctx.axis], status=axis_status(findings),
                          summary="; ".join(f.message for f in findings)[:400],
                          findings=findings, data=data)


def live_run(params: RenewalParams, store: RunStore) -> PathsResult | None:
    """The `k3 paths` record this review reads: its copy kept in the run (`live/paths.json`, written by
    13_api_comparison's live section), else the run `review.live_paths` names; None when the parameters name none."""
    source = params.review.live_paths
    if source is None:
        return None
    kept = store.path(REVIEW_COPY)
    return read_paths_record(kept if kept.exists() else source)


def axes_from_records(records: dict[str, EvidenceRecord]) -> tuple[TypedAxes, dict[str, str]]:
    """Each axis' typed result as its record holds it (None when absent or failed), and each axis' status. A
    record whose result does not fit this kit's model (another kit version) is refused with one line."""
    axes: TypedAxes = {}
    statuses: dict[str, str] = {}
    for axis in AXES:
        rec = records.get(axis)
        ok = rec is not None and not rec.error
        axes[axis] = read_record_data(axis, rec.data, f"evidence/{axis}.json") if ok and rec is not None else None
        statuses[axis] = rec.status if rec else "not-run"
    return axes, statuses


def decided_again(store: RunStore, stored: DecisionDoc | None = None) -> DecisionDoc:
    """The decision a review run's evidence gives, as `decision.json` would hold it: its resolved `params.json`
    and `evidence/*.json` through the same pure rules the batch ran (`k3 verify` and `k3 sign` compare it with the
    stored one). `stored` is unused: a review decides the same whatever day it is checked."""

    params = run_params(store)
    axes, statuses = axes_from_records(read_records(store))
    return cast(DecisionDoc, decide_from_axes(params, axes, statuses, live=live_run(params, store)).model_dump())


def decide_review(params: RenewalParams, store: RunStore, records: dict[str, EvidenceRecord]) -> RenewalDecision:
    """Decide from the records alone, with the rules fixed in the parameters, and write `decision.json`."""
    axes, statuses = axes_from_records(records)
    decision = decide_from_axes(params, axes, statuses, live=live_run(params, store))
    store.write_json("decision.json", decision.model_dump())
    return decision


def live_findings(params: RenewalParams, store: RunStore) -> list[Finding]:
    """The comparison axis' live findings: whether the API path meets the quality rule on the same tasks run live
    (the decision's `comparison.live`, or why it is open), the four fixed elements the run was under, and each
    pair's paired difference against the review's `api_equivalent_gap_max`."""
    review = params.review
    rules = review.rules
    result = live_run(params, store)
    refused = live_refusal(result, review.deployment.model_name, review.fixed.task_set.live_sha256)
    quality = live_quality(result, review.live_paths, rules, refused=refused)
    m = quality.measured
    out = [Finding(rule="renewal.comparison.live", status=quality.status, message=quality.sentence,
                   observed=m.get("api_acceptance_low"),
                   expected=None if "bar" not in m else f"≥ {m['bar']} ({m['bar_from']})")]
    if result is None or refused is not None:
        return out
    gap = rules.api_equivalent_gap_max
    out.append(Finding(rule="renewal.comparison.live_fixed", status="info",
                       message="live run under " + "; ".join(f"{f.name} sha256 {f.sha256[:12]}…" for f in result.fixed),
                       observed={f.name: f.sha256 for f in result.fixed}))
    status: FindingStatus
    for p in result.pairs:
        if p.difference is None or p.low is None or p.high is None:
            out.append(Finding(rule=f"renewal.comparison.live.{p.b}", status="not-observable",
                               message=f"no task ran on both {p.a} and {p.b}"))
            continue
        span = f"{p.a} − {p.b} acceptance {p.difference:+.1%} on {p.pairs} paired tasks (95 % {p.low:+.1%}–{p.high:+.1%})"
        if p.high <= gap:
            status, what = "warn", f"{p.b} equivalent to {p.a} on the same tasks (gap ≤ {gap:.1%})"
        elif p.low > gap:
            status, what = "pass", f"{p.b} not equivalent to {p.a} on the same tasks (gap > {gap:.1%})"
        else:
            status, what = "not-observable", f"inconclusive whether {p.b} is equivalent to {p.a} (gap {gap:.1%})"
        only = f"; accepted on {p.a} only: {', '.join(p.only_a_tasks)}" if p.only_a_tasks else ""
        out.append(Finding(rule=f"renewal.comparison.live.{p.b}", status=status, message=f"{what}: {span}{only}",
                           observed=p.difference, expected=f"{p.a} − {p.b} ≤ {gap}"))
    return out
