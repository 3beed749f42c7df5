"""The session phase's findings, pure over the turns it recorded (`CapacityResult.sessions`), its levels (run.json's
`sessions`) and the sampled server series:

- `capacity.session_preemption`: the planned sessions held at once without a preemption, every turn completed;
- `capacity.session_prefix_reuse`: each turn's cached tokens against the history its previous turn left (the reuse
  designed into a session), at least `SESSION_REUSE_MIN` (config.py) of it, the usage's figures reconciled with
  the server's vllm:prefix_cache_hits over the same levels (fewer hits counted than reported: not shown);
- `capacity.session_tool_calls`: every turn that expected a tool call got one a client can execute, and every
  tool result answered an id of the server's previous reply;
- `capacity.session_stall`: no silence inside a turn (before its first token, reasoning included, or between two
  chunks) beyond the clients' idle timeout.

Too few turns to judge is not observable, never a pass (the planned level needs as many turns that resent a
history as it holds sessions).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ...core.evidence import Finding
from ...core.params import Params
from .config import SESSION_REUSE_MIN
from .finding import finding as _f
from .result import CapacityResult
from .run_shapes import LevelRow, SessionsRow, SessionSummary, SessionTurnRow
from .shapes import MetricRow, SeriesName

__all__ = ["align", "session_findings", "session_summary"]

#: expected tool turns below this: the validity of calls under load is not observable
MIN_TOOL_TURNS = 5
#: turns the evidence record carries (aligned); evidence/capacity/sessions.jsonl keeps every one
TURNS_KEPT = 400


def align(turns: Sequence[SessionTurnRow], rows: Sequence[MetricRow]) -> list[SessionTurnRow]:
    """Each turn with the server's state while it ran: the highest KV usage, running and waiting sampled, and the
    preemptions counted between the samples around it."""
    timed = sorted((r for r in rows if isinstance(r.get("t_wall"), (int, float))), key=lambda r: r["t_wall"])
    out: list[SessionTurnRow] = []
    for turn in turns:
        t = turn.copy()
        out.append(t)
        start, end = t.get("sent_wall"), t.get("done_wall")
        if start is None or end is None:
            continue
        inside = [r for r in timed if start <= r["t_wall"] <= end]
        before = [r for r in timed if r["t_wall"] < start][-1:]
        after = [r for r in timed if r["t_wall"] > end][:1]
        t["kv_usage_max"] = _peak(before + inside, "kv_cache_usage_perc")
        t["running_max"] = _peak(before + inside, "num_requests_running")
        t["waiting_max"] = _peak(before + inside, "num_requests_waiting")
        counts = [v for r in before + inside + after if isinstance(v := r.get("num_preemptions_total"), (int, float))]
        t["preemptions_around"] = (counts[-1] - counts[0]) if len(counts) >= 2 else None
    return out


def _peak(rows: Sequence[MetricRow], column: SeriesName) -> float | None:
    vals = [v for r in rows if isinstance(v := r.get(column), (int, float))]
    return max(vals) if vals else None


def _planned_level(result: CapacityResult) -> LevelRow | None:
    run: SessionsRow = result.run.get("sessions") or {}
    planned = run.get("planned_sessions")
    return next((lv for lv in run.get("levels") or [] if lv.get("sessions") == planned), None)


def preemption_finding(result: CapacityResult, params: Params) -> Finding:
    run: SessionsRow = result.run.get("sessions") or {}
    planned = int(run.get("planned_sessions") or 0)
    level = _planned_level(result)
    if level is None or level.get("status") == "skipped":
        return _f("session_preemption", "not-observable", f"the level of {planned} planned sessions did not run"
                  + (f" ({level.get('note')})" if level else ""))
    turns = [t for t in result.sessions if t.get("level") == planned]
    ok = [t for t in turns if t.get("ok")]
    carried = [t for t in ok if (t.get("turn") or 0) >= 1]  # turns that resent a history
    pre = level.get("preemptions")
    kv = max((k for t in align(ok, result.metrics) if (k := t.get("kv_usage_max")) is not None), default=None)
    observed = {"sessions": planned, "turns": len(turns), "ok": len(ok), "preemptions": pre, "kv_usage_max": kv,
                "sessions_started": level.get("sessions_started")}
    if len(carried) < planned:
        return _f("session_preemption", "not-observable", f"{len(ok)} turns completed at {planned} sessions, "
                  f"{len(carried)} of them with a history: too few to say the sessions held (at least {planned} "
                  "turns after a session's first)", observed=observed)
    if pre is None:
        return _f("session_preemption", "not-observable", "no preemption counter in /metrics over the level "
                  "(vllm:num_preemptions_total): whether sessions were preempted cannot be read", observed=observed)
    failed = len(turns) - len(ok)
    allowed = math.floor(params.contract.max_error_share * len(turns))
    kv_text = "n/a" if kv is None else f"{kv:.0%}"
    if pre > 0 or failed > allowed:
        why = [f"{pre:g} preemption(s)"] if pre > 0 else []
        why += [f"{failed} turn(s) did not complete"] if failed > allowed else []
        return _f("session_preemption", "fail", f"at the planned {planned} sessions, {' and '.join(why)} over "
                  f"{len(turns)} turns (KV usage up to {kv_text}): long histories do not fit the KV pool as the "
                  "contract plans them (the session phase)", observed=observed, expected="0 preemptions")
    return _f("session_preemption", "pass", f"{planned} sessions held at once without preemption: {len(ok)} turns "
              f"completed, KV usage up to {kv_text}", observed=observed, expected="0 preemptions")


def _shared(result: CapacityResult) -> tuple[int, str]:
    """The shared prefix (system prompt and tools) in tokens, and where the figure comes from: the server's
    /tokenize, else the median cached tokens of the first turns after the run's first session."""
    run: SessionsRow = result.run.get("sessions") or {}
    if isinstance(stated := run.get("shared_prefix_tokens"), int):
        return stated, "/tokenize"
    firsts = sorted(c for t in result.sessions
                    if t.get("ok") and t.get("turn") == 0 and (c := t.get("cached_tokens")) is not None)[1:]
    return (int(statistics.median(firsts)), "first turns' cached tokens") if firsts else (0, "unknown")


def _counters(result: CapacityResult) -> tuple[dict[str, float | str | None], str | None]:
    """The turns' usage `cached_tokens` against the server's vllm:prefix_cache_hits over the same levels, and why
    they do not reconcile (None: they do, or the server has no counter). The counter counts every request the server
    served, so it holds at least the sessions' own hits (real vLLM 0.32.0: exactly them, level by level)."""
    sessions: SessionsRow = result.run.get("sessions") or {}
    levels = [lv for lv in sessions.get("levels") or [] if "usage_cached_tokens" in lv]
    counted = [lv for lv in levels if isinstance(lv.get("prefix_cache_hits"), (int, float))]
    if not counted:
        return {"counter_hits": None, "counter_basis": "no vllm:prefix_cache_hits over the levels"}, None
    usage = sum(int(lv["usage_cached_tokens"]) for lv in counted)
    hits = sum(float(lv.get("prefix_cache_hits") or 0.0) for lv in counted)  # counted: each states its hits
    observed: dict[str, float | str | None] = {"counter_hits": hits, "counter_usage_cached_tokens": usage,
                "counter_basis": f"vllm:prefix_cache_hits over {len(counted)} level(s)"}
    if hits < usage:
        return observed, (f"the turns' usage reports {usage} cached tokens but the server's vllm:prefix_cache_hits "
                          f"counted {hits:g} over the same levels: the usage is not reconciled with the counters")
    return observed, None


def reuse_finding(result: CapacityResult, params: Params) -> Finding:
    """Reuse of each session's own history (what the previous turn left beyond the shared prefix): the cached
    tokens above the shared prefix against the designed ones; the shared prefix's reuse is reported beside it."""
    need = SESSION_REUSE_MIN
    shared, basis = _shared(result)
    later = [t for t in result.sessions if t.get("ok") and (t.get("designed_cached_tokens") or 0) > shared]
    reported = [t for t in later if t.get("cached_tokens") is not None]
    grew = [t for t in later if (t.get("growth_tokens") or 0) > 0]
    observed: dict[str, float | str | None] = {
        "later_turns": len(later), "prompt_grew": len(grew), "shared_prefix_tokens": shared,
        "shared_prefix_basis": basis, "min": need,
        "turns_with_shared_prefix_cached": sum(1 for t in reported if (t.get("cached_tokens") or 0) >= shared > 0)}
    counters, unreconciled = _counters(result)
    observed.update(counters)
    if unreconciled:
        return _f("session_prefix_reuse", "not-observable", f"prefix reuse across turns not shown: {unreconciled}",
                  observed=observed)
    sessions: SessionsRow = result.run.get("sessions") or {}
    if not reported or len(reported) < max(2, sessions.get("planned_sessions") or 2):
        why = "the server reports no cached_tokens (prompt_tokens_details)" if later and not reported else \
            f"{len(reported)} later turn(s) with a history of their own to reuse"
        return _f("session_prefix_reuse", "not-observable", f"prefix reuse across turns not measured: {why}",
                  observed=observed)
    # reported: cached tokens stated, designed ones beyond the shared prefix
    own = [(max(0, min(t.get("cached_tokens") or 0, t.get("designed_cached_tokens") or 0) - shared),
            (t.get("designed_cached_tokens") or 0) - shared) for t in reported]
    cached, designed = sum(c for c, _ in own), sum(d for _, d in own)
    ratio = cached / designed
    observed.update(history_cached_tokens=cached, history_designed_tokens=designed, ratio=round(ratio, 4),
                    turn_ratio_median=round(statistics.median(c / d for c, d in own), 4),
                    turns_without_history_reuse=sum(1 for c, _ in own if c == 0))
    text = (f"later turns found {ratio:.0%} of their own history in the prefix cache ({cached} of {designed} "
            f"tokens beyond the {shared}-token shared prefix, over {len(reported)} turns; the prompt grew on "
            f"{len(grew)}/{len(later)})")
    if ratio < need:
        return _f("session_prefix_reuse", "fail", f"{text}, below the {need:.0%} designed reuse: the cache is "
                  "evicted between turns (the session phase), every turn pays its whole history's prefill",
                  observed=observed, expected=f">= {need:.0%}")
    return _f("session_prefix_reuse", "pass", text, observed=observed, expected=f">= {need:.0%}")


def tool_finding(result: CapacityResult, params: Params) -> Finding:
    expected = [t for t in result.sessions if t.get("ok") and t.get("expect_tool")]
    bad = [t for t in expected if t.get("tool_ok") is False]
    answers = [a for t in result.sessions for a in t.get("answers") or [] if a.get("id") is not None]
    # a sent result whose id the previous reply did not hold (a recorded result with no live call is not sent: the
    # missing call already counts against the turn that expected it)
    stray = [a for t in result.sessions for a in t.get("answers") or []
             if a.get("id") is not None and a["id"] not in (t.get("previous_call_ids") or [])]
    problems = sorted({p for t in bad for c in t.get("calls") or [] if (p := c.get("problem"))})[:5]
    rate = params.contract.max_tool_call_failure_rate
    allowed = math.floor(rate * len(expected))
    observed = {"expected": len(expected), "failed": len(bad), "allowed": allowed, "answers": len(answers),
                "answers_stray": len(stray), "problems": problems,
                "results_unbound": sum(1 for t in result.sessions for a in t.get("answers") or [] if a.get("unbound")),
                "missing": sum(1 for t in bad if not t.get("calls"))}
    if len(expected) < MIN_TOOL_TURNS:
        return _f("session_tool_calls", "not-observable", f"{len(expected)} turn(s) expected a tool call (at least "
                  f"{MIN_TOOL_TURNS}): tool-call validity under load not observed", observed=observed)
    if len(bad) > allowed or stray:
        why = ([f"{observed['missing']} made no call"] if observed["missing"] else []) + problems
        what = [f"{len(bad)} of {len(expected)} tool turns under load got no executable call"
                + (f" ({'; '.join(why)})" if why else "")] if len(bad) > allowed else []
        what += [f"{len(stray)} tool result(s) answered no id of the previous reply"] if stray else []
        return _f("session_tool_calls", "fail", f"{' and '.join(what)} (the session phase; the contract allows "
                  f"{rate:.1%})", observed=observed, expected=f"<= {allowed} failed")
    return _f("session_tool_calls", "pass", f"{len(expected) - len(bad)} of {len(expected)} tool turns under load "
              f"got an executable call; all {len(answers)} tool results answered an id of the server's previous "
              "reply", observed=observed, expected=f"<= {allowed} failed")


def stall_finding(result: CapacityResult, params: Params) -> Finding:
    limit = params.contract.client_idle_timeout_s
    timed = [t for t in result.sessions if t.get("max_silence_ms") is not None]
    timeouts = [t for t in result.sessions if not t.get("ok") and "within" in str(t.get("error") or "")]
    if not timed:
        return _f("session_stall", "not-observable", "no streamed session turn finished: stalls not observable")
    worst = max(timed, key=lambda t: t.get("max_silence_ms") or 0.0)  # timed: each states its silence
    silence = worst.get("max_silence_ms") or 0.0
    observed = {"longest_silence_ms": round(silence, 3), "where": f"{worst['session']} turn "
                f"{worst['turn']}", "turns": len(timed), "timeouts": len(timeouts), "client_idle_timeout_s": limit}
    text = (f"longest silence inside a session turn: {silence:.0f} ms ({observed['where']}, "
            f"{len(timed)} turns, first token and reasoning included)")
    if limit is None:
        return _f("session_stall", "info", f"{text}; no contract.client_idle_timeout_s to hold it to",
                  observed=observed)
    if silence > limit * 1000 or timeouts:
        return _f("session_stall", "fail", f"{text}: a client with a {limit:g} s idle timeout drops the turn (the "
                  "session phase)", observed=observed, expected=f"<= {limit:g} s")
    return _f("session_stall", "pass", f"{text}, within the clients' {limit:g} s idle timeout", observed=observed,
              expected=f"<= {limit:g} s")


def session_findings(result: CapacityResult, params: Params) -> list[Finding]:
    return [preemption_finding(result, params), reuse_finding(result, params), tool_finding(result, params),
            stall_finding(result, params)]


def session_summary(result: CapacityResult) -> SessionSummary | None:
    """What the record keeps of the phase: its levels, and its turns aligned with the server's series."""
    run = result.run.get("sessions")
    if not run:
        return None
    turns = align(result.sessions, result.metrics)
    return {**run, "turn_count": len(turns), "turns": turns[:TURNS_KEPT]}
