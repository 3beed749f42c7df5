"""Whether a step's numbers can be trusted: the client's self-calibration gate (its own timing error at the step's
concurrency) and the cross-check of the client's counts and quantiles against the server's over the step window.
Pure: calibration reports and request records in, plain dicts for the run folder out."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ...io.calibration import CalibrationReport, LoopLagReport, assess, gate_phase
from ...io.crosscheck import CrossCheck, CrossCheckItemDict
from .run_shapes import CalibrationSummary, KnownTiming
from .shapes import CrossCheckData, RequestRow, Trust
from .config import (CHUNKS, DEFAULT_ITL_MS, DEFAULT_TTFT_MS, ITL_RANGE_MS, MIN_GAPS, ROUNDS_BUDGET_S,
                     TTFT_RANGE_MS)

# The cross-check items that are counts: a disagreement there means another client, or one side counting wrong.
COUNT_ITEMS = ("requests finished", "requests cut", "requests sent", "prompt tokens", "generation tokens")


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return round(min(max(value, bounds[0]), bounds[1]), 3)


def known_timing(records: Sequence[RequestRow]) -> KnownTiming:
    """The schedule the known-timing server follows: the median TTFT and inter-chunk gap the client measured on
    the target so far (the long-context phase), clamped; the defaults when nothing was measured."""
    ok = [r for r in records if r.get("ok")]
    ttfts = [t for r in ok if (t := r.get("ttft_ms")) is not None]
    gaps = [g for r in ok for g in (r.get("itl_ms") or ()) if g is not None]
    ttft = _clamp(statistics.median(ttfts), TTFT_RANGE_MS) if ttfts else DEFAULT_TTFT_MS
    itl = _clamp(statistics.median(gaps), ITL_RANGE_MS) if gaps else DEFAULT_ITL_MS
    basis = (f"median of {len(ttfts)} TTFT(s) and {len(gaps)} gap(s) measured on the target before the steps, "
             f"clamped to {TTFT_RANGE_MS} and {ITL_RANGE_MS} ms") if ttfts or gaps else \
        f"defaults ({DEFAULT_TTFT_MS:g} ms, {DEFAULT_ITL_MS:g} ms): nothing measured on the target before the steps"
    return {"known_ttft_ms": ttft, "known_itl_ms": itl, "chunks": CHUNKS, "basis": basis}


def calibration_rounds(concurrency: int, timing: KnownTiming) -> int:
    """How many rounds of `concurrency` streams to run: ≥ MIN_GAPS gaps, within ROUNDS_BUDGET_S of schedule."""
    per_round_s = (timing["known_ttft_ms"] + (timing["chunks"] - 1) * timing["known_itl_ms"]) / 1e3
    wanted = -(-MIN_GAPS // max(1, concurrency * (timing["chunks"] - 1)))
    return max(1, min(wanted, int(ROUNDS_BUDGET_S // per_round_s)))


def calibration_concurrencies(planned: int, steps: Sequence[int]) -> tuple[int, ...]:
    """The planned concurrency and the highest step: the load the verdict rests on, and the most the client sends."""
    return tuple(sorted({planned, max(steps, default=planned)}))


def failed_report(concurrency: int, timing: KnownTiming, max_error_ms: float, reason: str) -> CalibrationReport:
    """A report for a calibration that could not complete (the local server did not start, the bound ran out):
    invalid, so the steps it covers are not trusted either."""
    lag = LoopLagReport(duration_s=0.0, interval_ms=0.0, samples=0, p50_ms=None, p99_ms=None, max_ms=None)
    report = assess([], url="", concurrency=concurrency, known_ttft_ms=timing["known_ttft_ms"],
                    known_itl_ms=timing["known_itl_ms"], chunks=timing["chunks"], tokens_per_chunk=2, loop_lag=lag,
                    max_error_ms=max_error_ms)
    return dataclasses.replace(report, valid=False, reason=f"calibration did not complete: {reason}")


def governing_report(reports: Sequence[CalibrationReport], concurrency: int) -> CalibrationReport | None:
    """The calibration that speaks for a step: the first failed one at or below its concurrency (everything at or
    above a failure is not trusted), else the passed one nearest above it (a client that kept up with more streams
    keeps up with fewer), else the highest passed one. None when nothing was calibrated."""
    ordered = sorted(reports, key=lambda r: r.concurrency)
    failed = [r for r in ordered if not r.valid and r.concurrency <= concurrency]
    if failed:
        return failed[0]
    above = [r for r in ordered if r.valid and r.concurrency >= concurrency]
    if above:
        return above[0]
    passed = [r for r in ordered if r.valid]
    return passed[-1] if passed else None


@dataclasses.dataclass(frozen=True)
class StepValidity:
    """What `gate_phase` needs of a phase summary, for a step whose load window ended without one (it was stopped
    because the engine went away)."""

    valid: bool = True
    invalid_reason: str | None = None
    calibration: object = None  # a CalibrationReport's dump, as gate_phase sets it (never read here)


def gate_step(summary: Any, reports: Sequence[CalibrationReport], concurrency: int) -> Trust:
    """The step fields that say whether its client latency figures are trusted, through `gate_phase`."""
    base = summary if summary is not None else StepValidity()
    report = governing_report(reports, concurrency)
    gated = gate_phase(base, report) if report is not None else base
    return {"latency_valid": bool(gated.valid), "invalid_reason": gated.invalid_reason,
            "calibrated_at": report.concurrency if report is not None else None,
            "loop_lag_p99_ms": getattr(summary, "loop_lag_ms_p99", None)}


@dataclasses.dataclass(frozen=True)
class RecordView:
    """A request record as written to the run folder, with the attributes `cross_check` reads."""

    ok: Any = None
    sent_ns: Any = None
    prompt_tokens: Any = None
    completion_tokens: Any = None
    ttft_ms: Any = None
    e2e_ms: Any = None
    cancelled: Any = None
    http_status: Any = None
    error_kind: Any = None


def record_view(record: Mapping[str, Any]) -> RecordView:
    """A request record as written to the run folder, with the attributes `cross_check` reads."""
    return RecordView(**{f.name: record.get(f.name) for f in dataclasses.fields(RecordView)})


def cross_check_data(check: CrossCheck | None, error: str | None = None) -> CrossCheckData:
    """A cross-check as kept in a step: every item, the disagreeing ones, and whether the counts agree."""
    if check is None:
        return {"agrees": None, "counts_agree": None, "disagreements": [], "items": [],
                "error": error or "no /metrics snapshot around the window"}
    counts = [i.agrees for i in check.items if i.quantity in COUNT_ITEMS and i.agrees is not None]
    compared = [i.agrees for i in check.items if i.agrees is not None]
    return {"agrees": all(compared) if compared else None, "counts_agree": all(counts) if counts else None,
            "disagreements": [i.quantity for i in check.disagreements],
            "items": [cast(CrossCheckItemDict, i.model_dump()) for i in check.items], "error": None,
            "incomplete": dict(check.incomplete), "error_statuses": dict(check.error_statuses),
            "by_endpoint": dict(check.by_endpoint)}


def cross_check_label(data: Mapping[str, Any] | None) -> str:
    """One cell of the steps table."""
    if not data:
        return "n/a"
    if data.get("agrees") is None:
        return "n/a" + (f" ({data['error']})" if data.get("error") else "")
    if data.get("agrees"):
        return "agrees"
    by = {i["quantity"]: i for i in data.get("items") or []}
    parts = []
    for q in data.get("disagreements") or []:
        i = by.get(q) or {}
        parts.append(f"{q} (client {_num(i.get('client'))}, server {_num(i.get('server'))})")
    kind = "counts disagree" if data.get("counts_agree") is False else "latency differs"
    return f"{kind}: " + "; ".join(parts)


def _num(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"


def calibration_summary(reports: Sequence[CalibrationReport]) -> list[CalibrationSummary]:
    """The few numbers of each report a reader looks at first (the full reports are kept beside them)."""
    return [{"concurrency": r.concurrency, "valid": r.valid, "reason": r.reason, "ok": r.ok, "requests": r.requests,
             "ttft_error_ms_p99": r.ttft_error_ms_p99, "itl_error_ms_p99": r.itl_error_ms_p99,
             "delivery_ms_p99": r.delivery_ms_p99, "loop_lag_ms_p99": r.loop_lag.p99_ms,
             "max_error_ms": r.max_error_ms} for r in reports]
