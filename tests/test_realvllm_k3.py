"""Kimi K3's agent path on real vLLM 0.32.0 (CPU): the tiny K3-format model (`make realvllm-k3`) served with the
kimi_k3 tool-call and reasoning parsers, and the misconfigurations the seeds name, each caught with its cause.

Opt-in, required in CI (K3_REQUIRE_REALVLLM=1). Server starts are the cost (1-2 min each on two busy cores): one
well-configured server for the session (shared with the K3 conformance suite), one per misconfiguration. The
whole acceptance batch runs once, on the good server; the misconfigurations are judged on the agent axis alone
(with its own decision), which is where each of them shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import k3lib.axes.agent as agent
from k3lib.verdict.decision import decide
from k3lib.opening.axis import open_axis
from realvllm import K3_PROFILE, RealVllm, require_k3, serve, validate_against

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]

BATCH_TIMEOUT_S = 1800
AGENT_TIMEOUT_S = 900
TOOL_CHECKS = tuple(agent.CHECKS)


@pytest.fixture(scope="module")
def validated(real_vllm_k3: RealVllm, tmp_path_factory: pytest.TempPathFactory):
    """`k3 validate -p parameters/vllm-cpu-k3.example.yaml` against the good server. The agent axis is this module's
    point, the profile's as it stands; the capacity axis (real vLLM's capacity is tests/test_realvllm.py's and
    tests/test_realvllm_capacity.py's) runs each step, the soak and one session level on fewer requests, sampled
    often enough to judge each step: its 530 requests were 54 s of the batch's 81."""
    return validate_against(real_vllm_k3, K3_PROFILE, tmp_path_factory.mktemp("realvllm-k3-run"),
                            "axes.capacity.step_max_requests=30", "axes.capacity.soak_max_requests=40",
                            "axes.capacity.sample_interval_s=0.25", "contract.planned_sessions=1")


def agent_alone(server: RealVllm, out: Path, *sets: str) -> tuple[Any, Any, Any]:
    """The agent axis alone against `server`, once at concurrency 1 (both stream modes), a two-turn series and no
    contract check (the misconfigurations show in the scenario): (result, record, its decision)."""
    ctx = open_axis("agent", str(K3_PROFILE), [f"target.base_url={server.base_url}", "axes.agent.repetitions=1",
                                               "axes.agent.concurrency_levels=[1]", "axes.agent.tool_turns=2",
                                               "axes.agent.contract_check=false", *sets], str(out))
    result = agent.run_agent(ctx)
    record = ctx.record(agent.agent_record(result, ctx))
    return result, record, decide({"agent": record}, ["agent"])


def agent_alone_misconfigured(tmp_path_factory: pytest.TempPathFactory, command: str) -> tuple[Any, Any, Any]:
    """The agent axis alone against the K3 model served by `scripts/realvllm.sh COMMAND` (a misconfiguration)."""
    require_k3()
    logs = tmp_path_factory.mktemp(f"realvllm-{command}")
    with serve(logs / "server.log", command=command) as server:
        return agent_alone(server, logs / "run")


def agent_reasons(decision: Any) -> list[str]:
    return [r for r in decision.reasons if ": agent." in r.split(" — ")[0]]


# The agent axis at Kimi K3's production sampling (temperature 1.0, top_p 0.95: the K3 CPU profile's) on the retrained
# fixture (docs/real-engines.md, measured 7 Dec 2026): every scenario check whole and streamed, the reasoning in vLLM's
# field after any history, sampled replies that vary; the final answer missed the tool result once in 64 over two runs
# (sampling noise of a 0.87M-parameter model). Forced calls pass too, now that every trained call follows its (empty)
# response channel, the only way vLLM's kimi_k3 structural tag lets a forced call out (docs/real-engines.md): required
# and named every time; the schema suite 12/12 in the batch, and by hand 149 of 152 sampled suite calls valid (98 %), so
# a batch's twelve all hold about 4 runs in 5. A miss is the model's: a parsed call with a key the grammar leaves free
# (a property without a `type`) taken from another schema, never a call missing.
SCENARIO_CHECKS = ("requests_ok", "tool_calls_present", "function_name", "arguments_valid", "executable",
                   "tool_error_fallback", "structure_stable", "history_kept", "no_reasoning_leak", "no_markup_leak",
                   "reasoning_present")
FORCED_CALLS = ("agent.contract.tool_choice_required", "agent.contract.tool_choice_named")
SUITE = "agent.contract.schema_suite"


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_the_k3_agent_path_on_real_vllm_at_production_sampling(validated):
    """Both stream modes, thinking on, temperature 1.0: every scenario check passes at both levels, every reply
    (streamed after a history carrying reasoning too) has its reasoning in vLLM's field and no markup in content,
    and repeated replies vary as sampled ones do."""
    code, _, records, decision = validated
    rec = records["agent"]
    assert not rec.error, rec.error
    for check in SCENARIO_CHECKS:
        f = rec.by_rule(f"agent.{check}")
        assert f.status == "pass", (check, f.message)
    result = agent.load_agent_result(_store(validated))
    assert {s["request"].get("temperature") for s in result.steps} == {1.0}, "sampled at K3's temperature 1.0"
    modes = {s["reply"]["stream"] for s in result.steps}
    assert modes == {True, False}, "both stream modes by default"
    failed = [(s["reply"]["stream"], o) for s in result.steps for o in s["checks"]
              if not o["passed"] and o["check"] != "final_answer"]
    assert not failed, failed
    answers = [o for s in result.steps for o in s["checks"] if o["check"] == "final_answer"]
    assert sum(not o["passed"] for o in answers) <= 2 < len(answers), answers  # 1 miss in 64 measured
    assert rec.by_rule("agent.reasoning_field").observed.get("reasoning"), "no reply carried vLLM's reasoning field"
    rate = rec.by_rule("agent.tool_call_failure_rate")
    # 20 CPU-sized turns cannot bound the contract's 1 % (381 can): judged at the contract's rate, never a pass
    assert rate.status == "not-observable" and rate.observed["turns"] == 20, rate.message
    served = rec.by_rule("agent.served_as_asked")  # sampled replies vary: no byte-identical repeats read as a cache
    assert served.status == "pass", served.message


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_the_vendor_contract_check_on_real_vllm(validated):
    """Moonshot's pre-flight on stock vLLM 0.32.0 with the kimi_k3 parsers, at production sampling: the streamed reply
    after a history is clean, and the forced calls (required, named, the schema suite's strict tools) come back
    through vLLM's forced-call grammar as parsed calls, valid but for a rare sampled argument of the suite."""
    rec = validated[2]["agent"]
    expected = {
        "agent.contract.tool_choice_none": "pass", "agent.contract.response_format_strict": "pass",
        "agent.contract.history_reasoning": "pass", "agent.compat.tool_choice_validation": "pass",
        "agent.compat.response_format_validation": "pass", "agent.compat.stream_usage": "pass",
        "agent.contract.history_reply": "pass", **{rule: "pass" for rule in FORCED_CALLS},
        # client compatibility (does not block): sampling not pinned, `reasoning`
        "agent.compat.sampling_pinned": "info", "agent.compat.reasoning_field": "info"}
    got = {f.rule: f.status for f in rec.findings if f.rule in expected}
    assert got == expected, {k: (got.get(k), v, rec.by_rule(k).message) for k, v in expected.items()
                             if got.get(k) != v}
    suite = rec.by_rule(SUITE)
    missed = [r["detail"] for r in suite.evidence["results"] if r["passed"] is not True]
    # 3 misses in 152 measured: one in twelve about 1 run in 5, two about 1 in 40, three about 1 in 400
    assert len(suite.evidence["results"]) == 12 and len(missed) <= 2, suite.message
    assert suite.status == ("fail" if missed else "pass"), suite.message
    assert not any(w in d for d in missed for w in ("no tool_calls", "returned as text", "HTTP")), missed
    history = rec.by_rule("agent.contract.history_reasoning").evidence["results"]
    assert all(r["passed"] for r in history) and len(history) == 2  # `reasoning` and `reasoning_content` both count


def _store(validated: Any) -> Any:
    return validated[1]  # the run's RunStore


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_what_keeps_the_cpu_host_from_production_is_the_host(validated):
    """The reasons left are what a CPU host cannot show (GPU memory, the host driver), the attestations and the
    tool-call rate that 20 CPU-sized turns cannot bound — no markup leak, no missing reasoning, no history reply, no
    forced call any more (a rare missed answer or suite argument is the sampling noise measured above)."""
    _, _, records, decision = validated
    print("\nk3 validate on the K3 model:", decision["decision"], *decision["reasons"], sep="\n  ")
    assert decision["decision"] == "limited-observation"
    for reason in decision["reasons"]:
        rule = reason.split(": ", 2)[1] if reason.count(": ") >= 2 else ""
        if rule.startswith("agent."):
            assert rule in ("agent.tool_call_failure_rate", "agent.final_answer", SUITE), reason


@pytest.mark.timeout(AGENT_TIMEOUT_S)
@pytest.mark.parametrize("history, lost", [("drop-reasoning", "reasoning"), ("drop-tool-calls", "tool calls")])
def test_a_client_that_drops_part_of_the_history_is_caught(real_vllm_k3, tmp_path, history, lost):
    """The kit's client sends each reply back without its reasoning (or tool calls): the model answers differently
    (no tool result used) and the reason names the lossy history."""
    _, record, decision = agent_alone(real_vllm_k3, tmp_path / "run", f"axes.agent.history={history}")
    assert decision.decision == "limited-observation" and decision.agents_blocked, decision.reasons
    kept = record.by_rule("agent.history_kept")
    assert kept.status == "fail" and f"without its {lost}" in kept.message and history in kept.message, kept.message
    final = record.by_rule("agent.final_answer")
    assert final.status == "fail" and "does not use the tool result" in final.message, final.message
    assert any("agent.history_kept" in r and lost in r for r in decision.reasons), decision.reasons


@pytest.mark.timeout(AGENT_TIMEOUT_S)
def test_hermes_parser_on_the_k3_model_leaves_the_markup_in_content(tmp_path_factory):
    _, record, decision = agent_alone_misconfigured(tmp_path_factory, "serve-k3-hermes")
    assert decision.decision == "limited-observation" and decision.agents_blocked, decision.reasons
    present = record.by_rule("agent.tool_calls_present")
    assert present.status == "fail" and "kimi_k3 tool markup in the text" in present.message, present.message
    leak = record.by_rule("agent.no_markup_leak")
    assert leak.status == "fail" and "kimi_k3 tool-call markup in content" in leak.message, leak.message
    assert any("kimi_k3" in r for r in agent_reasons(decision)), decision.reasons


@pytest.mark.timeout(AGENT_TIMEOUT_S)
def test_no_reasoning_parser_leaves_the_think_channel_in_content(tmp_path_factory):
    result, record, decision = agent_alone_misconfigured(tmp_path_factory, "serve-k3-no-reasoning-parser")
    assert decision.decision == "limited-observation" and decision.agents_blocked, decision.reasons
    leak = record.by_rule("agent.no_markup_leak")
    assert leak.status == "fail" and "kimi_k3 think channel in content" in leak.message, leak.message
    assert any("think channel" in r and "reasoning-parser" in r for r in agent_reasons(decision)), decision.reasons
    assert not any(s["parsed"].get("reasoning") for s in result.steps), "a reasoning field without a parser"


@pytest.mark.timeout(AGENT_TIMEOUT_S)
def test_tools_without_auto_tool_choice_are_refused_and_named(tmp_path_factory):
    _, record, decision = agent_alone_misconfigured(tmp_path_factory, "serve-k3-no-auto-tool-choice")
    assert decision.decision == "environment-rebuild", decision.reasons
    auto = record.by_rule("agent.auto_tool_choice")
    assert auto.status == "fail" and "--enable-auto-tool-choice" in auto.message, auto.message
    assert any(r.startswith("environment-rebuild: agent.auto_tool_choice") for r in decision.reasons), decision.reasons


# -- agent sessions (issue 47): the replay through the kimi_k3 parsers, the cached tokens from the server's counters --

SESSION_TIMEOUT_S = 600
# the other capacity phases as short as they go: the session phase is the point (sessions 1 then 2 at once, 5 s each)
CAPACITY_FAST = ["axes.capacity.step_duration_s=1.0", "axes.capacity.soak_duration_s=1.5",
                 "axes.capacity.context_lengths_tokens=[500]", "axes.capacity.sample_interval_s=0.5",
                 "axes.capacity.concurrency_steps=[2]"]


def _hits(base_url: str) -> float:
    """vllm:prefix_cache_hits_total (tokens), summed over the server's series."""
    import re

    import httpx

    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M))


def _replay(server: RealVllm, sessions: int, turns: int) -> tuple[list[dict], list[tuple[dict, Any]]]:
    """`sessions` generated sessions of the K3 profile (their first `turns` turns) replayed at once by the kit's
    replay client: (their turn records, every (request body, reply) the client sent and got, in order)."""
    import asyncio

    from k3lib.axes.capacity.sessions import sample_shape, sampling_of
    from k3lib.core.params import load_params
    from k3lib.io.client import ChatClient
    from k3lib.io.sessions import FILLER_SAMPLE, ReplayConfig, SessionReplay, generate_sessions

    params = load_params([K3_PROFILE], [f"target.base_url={server.base_url}"])
    head = sample_shape(params, 1, seed=4747)
    sent: list[tuple[dict, Any]] = []
    records: list[dict] = []

    async def go() -> None:
        client = ChatClient(server.base_url, model=params.target.model, timeout_s=120)
        send = client.chat_body

        async def spy(body: Any, **kw: Any) -> Any:
            rec = await send(body, **kw)
            sent.append((json.loads(json.dumps(body)), rec))  # the body as it went on the wire
            return rec

        client.chat_body = spy  # type: ignore[method-assign]
        try:  # the sessions grow in the server's tokens, from the shared prefix, as the session phase does
            shared = (await client.tokenize(messages=[{"role": "system", "content": head.system_prompt}],
                                            tools=[dict(t) for t in head.tools])).count
            cpt = len(FILLER_SAMPLE) / (await client.tokenize(prompt=FILLER_SAMPLE)).count
            shape = sample_shape(params, sessions, seed=4747, start_tokens=shared, chars_per_token=cpt)
            config = ReplayConfig(model=params.target.model, request_timeout_s=120, sampling=sampling_of(params),
                                  block_tokens=128, chars_per_token=cpt)  # vLLM's CPU block (cache_config_info)
            await asyncio.gather(*(SessionReplay(client, s[:turns], config, sink=records.append).run()
                                   for s in generate_sessions(shape)))
        finally:
            await client.aclose()

    asyncio.run(go())
    return records, sent


def _check_history_resent(sent: list[tuple[dict, Any]]) -> int:
    """Each turn's request resends the previous reply as the server gave it (content, reasoning under vLLM's
    `reasoning`, tool calls with its ids) and answers every live call by its id, right after it: how many replies'
    reasoning went back. A session is told by its first user message."""
    by_session: dict[str, list[tuple[dict, Any]]] = {}
    for body, rec in sent:
        first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        by_session.setdefault(first_user, []).append((body, rec))
    resent = 0
    for exchange in by_session.values():
        for (_, rec), (body, _) in zip(exchange, exchange[1:]):
            msgs = body["messages"]
            i = max(k for k, m in enumerate(msgs) if m["role"] == "assistant")
            back = msgs[i]
            assert back["content"] == (rec.content or "") and "reasoning_content" not in back, back
            assert back.get("reasoning") == (rec.reasoning or None), (back, rec.reasoning)
            live = [tc.id for tc in rec.tool_calls]
            assert [c["id"] for c in back.get("tool_calls") or []] == live
            assert [m["tool_call_id"] for m in msgs[i + 1:] if m["role"] == "tool"] == live
            resent += bool(rec.reasoning)
    return resent


@pytest.mark.timeout(SESSION_TIMEOUT_S)
def test_sessions_replay_faithfully_through_the_kimi_k3_parsers(real_vllm_k3):
    """Three sessions of six turns at once: each turn resends the live history (reasoning under vLLM's own field,
    tool calls with the server's ids), the prompt grows, later turns find their history in vLLM's prefix cache, and
    the cached tokens the usage reports are the ones vLLM's own counter counted; every turn that expects a call gets
    an executable one, at production sampling."""
    hits_before = _hits(real_vllm_k3.base_url)
    records, sent = _replay(real_vllm_k3, sessions=3, turns=6)
    hits = _hits(real_vllm_k3.base_url) - hits_before
    assert records and all(r["ok"] for r in records), [r["error"] for r in records if not r["ok"]]
    by_session: dict[str, list[dict]] = {}
    for r in records:
        by_session.setdefault(r["session"], []).append(r)
    assert len(by_session) == 3
    for turns in by_session.values():
        prompts = [t["prompt_tokens"] for t in sorted(turns, key=lambda t: t["turn"])]
        assert len(prompts) >= 3 and all(b > a for a, b in zip(prompts, prompts[1:])), prompts  # the history grows
    later = [r for r in records if (r["designed_cached_tokens"] or 0) > 0]
    assert later and all(r["cached_tokens"] >= r["designed_cached_tokens"] for r in later), \
        [(r["cached_tokens"], r["designed_cached_tokens"]) for r in later]  # later turns hit the prefix cache
    usage = sum(r["cached_tokens"] or 0 for r in records)
    assert hits >= usage > 0, (hits, usage)  # the usage's cached tokens are what vLLM's counter counted
    assert all(a["id"] in r["previous_call_ids"] for r in records for a in r["answers"] if a["id"])
    assert sum(1 for r in records for a in r["answers"] if a["id"]) > 0, "no tool result answered a live call"
    missed = [(r["session"], r["turn"], r["calls"]) for r in records if r["expect_tool"] and r["tool_ok"] is not True]
    assert not missed, missed
    assert all(tc.id.startswith("chatcmpl-tool-") for _, rec in sent for tc in rec.tool_calls)  # vLLM's own ids
    assert _check_history_resent(sent) > 0, "no reasoning through the kimi_k3 reasoning parser was sent back"
    print(f"\nsessions on real vLLM: {len(records)} turns, prompts "
          f"{[[t['prompt_tokens'] for t in v] for v in by_session.values()]}, cached {usage} tokens by usage, "
          f"{hits:g} by vllm:prefix_cache_hits; tool turns {sum(1 for r in records if r['expect_tool'])}, "
          f"without a call {sum(1 for r in records if r['tool_ok'] is False)}")


@pytest.mark.timeout(SESSION_TIMEOUT_S)
def test_the_session_phase_on_real_vllm_decides_by_its_rules_of_proof(real_vllm_k3, tmp_path):
    """The capacity axis's session phase against real vLLM at production sampling: each level's cached tokens
    reconciled with vLLM's counter, the history found in the prefix cache, the sessions held without preemption,
    and every turn that expects a call answered with an executable one."""
    import k3lib.axes.capacity as capacity

    ctx = open_axis("capacity", str(K3_PROFILE), [f"target.base_url={real_vllm_k3.base_url}", *CAPACITY_FAST],
                    str(tmp_path / "run"))
    result = capacity.run_capacity(ctx)
    record = ctx.record(capacity.capacity_record(result, ctx))
    assert result.phase("sessions")["status"] == "done"
    levels = result.run["sessions"]["levels"]
    assert [lv["sessions"] for lv in levels] == [1, 2] and all(lv["status"] == "done" for lv in levels)
    for lv in levels:
        assert lv["prefix_cache_hits"] >= lv["usage_cached_tokens"] > 0, lv
    found = {f.rule: f for f in record.findings if f.rule.startswith("capacity.session_")}
    assert found["capacity.session_preemption"].status == "pass", found["capacity.session_preemption"].message
    reuse = found["capacity.session_prefix_reuse"]
    assert reuse.status == "pass" and reuse.observed["counter_hits"] >= reuse.observed["counter_usage_cached_tokens"]
    tools = found["capacity.session_tool_calls"]
    assert tools.observed["answers"] > 0 and tools.observed["answers_stray"] == 0, tools.observed
    assert tools.observed["expected"] >= 5, tools.message
    # at temperature 1.0 the 0.87M-parameter model samples a schema-breaking argument now and then (1 of 19 tool turns
    # in one whole suite, 8 Dec): the kit then fails the rule, as it must; a call missing, or more misses, is not noise
    sampled = tools.observed["missing"] == 0 and tools.observed["failed"] <= 1 and all(
        "break the schema" in p for p in tools.observed["problems"])
    assert tools.status == "pass" or (tools.status == "fail" and sampled), tools.message
    assert found["capacity.session_stall"].status == "info"  # the K3 CPU profile sets no client idle timeout
    print("\nsession phase on real vLLM:", *(f"{f.rule} {f.status}: {f.message}" for f in found.values()),
          *(f"level {lv['sessions']}: {lv['turns']} turns, {lv['usage_cached_tokens']} cached tokens by usage, "
            f"{lv['prefix_cache_hits']:g} by vllm:prefix_cache_hits" for lv in levels), sep="\n  ")
