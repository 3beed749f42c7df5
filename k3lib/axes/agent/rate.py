"""The tool-call failure rate of the tool-turn series, judged with its Wilson 95 % interval against the contract's
tolerance (`contract.max_tool_call_failure_rate`); how many turns that tolerance needs; failures a single retry
recovered counted apart from those it did not.

K3's best-known agent failure is stochastic (vllm#53246: 1–10 % of tool turns come back with empty `tool_calls`),
so a pass is a statement about a rate, and a rate is only as good as its interval: with no failure at all, n turns
bound the rate at z²/(n + z²), which is why 1 % needs 381 turns. A run planned with fewer turns can only prove the
rate its size bounds: it is still judged against the contract's rate, so too few turns without a failure is not
observable, never a pass (a failure rate whose whole interval lies above the contract's still fails).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ...core.evidence import Finding
from ...core.numbers import figure
from ...core.stats import Z95, trials_to_bound, wilson_interval
from .shapes import FailureRateObserved, ModeRate, SettingsRow, TurnRow

RULE = "agent.tool_call_failure_rate"


def provable_rate(n: int) -> float:
    """The smallest failure rate `n` turns without a failure can bound: the Wilson 95 % upper bound of 0 of n."""
    return 1.0 if n <= 0 else Z95 * Z95 / (n + Z95 * Z95)


def turns_needed(max_rate: float) -> int:
    """The fewest tool turns whose zero-failure Wilson 95 % upper bound is at or below `max_rate`."""
    return trials_to_bound(max_rate)


def pct(x: float) -> str:
    return figure(round(x * 100, 3), " %")


def failure_rate_finding(turns: Sequence[TurnRow], settings: SettingsRow) -> Finding | None:
    """`agent.tool_call_failure_rate` over the series' turns; None when the run planned no series."""
    planned = int(settings.get("tool_turns") or 0)
    if not planned:
        return None
    max_rate = float(settings.get("max_tool_call_failure_rate") or 0.01)
    needed = int(settings.get("tool_turns_needed") or turns_needed(max_rate))
    # judged against the contract's rate whatever the size: a series too small to bound it cannot pass
    tolerance = max_rate
    done = [t for t in turns if t.get("failure") != "cancelled"]
    n, failed = len(done), [t for t in done if t.get("failure")]
    recovered = [t for t in failed if t.get("recovered")]
    observed: FailureRateObserved = {"turns": n, "planned": planned, "needed": needed, "failures": len(failed),
                                "recovered_by_retry": len(recovered), "not_recovered": len(failed) - len(recovered),
                                "max_rate": max_rate, "judged_at": round(tolerance, 6),
                                "by_mode": _by_mode(done), "causes": dict(_causes(failed).most_common())}
    if n == 0:
        return Finding(rule=RULE, status="not-observable", observed=observed,
                       message="tool-call failure rate: no tool turn of the series completed")
    lo, hi = wilson_interval(len(failed), n)  # type: ignore[misc]
    observed["rate"] = round(len(failed) / n, 6)
    observed["interval"] = [round(lo, 6), round(hi, 6)]
    head = (f"{len(failed)} of {n} tool turns failed ({pct(len(failed) / n)}, Wilson 95 % {pct(lo)}–{pct(hi)}); "
            f"{len(recovered)} recovered by one retry, {len(failed) - len(recovered)} not")
    bound = pct(tolerance)
    note = ("" if planned >= needed else
            f" ({pct(provable_rate(planned))} is the most {planned} turns can bound; the contract's {pct(max_rate)} "
            f"needs {needed}: axes.agent.tool_turns)")
    causes = _causes(failed)
    why = (" — " + "; ".join(f"{c} ×{k}" for c, k in causes.most_common(3))) if causes else ""
    expected = f"Wilson 95 % upper bound <= {bound}"
    if hi <= tolerance:
        return Finding(rule=RULE, status="pass", observed=observed, expected=expected,
                       message=f"tool-call failure rate: {head}; upper bound at or below {bound}{note}")
    if lo > tolerance:
        return Finding(rule=RULE, status="fail", observed=observed, expected=expected,
                       message=f"tool-call failure rate: {head}; above {bound} over the whole interval{note}{why}",
                       evidence={"category": "tool-calls", "blocks": "agents"})
    short = f"; {n} of {planned} planned turns ran" if n < planned else ""
    return Finding(rule=RULE, status="not-observable", observed=observed, expected=expected,
                   message=f"tool-call failure rate inconclusive: {head}; the interval straddles {bound}{note}"
                           f"{short}{why}")


def _by_mode(turns: Sequence[TurnRow]) -> dict[str, ModeRate]:
    out: dict[str, ModeRate] = {}
    for mode in sorted({str(t.get("mode")) for t in turns}):
        mine = [t for t in turns if str(t.get("mode")) == mode]
        k = sum(1 for t in mine if t.get("failure"))
        lo, hi = wilson_interval(k, len(mine)) or (0.0, 1.0)
        out[mode] = {"turns": len(mine), "failures": k, "rate": round(k / len(mine), 6),
                     "interval": [round(lo, 6), round(hi, 6)]}
    return out


def _causes(failed: Sequence[TurnRow]) -> Counter[str]:
    return Counter(str(t.get("failure")).split(" (", 1)[0][:120] for t in failed)
