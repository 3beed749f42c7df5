"""What the agents' clients and the serving settings meet, read off the agent run: the longest silence inside a
streamed reply against the clients' idle timeout, a gateway timeout below the end-to-end objective, and speculative
decoding's acceptance (DSpark for Kimi K3) from the spec-decode counters moved by the run's own requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...core.evidence import Finding
from ...core.numbers import figure
from ..shapes import Reply
from .checks import longest_silence_s
from .shapes import StrictStatement, ToolStrict

if TYPE_CHECKING:
    from .result import AgentResult

#: The spec-decode counters (canonical names, k3lib.io.metrics.names) the agent run brackets with two scrapes.
SPEC_DECODE = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
               "spec_decode_num_accepted_tokens_total")


def reply_silence_s(reply: Reply | None) -> float | None:
    """A streamed reply's longest silence from its record (k3lib.io.client.ChatRecord.to_dict)."""
    if not reply or not reply.get("stream") or not reply.get("ok"):
        return None
    return longest_silence_s([reply.get("sent_ns"), reply.get("first_byte_ns"), *(reply.get("output_chunk_ns") or ()),
                              reply.get("done_ns")])


def _replies(result: AgentResult) -> Iterable[tuple[str, Reply | None]]:
    for s in result.steps:
        yield f"{s['case']} turn {s['turn']} round {s['round']}", s.get("reply")
    for t in result.turns:
        yield f"tool turn {t['turn']} ({t['case']})", t.get("reply")
    for r in result.contract:
        yield f"contract {r['id']} ({r.get('mode')})", r.get("reply")


def longest_silence(result: AgentResult) -> float | None:
    found = [s for _, r in _replies(result) if (s := reply_silence_s(r)) is not None]
    return round(max(found), 4) if found else None


def silence_finding(result: AgentResult) -> Finding | None:
    """`agent.stream_silence`: no byte for longer than the clients wait kills the reply (vllm#50604: the whole call
    in one delta after minutes of silence; hermes-agent's 180 s stale timeout)."""
    timed = [(s, where) for where, r in _replies(result) if (s := reply_silence_s(r)) is not None]
    if not timed:
        return None
    worst, where = max(timed)
    limit = result.settings.get("client_idle_timeout_s")
    observed = {"longest_silence_s": round(worst, 4), "where": where, "streamed_replies": len(timed),
                "client_idle_timeout_s": limit}
    text = f"longest silence inside a streamed reply: {figure(worst, ' s')} ({where}, over {len(timed)} streamed replies)"
    if limit is None:
        return Finding(rule="agent.stream_silence", status="info", observed=observed,
                       message=f"{text}; no contract.client_idle_timeout_s to hold it to")
    if worst <= float(limit):
        return Finding(rule="agent.stream_silence", status="pass", observed=observed,
                       expected=f"<= {figure(limit, ' s')}",
                       message=f"{text}, within the clients' {figure(limit, ' s')} idle timeout")
    return Finding(rule="agent.stream_silence", status="fail", observed=observed, expected=f"<= {figure(limit, ' s')}",
                   message=f"{text}: a client with a {figure(limit, ' s')} idle timeout drops the reply before it "
                           "ends (tool-call arguments that do not stream, vllm#50604)",
                   evidence={"category": "tool-calls", "blocks": "agents"})


def timeouts_finding(result: AgentResult) -> Finding | None:
    """`agent.client_timeouts`: a gateway that gives up before the end-to-end objective aborts requests the contract
    promises to finish (K3's long tail read as 502s); also against the longest request this run measured."""
    gateway = result.settings.get("gateway_timeout_s")
    if gateway is None:
        return None
    objective_ms = result.settings.get("e2e_p95_ms")
    e2e = [float(ms) for _, r in _replies(result) if r and r.get("ok") and (ms := r.get("e2e_ms")) is not None]
    longest_ms = max(e2e) if e2e else None
    observed = {"gateway_timeout_s": gateway, "e2e_p95_objective_ms": objective_ms, "longest_e2e_ms": longest_ms}
    below = []
    if objective_ms is not None and gateway * 1000 < objective_ms:
        below.append(f"the end-to-end objective ({figure(objective_ms / 1000, ' s')} at p95)")
    if longest_ms is not None and gateway * 1000 < longest_ms:
        below.append(f"the longest agent request measured here ({figure(longest_ms / 1000, ' s')})")
    if below:
        return Finding(rule="agent.client_timeouts", status="warn", observed=observed,
                       message=f"the gateway timeout ({figure(gateway, ' s')}) is below " + " and ".join(below) +
                               ": it aborts requests the deployment would finish, and they read as model failures")
    return Finding(rule="agent.client_timeouts", status="pass", observed=observed,
                   message=f"the gateway timeout ({figure(gateway, ' s')}) is above the end-to-end objective and "
                           "every agent request measured")


def spec_decode_finding(result: AgentResult) -> Finding | None:
    """`agent.spec_decode`: when speculative decoding runs (its counters move with the run's requests), the mean
    acceptance length (1 + accepted tokens per draft) against the recipe's floor (DSpark: ~2.6 on high-entropy and
    ~4.7 on low-entropy tasks in vLLM's K3 blog)."""
    sd = result.spec_decode
    floor = result.settings.get("spec_decode_min_acceptance_length")
    if not sd or sd.get("drafts") is None:
        if floor is None or not (sd or {}).get("error"):
            return None  # no spec-decode counters exported: speculative decoding does not run
        # the recipe rests a floor on counters that could not be read: not a pass, and said why
        why = sd["error"]
        return Finding(rule="agent.spec_decode", status="not-observable", observed=sd or None,
                       expected=f">= {figure(floor)}",
                       message=f"speculative decoding not observable: {why} — the recipe's acceptance-length floor "
                               f"({figure(floor)}, recipe.spec_decode_min_acceptance_length) rests on them")
    drafts, proposed, accepted = sd.get("drafts") or 0, sd.get("draft_tokens") or 0, sd.get("accepted") or 0
    if drafts <= 0:
        return Finding(rule="agent.spec_decode", status="info", observed=sd,
                       message="spec-decode counters are exported but no draft ran during the agent run")
    length = 1 + accepted / drafts
    rate = accepted / proposed if proposed else None
    observed = {**sd, "acceptance_length": round(length, 3), "acceptance_rate": None if rate is None else round(rate, 4)}
    text = (f"speculative decoding: {figure(length)} tokens per step on average over {figure(drafts)} drafts"
            + ("" if rate is None else f", {figure(rate * 100, ' %')} of drafted tokens accepted"))
    if floor is None:
        return Finding(rule="agent.spec_decode", status="info", observed=observed,
                       message=f"{text}; the recipe sets no floor (recipe.spec_decode_min_acceptance_length)")
    if length >= float(floor):
        return Finding(rule="agent.spec_decode", status="pass", observed=observed, expected=f">= {figure(floor)}",
                       message=f"{text}, at or above the recipe's {figure(floor)}")
    return Finding(rule="agent.spec_decode", status="warn", observed=observed, expected=f">= {figure(floor)}",
                   message=f"{text}, below the recipe's {figure(floor)}: the drafts cost more than they return — check "
                           "the speculator matches the model and its version (DSpark for Kimi K3)")


_STRICT = (("log: non-default args", re.compile(r"""['"]tool_strict_level['"]\s*:\s*['"]?(\w+)""")),
           ("log: --tool-strict-level", re.compile(r"--tool-strict-level[ =](\w+)")),
           ("log: VLLM_ENFORCE_STRICT_TOOL_CALLING", re.compile(r"VLLM_ENFORCE_STRICT_TOOL_CALLING\s*[=:]\s*'?(\w+)")))


def tool_strict_settings(log_text: str | None) -> ToolStrict:
    """`--tool-strict-level` (vLLM 0.32: auto | function | parameter) and `VLLM_ENFORCE_STRICT_TOOL_CALLING` as the
    server log states them, each with where it was read; empty statements when the log says neither."""
    found: list[StrictStatement] = [{"source": source, "value": m.group(1)} for source, pattern in _STRICT
             if (m := pattern.search(log_text or ""))]
    return {"log_read": log_text is not None, "statements": found}


def strict_level_finding(result: AgentResult) -> Finding | None:
    """`agent.tool_strict_level` (info): recorded beside the schema suite, whose result it explains."""
    st = result.serving.get("tool_strict") if result.serving else None
    if not st:
        return None
    said = "; ".join(f"{s['value']} ({s['source']})" for s in st.get("statements", ()))
    if said:
        text = f"tool strict level: {said}"
    elif st.get("log_read"):
        text = "the server log states no --tool-strict-level: vLLM's default (auto) applies"
    else:
        text = "no server log (axes.environment.server_log): the tool strict level is not recorded"
    return Finding(rule="agent.tool_strict_level", status="info", observed=st,
                   message=text + " — `function` constrains the call envelope, `parameter` also pins argument "
                                  "schemas (the JSON Schema suite's result reads with it)")


def serving_findings(result: AgentResult) -> list[Finding]:
    return [f for f in (silence_finding(result), timeouts_finding(result), spec_decode_finding(result),
                        strict_level_finding(result)) if f]
