"""Agent sessions (issue 47): the trace format and its readers over small files written in each public shape, the
sessions generated from the contract, the replay's binding of recorded tool results to the server's live ids, and
the session phase's findings over crafted turns."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from conftest import ROOT

from k3lib.axes.capacity.result import CapacityResult
from k3lib.axes.capacity.sessionjudge import align, session_findings
from k3lib.core.errors import BadInputError
from k3lib.core.outcomes import level_for
from k3lib.core.params import load_params
from k3lib.io.client import ChatClient
from k3lib.io.sessions import (Question, ReplayConfig, SessionReplay, SessionShape, call_problem, convert_trace,
                               generate_sessions, read_trace, write_trace)

TOOLS = ({"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"],
    "additionalProperties": False}}},)


# -- the trace format ---------------------------------------------------------------------------------------------

def _line(**kw):
    base = {"session": "a", "turn": 0, "think_s": 0, "add": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    return json.dumps({**base, **kw})


def test_a_trace_round_trips_and_groups_its_sessions(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([
        _line(expect="tool", function="lookup_order", system="sys", tools=list(TOOLS)),
        _line(session="b", tools=list(TOOLS)),
        _line(turn=1, think_s=2.5, add=[{"role": "tool", "content": "{}", "call": 0}]),
        _line(turn=2, think_s=600, add=[{"role": "user", "tokens": 40}]),
    ]) + "\n")
    sessions = read_trace(path)
    assert [[t.turn for t in s] for s in sessions] == [[0, 1, 2], [0]]
    a = sessions[0]
    assert a[0].expect_tool and a[0].function == "lookup_order" and a[0].tools[0]["function"]["name"] == "lookup_order"
    assert a[1].add[0].call == 0 and a[1].think_s == 2.5
    assert a[2].think_s == 60.0 and a[2].add[0].tokens == 40  # capped as AIPerf caps idle gaps
    again = tmp_path / "again.jsonl"
    write_trace(again, sessions)
    assert read_trace(again) == sessions


@pytest.mark.parametrize("lines, field, words", [
    pytest.param([_line(turn=1)], "turn", "turn 0 is missing", id="missing turn"),
    pytest.param([_line(), _line(turn=1, add=[{"role": "tool", "content": "x"}])], "add", "expected no call",
                 id="tool result after a text turn"),
    pytest.param([_line(max_tokens=0)], "line 1", "max_tokens", id="max_tokens"),
    pytest.param([_line(), _line(turn=1, tools=list(TOOLS))], "line 2", "turn 0", id="tools after turn 0"),
    pytest.param(["{not json"], "line 1", "one turn per line", id="not json"),
    pytest.param([_line(add=[{"role": "user", "content": "x", "tokens": 3}])], "line 1", "exactly one",
                 id="text and tokens"),
])
def test_a_bad_trace_is_one_line_naming_the_line(tmp_path, lines, field, words):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInputError) as err:
        read_trace(path)
    line = err.value.one_line()
    assert "\n" not in line and str(path) in line and field in line and words in line


# -- the public shapes ----------------------------------------------------------------------------------------------

def test_copilot_calls_become_turns_and_tool_batches_their_results(tmp_path):
    session = {"session_id": "c1", "turns": [{
        "llm_calls": [{"timestamp": 1000.0, "duration_ms": 2000, "prompt_tokens": 9000, "completion_tokens": 100,
                       "cached_tokens": 0},
                      {"timestamp": 1005.0, "duration_ms": 1000, "prompt_tokens": 9600, "completion_tokens": 50,
                       "cached_tokens": 9000}],
        "tool_batches": [{"tools": [{"name": "read_file", "status": "ok"}, {"name": "grep", "status": "ok"}]}]}]}
    path = tmp_path / "copilot.jsonl"
    path.write_text(json.dumps(session) + "\n")
    (s,) = convert_trace("copilot", path)
    assert s[0].expect_tool and s[0].function == "read_file" and s[0].add[0].tokens == 9000
    assert [m.role for m in s[1].add] == ["tool", "tool"] and [m.call for m in s[1].add] == [0, 1]
    assert sum(m.tokens or 0 for m in s[1].add) == 500  # 9,600 − 9,000 − 100, split over the batch
    assert s[1].think_s == pytest.approx(3.0) and not s[1].expect_tool


def test_bailian_chains_are_sessions_and_shared_blocks_share_bytes(tmp_path):
    rows = [{"chat_id": 1, "parent_chat_id": -1, "timestamp": 10, "input_length": 32, "output_length": 8,
             "turn": 1, "hash_ids": [7, 8]},
            {"chat_id": 2, "parent_chat_id": 1, "timestamp": 14, "input_length": 56, "output_length": 4,
             "turn": 2, "hash_ids": [7, 8, 9]},
            {"chat_id": 3, "parent_chat_id": -1, "timestamp": 11, "input_length": 32, "output_length": 4,
             "turn": 1, "hash_ids": [7, 8]}]
    path = tmp_path / "bailian.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    sessions = convert_trace("bailian", path)
    assert sorted(len(s) for s in sessions) == [1, 2]
    two = next(s for s in sessions if len(s) == 2)
    one = next(s for s in sessions if len(s) == 1)
    assert two[1].think_s == 4 and two[0].add[0].content == one[0].add[0].content  # same hash blocks, same text


def test_azure_rows_are_one_turn_sessions_and_weka_keeps_tool_results(tmp_path):
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,4808,10\n"
                     "2023-11-16 18:15:50.9,3180,8\n")
    assert [(s[0].add[0].tokens, s[0].max_tokens) for s in convert_trace("azure", azure)] == [(4808, 10), (3180, 8)]
    weka = tmp_path / "weka.json"
    weka.write_text(json.dumps({"sessions": [{"id": "w", "system_tokens": 3000, "tool_tokens": 2000, "requests": [
        {"t": 0, "in": 5200, "out": 40, "input_types": ["text"], "stop": "tool_use"},
        {"t": 3, "in": 5640, "out": 30, "input_types": ["tool_result"], "stop": "end_turn", "think_time": 0.4},
        {"t": 9, "in": 5800, "out": 20, "input_types": ["text"], "stop": "end_turn", "think_time": 12},
        {"t": 9, "in": 100, "out": 20, "subagent": True}]}]}))
    (s,) = convert_trace("weka", weka)
    assert [t.add[0].role for t in s] == ["user", "tool", "user"] and s[0].system_tokens == 5000
    assert s[0].add[0].tokens == 200 and s[1].add[0].tokens == 400 and s[0].expect_tool and s[2].think_s == 12


def test_a_file_in_the_wrong_shape_is_one_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(BadInputError) as err:
        convert_trace("azure", path)
    assert "ContextTokens" in err.value.one_line() and str(path) in err.value.one_line()


# -- generated sessions ---------------------------------------------------------------------------------------------

def _shape(**kw):
    base = dict(sessions=3, system_prompt="You are the shop's assistant.", tools=TOOLS,
                questions=(Question('Where is order "A-1042"?', "lookup_order", '{"status": "shipped"}'),),
                longest_tokens=2048, max_tokens=64, max_turns=8, think_mean_s=1.0, seed=5)
    return SessionShape(**{**base, **kw})


def test_generated_sessions_share_their_prefix_grow_and_are_seeded():
    sessions = generate_sessions(_shape(max_turns=12, longest_tokens=4096))
    assert generate_sessions(_shape(max_turns=12, longest_tokens=4096)) == sessions
    assert generate_sessions(_shape(max_turns=12, longest_tokens=4096, seed=6)) != sessions
    heads = {(s[0].system, json.dumps(s[0].tools)) for s in sessions}
    assert len(heads) == 1  # system prompt and tools byte-identical across sessions
    for s in sessions:
        assert s[0].think_s == 0 and all(t.think_s <= 5.0 for t in s)
        assert [t.expect_tool for t in s[:2]] == [True, False] and s[1].add[0].role == "tool"
        users = [len(t.add[0].content or "") for t in s if t.add[0].role == "user"]
        assert len(users) >= 3 and users[1] > users[0]  # the history grows after the first question
        chars = sum(len(t.add[0].content or "") for t in s)
        assert 4096 * 2 < chars + len(s[0].system or "") + len(json.dumps(s[0].tools)) < 4096 * 4 * 1.2  # ~ longest
        assert "lookup" not in " ".join(t.add[0].content or "" for t in s[2:] if t.add[0].role == "user")[:-40]


@pytest.mark.parametrize("chars_per_token", [4.0, 2.0])
def test_generated_sessions_grow_at_the_servers_tokens(chars_per_token):
    """The growth is planned in the server's tokens (its /tokenize on the filler, as the session phase measures it):
    a tokenizer spending twice the tokens gets half the characters, so both reach the same longest exchange (real
    vLLM's tiny K3 model at four characters a token ran to ~1,150 tokens for a 614-token longest exchange)."""
    (s,) = generate_sessions(_shape(sessions=1, max_turns=12, longest_tokens=4096, start_tokens=40,
                                    chars_per_token=chars_per_token))
    chars = sum(len(t.add[0].content or "") for t in s)
    assert 0.6 * 4096 < 40 + chars / chars_per_token + 64 * len(s) < 4096 * 1.15


def test_a_session_resends_its_history_even_when_the_shared_prefix_fills_the_longest_exchange():
    """Real vLLM's tiny Llama renders the tools in 1,247 tokens against a 1,024-token longest exchange: each session
    still asks, gets its result back, and asks again with its result to come (the phase plays three turns of each)."""
    (s,) = generate_sessions(_shape(sessions=1, longest_tokens=1024, start_tokens=1247))
    assert [t.add[0].role for t in s] == ["user", "tool", "user", "tool"]


# -- the replay: live ids, reasoning sent back, affinity --------------------------------------------------------

def _sse(*deltas, usage):
    chunks = [{"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d,
                                                                          "finish_reason": None}]} for d in deltas]
    chunks.append({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def test_the_replay_binds_recorded_results_to_the_live_ids_and_sends_history_back(tmp_path):
    seen: list[tuple[dict, httpx.Headers]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((body, request.headers))
        n = len(seen)
        if n % 2:  # the model calls a tool, each time with a fresh id
            deltas = [{"role": "assistant", "reasoning": "I need the order."},
                      {"tool_calls": [{"index": 0, "id": f"live-{n}", "type": "function",
                                       "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1042"}'}}]},
                      {"tool_calls": [{"index": 1, "id": f"extra-{n}", "type": "function",
                                       "function": {"name": "nope", "arguments": "{}"}}]}]
        else:
            deltas = [{"role": "assistant", "content": "Shipped."}]
        usage = {"prompt_tokens": 100 * n, "completion_tokens": 20, "total_tokens": 100 * n + 20,
                 "prompt_tokens_details": {"cached_tokens": 100 * (n - 1)}}
        return httpx.Response(200, text=_sse(*deltas, usage=usage), headers={"content-type": "text/event-stream"})

    (session,) = generate_sessions(_shape(sessions=1, max_turns=4, think_mean_s=0.0))
    client = ChatClient("http://replay.test", model="m", transport=httpx.MockTransport(handler))
    turns: list[dict] = []
    records = asyncio.run(SessionReplay(client, session, ReplayConfig(model="m", request_timeout_s=5),
                                        sink=turns.append).run())
    assert records == turns and len(turns) == 4 and all(t["ok"] for t in turns)
    second = seen[1][0]["messages"]
    assistant = next(m for m in second if m["role"] == "assistant")
    assert assistant["reasoning"] == "I need the order." and [c["id"] for c in assistant["tool_calls"]] == \
        ["live-1", "extra-1"]
    tools = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["live-1", "extra-1"]  # the recorded result, then the plain one
    assert tools[0]["content"] == '{"status": "shipped"}' and tools[1]["content"] == '{"status": "ok"}'
    assert turns[1]["answers"] == [{"call": 0, "id": "live-1"}] and turns[1]["previous_call_ids"] == \
        ["live-1", "extra-1"] and turns[1]["plain_results"] == 1
    assert all(h["x-session-affinity"] == session[0].session for _, h in seen)
    assert all(json.dumps(b["tools"]) == json.dumps(list(TOOLS)) for b, _ in seen)  # resent byte-identical
    assert turns[0]["tool_ok"] is False and "not offered" in turns[0]["calls"][1]["problem"]
    assert turns[1]["growth_tokens"] == 100 and turns[1]["designed_cached_tokens"] == 80
    assert turns[1]["cached_tokens"] == 100 and turns[0]["ttft_ms"] is not None


def test_a_call_a_client_cannot_execute_is_named():
    tools = {"lookup_order": TOOLS[0]}
    assert call_problem({"id": "a", "name": "lookup_order", "arguments": '{"order_id": "A"}'}, tools) is None
    assert "schema" in call_problem({"id": "a", "name": "lookup_order", "arguments": '{"x": 1}'}, tools)
    assert "not JSON" in call_problem({"id": "a", "name": "lookup_order", "arguments": '{"order_id"'}, tools)
    assert call_problem({"id": "", "name": "lookup_order", "arguments": "{}"}, tools) == "no call id"


# -- the findings over crafted turns --------------------------------------------------------------------------------

def _params(**contract):
    return load_params([ROOT / "parameters" / "emulator.yaml"], [f"contract.{k}={v}" for k, v in contract.items()])


def _turn(session, turn, level=4, **kw):
    prompt = 800 + 200 * turn
    base = {"session": session, "turn": turn, "level": level, "ok": True, "prompt_tokens": prompt,
            "cached_tokens": prompt - 200 if turn else 720, "designed_cached_tokens": (prompt - 216) if turn else None,
            "growth_tokens": 200 if turn else None, "expect_tool": turn % 2 == 0, "tool_ok": True if turn % 2 == 0
            else None, "calls": [], "answers": [{"call": 0, "id": f"{session}-{turn}"}] if turn % 2 else [],
            "previous_call_ids": [f"{session}-{turn}"] if turn % 2 else [], "max_silence_ms": 300.0,
            "sent_wall": 100.0 + turn, "done_wall": 100.5 + turn}
    return {**base, **kw}


def _result(turns, preemptions=0.0, shared=720):
    run = {"plan": {}, "phases": [{"phase": "sessions", "status": "done"}],
           "sessions": {"planned_sessions": 4, "shared_prefix_tokens": shared,
                        "levels": [{"sessions": 4, "status": "done", "preemptions": preemptions}]}}
    return CapacityResult(run, [{"t_wall": 100.2, "kv_cache_usage_perc": 0.4, "num_requests_running": 4,
                                 "num_requests_waiting": 0, "num_preemptions_total": 0}], [], [], None, None, turns)


def _healthy():
    return [_turn(f"s{i}", k) for i in range(4) for k in range(4)]


def _by_rule(findings):
    return {f.rule.removeprefix("capacity."): f for f in findings}


def test_healthy_sessions_pass_and_the_idle_timeout_holds_them():
    found = _by_rule(session_findings(_result(_healthy()), _params(client_idle_timeout_s=30)))
    assert {k: f.status for k, f in found.items()} == {"session_preemption": "pass", "session_prefix_reuse": "pass",
                                                       "session_tool_calls": "pass", "session_stall": "pass"}
    assert found["session_prefix_reuse"].observed["ratio"] == 1.0


@pytest.mark.parametrize("change, rule, level", [
    pytest.param(lambda t: {**t, "cached_tokens": 720 if t["turn"] else 720}, "session_prefix_reuse",
                 "limited-observation", id="history evicted between turns"),
    pytest.param(lambda t: {**t, "tool_ok": False if t["expect_tool"] else None}, "session_tool_calls",
                 "limited-observation", id="no executable call under load"),
    pytest.param(lambda t: {**t, "answers": [{"call": 0, "id": "recorded-id"}] if t["answers"] else []},
                 "session_tool_calls", "limited-observation", id="a result answering a recorded id"),
    pytest.param(lambda t: {**t, "max_silence_ms": 45_000.0}, "session_stall", "capacity-extension",
                 id="a stall beyond the idle timeout"),
])
def test_each_session_defect_fails_its_finding_and_decides(change, rule, level):
    found = _by_rule(session_findings(_result([change(t) for t in _healthy()]), _params(client_idle_timeout_s=30)))
    assert found[rule].status == "fail" and "session phase" in found[rule].message
    assert level_for(found[rule])[0] == level


def test_preemption_at_the_planned_sessions_fails_and_thin_data_is_inconclusive():
    found = _by_rule(session_findings(_result(_healthy(), preemptions=3.0), _params()))
    assert found["session_preemption"].status == "fail" and level_for(found["session_preemption"])[0] == \
        "capacity-extension"
    thin = _by_rule(session_findings(_result([_turn("s0", 0), _turn("s0", 1)]), _params()))
    assert {k: f.status for k, f in thin.items() if k != "session_stall"} == {
        "session_preemption": "not-observable", "session_prefix_reuse": "not-observable",
        "session_tool_calls": "not-observable"}
    assert thin["session_stall"].status == "info"  # no idle timeout in the contract
    blind = _by_rule(session_findings(_result([{**t, "cached_tokens": None} for t in _healthy()]), _params()))
    assert blind["session_prefix_reuse"].status == "not-observable" and "cached_tokens" in \
        blind["session_prefix_reuse"].message


def test_turns_are_aligned_with_the_server_series():
    (t,) = align([_turn("s0", 0)], _result([]).metrics)
    assert t["kv_usage_max"] == 0.4 and t["running_max"] == 4 and t["waiting_max"] == 0


def test_the_plan_counts_the_session_phase():
    from k3lib.axes.capacity.shape import plan_capacity
    from k3lib.axes.estimate import capacity_phases, DEFAULT_SPEED

    plan = plan_capacity(_params(planned_concurrency=4))
    assert plan.session_levels == (1, 2, 4) and plan.phase_budget_s("sessions") > 3 * plan.capacity.session_duration_s
    assert plan_capacity(_params(planned_concurrency=4, planned_sessions=6)).session_levels == (1, 2, 4, 6)
    phases = capacity_phases(_params(planned_concurrency=4), DEFAULT_SPEED)
    assert [p.name for p in phases if "sessions" in p.name] == ["sessions: 1 at once", "sessions: 2 at once",
                                                                 "sessions: 4 at once"]


def test_a_cancelled_replay_keeps_its_turns_and_sends_nothing_more():
    """Ctrl-C reaches a replay as a cancellation (run_sync cancels its task): the turns that ended are kept, the
    session sends no further request."""
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        return httpx.Response(200, text=_sse({"role": "assistant", "content": "ok"}, usage=usage),
                              headers={"content-type": "text/event-stream"})

    (session,) = generate_sessions(_shape(sessions=1, think_mean_s=30.0))
    turns: list[dict] = []

    async def go() -> None:
        client = ChatClient("http://replay.test", model="m", transport=httpx.MockTransport(handler))
        task = asyncio.ensure_future(SessionReplay(client, session, ReplayConfig(model="m", request_timeout_s=5),
                                                   sink=turns.append).run())
        while not turns:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the session is in its think time before turn 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)

    asyncio.run(go())
    assert len(seen) == len(turns) == 1 and turns[0]["ok"]


def test_the_phase_reads_a_trace_in_any_shape_and_refuses_a_bad_one_before_any_load(tmp_path):
    from k3lib.axes.capacity.sessions import SessionSource

    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,480,10\n")
    source = SessionSource(load_params([ROOT / "parameters" / "emulator.yaml"], [
        f"axes.capacity.session_trace={azure}", "axes.capacity.session_trace_format=azure"]))
    assert source.kind == "trace (azure)" and [len(s) for s in source.level()] == [1]
    generated = SessionSource(_params())
    first, second = next(generated.level()), next(generated.level())
    assert first[0].session != second[0].session and first[0].system == second[0].system
    with pytest.raises(BadInputError) as err:
        SessionSource(load_params([ROOT / "parameters" / "emulator.yaml"], [
            f"axes.capacity.session_trace={azure}"]))  # a CSV read as the kit's own format
    assert "line 1" in err.value.one_line() and str(azure) in err.value.one_line()
