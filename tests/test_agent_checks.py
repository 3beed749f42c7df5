"""Axis 2's pure parts: the sample's validation, the local tools, each contract check, stability and rates."""

from __future__ import annotations

import json
import re

import pytest
import yaml

import k3lib.axes.agent
from k3lib.axes.agent import checks as C
from k3lib.axes.agent.figures import FailingReply, cases_table
from k3lib.axes.agent.judge import iter_findings
from k3lib.axes.agent.result import AgentResult
from k3lib.axes.agent.scenario import assistant_message, filler_lines, history_message, parsed_reply
from k3lib.axes.agent.sample import FallbackSpec, FinalSpec, load_sample, packaged_sample_path
from k3lib.axes.agent.tools import BUILTIN_TOOLS, execute
from k3lib.io.client import ChatRecord, ToolCall
from k3lib.verdict.decision import level_for
from k3lib.core.errors import BadInputError

WEATHER_SCHEMA = {"type": "object", "required": ["location", "unit"], "additionalProperties": False,
                  "properties": {"location": {"type": "object", "required": ["city"],
                                              "properties": {"city": {"type": "string"}}},
                                 "unit": {"enum": ["celsius", "fahrenheit"]}}}
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "lookup_order": {"type": "object", "properties": {}}}
GOOD_ARGS = '{"location": {"city": "Oslo"}, "unit": "celsius"}'


def call(name="get_weather", arguments=GOOD_ARGS, id="functions.get_weather:0", type="function"):
    return C.parse_call(0, {"id": id, "type": type, "function": {"name": name, "arguments": arguments}})


# -- the sample ----------------------------------------------------------------------------------------------------


def test_packaged_sample_has_what_the_seed_lists():
    s = load_sample()
    assert len(s.tools) >= 3
    schemas = [t.function.parameters for t in s.tools]
    assert all(p.get("required") for p in schemas)
    text = json.dumps(schemas)
    assert '"enum"' in text and any(
        any(v.get("type") == "object" for v in p["properties"].values()) for p in schemas), "enums and nested objects"
    turns = [t for c in s.cases for t in c.turns]
    assert any(t.expect_tool and t.final.uses_result for t in turns), "a call whose result the answer must use"
    assert any(t.final_schema() for t in turns), "a json_schema structured answer"
    assert any(c.requires_images and any(t.image_parts for t in c.turns) for c in s.cases)
    assert any(t.tool_error and t.fallback for t in turns)
    assert any(sum(t.filler for t in c.turns) >= 2 and len(c.turns) >= 4 for c in s.cases), "a long exchange"
    image = next(p for c in s.cases for t in c.turns if t.image_parts for p in t.user if p["type"] == "image_url")
    assert image["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")


def _sample_with(tmp_path, edit, suffix=".yaml"):
    data = yaml.safe_load(packaged_sample_path().read_text())
    edit(data)
    p = tmp_path / f"sample{suffix}"
    p.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
    return p


@pytest.mark.parametrize("edit, field, words", [
    pytest.param(lambda d: d["cases"][0]["turns"][0].update(expect_tool="send_email"), "",
                 "does not offer", id="expects-unoffered-tool"),
    pytest.param(lambda d: d["tools"].append({"type": "function", "function": {
        "name": "send_email", "parameters": {"type": "object"}}}), "", "no built-in", id="tool-without-impl"),
    pytest.param(lambda d: d["tools"][0]["function"]["parameters"].update(type="array"), "tools.0.function.parameters",
                 "type object", id="params-not-object"),
    pytest.param(lambda d: d["tools"][0]["function"]["parameters"]["properties"].update(x={"type": 5}),
                 "tools.0.function.parameters", "not a valid JSON Schema", id="invalid-json-schema"),
    pytest.param(lambda d: d.update(colour="blue"), "colour", "unknown key", id="unknown-key"),
    pytest.param(lambda d: d["cases"][3]["turns"][0].pop("fallback"), "cases.3.turns.0", "fallback", id="error-without-plan"),
    pytest.param(lambda d: d["cases"].append(dict(d["cases"][0])), "", "case ids repeat", id="duplicate-case"),
    pytest.param(lambda d: d.pop("system_prompt"), "system_prompt", "required", id="no-system-prompt"),
])
def test_bad_sample_is_one_bad_input_line(tmp_path, edit, field, words):
    path = _sample_with(tmp_path, edit)
    with pytest.raises(BadInputError) as info:
        load_sample(path)
    line = info.value.one_line()
    assert "\n" not in line and str(path) in line and words in line
    assert (info.value.field or "").startswith(field)


def test_user_sample_in_json_with_canned_tool(tmp_path):
    def edit(d):
        d["tools"].append({"type": "function", "result": {"sent": True},
                           "function": {"name": "send_email", "parameters": {"type": "object", "properties": {}}}})
    s = load_sample(_sample_with(tmp_path, edit, ".json"))
    assert s.tool("send_email").result == {"sent": True}
    assert execute("send_email", {}, s.tool("send_email").result) == {"sent": True}


@pytest.mark.parametrize("text", ["{not yaml: [", "- a list\n- not a mapping\n"])
def test_unreadable_sample_file(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(BadInputError):
        load_sample(p)
    with pytest.raises(BadInputError, match="not found"):
        load_sample(tmp_path / "missing.yaml")


# -- tools -------------------------------------------------------------------------------------------------------


def test_tools_are_deterministic_and_their_results_valid_input_for_the_checks():
    a = execute("lookup_order", {"order_id": "A-1042", "include_items": True})
    assert a == execute("lookup_order", {"order_id": "A-1042", "include_items": True})
    assert re.fullmatch(r"ZX-\d{5}", a["tracking_code"])
    assert execute("lookup_order", {"order_id": "B-2203"})["tracking_code"] != a["tracking_code"]
    assert execute("get_weather", {"location": {"city": "Oslo"}, "unit": "fahrenheit"})["temperature"] == 44.6
    assert execute("create_ticket", {"title": "x", "priority": "urgent", "customer": {}})["ticket_id"].startswith("TCK-")
    assert "error" in execute("create_ticket", {"title": "x"})  # a crashing tool is a result, not an exception
    assert set(BUILTIN_TOOLS) == {t.function.name for t in load_sample().tools}


def test_filler_never_mentions_a_tool_or_an_enum_value():
    text = filler_lines("long-exchange:0", 400)
    s = load_sample()
    words = {w for t in s.tools for w in re.split(r"[_]", t.function.name) if len(w) >= 4}
    words |= {v for t in s.tools for v in re.findall(r'"enum": \[([^\]]*)\]', json.dumps(t.function.parameters))}
    assert text == filler_lines("long-exchange:0", 400) and len(text.splitlines()) == 400
    for w in words:
        for v in re.findall(r'"([^"]+)"', w) or [w]:
            assert v.lower() not in text.lower(), v


# -- per-reply checks --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, ok, detail", [
    pytest.param(GOOD_ARGS, True, "valid", id="valid"),
    pytest.param('{"location": {"city": "Oslo"}, "unit": "celsius"', False, "invalid JSON", id="truncated-json"),
    pytest.param('{"unit": "celsius"}', False, "'location' is a required property", id="missing-required"),
    pytest.param('{"location": {"city": "Oslo"}, "unit": "kelvin"}', False, "unit", id="enum-violated"),
    pytest.param('{"location": {"town": "Oslo"}, "unit": "celsius"}', False, "location", id="nested-required"),
    pytest.param('{"location": {"city": "Oslo"}, "unit": "celsius", "x": 1}', False, "Additional", id="extra-key"),
    pytest.param({"location": {"city": "Oslo"}, "unit": "celsius"}, False, "not a string", id="object-not-string"),
])
def test_arguments_check(raw, ok, detail):
    o = C.check_arguments(call(arguments=raw), WEATHER_SCHEMA)
    assert o.check == "arguments_valid" and o.passed is ok and detail in o.detail


@pytest.mark.parametrize("name, ok, hint", [
    pytest.param("get_weather", True, "", id="exact"),
    pytest.param("functions.get_weather:0", False, "rewriting", id="kimi-id-as-name"),
    pytest.param(" get_weather", False, "rewriting", id="whitespace"),
    pytest.param("get_wether", False, "not one of", id="misspelt"),
    pytest.param(None, False, "not one of", id="missing"),
])
def test_function_name_check(name, ok, hint):
    o = C.check_name(call(name=name), ["get_weather", "lookup_order"])
    assert o.passed is ok and hint in o.detail


@pytest.mark.parametrize("kwargs, others, ok, detail", [
    pytest.param({}, [], True, "runs as received", id="clean"),
    pytest.param({"type": None}, [], False, "type", id="no-type"),
    pytest.param({"id": ""}, [], False, "no call id", id="no-id"),
    pytest.param({}, ["functions.get_weather:0"], False, "repeats", id="duplicate-id"),
    pytest.param({"arguments": json.dumps(GOOD_ARGS)}, [], False, "twice", id="double-encoded"),
    pytest.param({"arguments": "[1, 2]"}, [], False, "not an object", id="array-args"),
    pytest.param({"arguments": '{"unit": "celsius"}'}, [], False, "break the schema", id="schema"),
    pytest.param({"name": "functions.get_weather"}, [], False, "not offered as named", id="prefixed-name"),
])
def test_executable_check(kwargs, others, ok, detail):
    o = C.check_executable(call(**kwargs), SCHEMAS, others)
    assert o.passed is ok and detail in o.detail


@pytest.mark.parametrize("content, reasoning, names, family", [
    pytest.param("The weather is fine.", None, [], None, id="clean"),
    pytest.param('<|open|>tools<|sep|><|open|>call tool="get_weather"', None, [], "kimi_k3", id="kimi_k3"),
    pytest.param("<|tool_calls_section_begin|><|tool_call_begin|>functions.x:0", None, [], "kimi_k2", id="kimi_k2"),
    pytest.param('<tool_call>{"name": "get_weather"}</tool_call>', None, [], "hermes", id="hermes"),
    pytest.param("<|channel|>commentary to=functions.get_weather", None, [], "harmony", id="harmony"),
    pytest.param('[TOOL_CALLS][{"name": "get_weather"}]', None, [], "mistral", id="mistral"),
    pytest.param(None, "I will emit <|open|>tools<|sep|>", [], "kimi_k3", id="in-reasoning"),
    pytest.param(None, None, ["get_weather<|close|>call"], "kimi_k3", id="in-function-name"),
    # no reasoning parser: the think channel stays in content (reasoning markup in the reasoning field is fine)
    pytest.param("<|open|>think<|sep|>I should call it.<|close|>think<|sep|>", None, [], "kimi_k3 think",
                 id="k3-think-in-content"),
    pytest.param("<think>I should call it.</think>", None, [], "<think> think", id="think-tags-in-content"),
    # any Kimi K3 control token or stripped call header, in content or reasoning, is a leak named as one
    pytest.param(None, "<|open|>think<|sep|>nested", [], "Kimi K3 control token '<|open|>think<|sep|>' in reasoning",
                 id="think-marker-in-reasoning"),
    pytest.param("The tracking code is ZX-10042.<|close|>message<|sep|>", None, [],
                 "Kimi K3 control token '<|close|>message<|sep|>' in content", id="close-message-vllm-54273"),
    pytest.param("Done.<|end_of_msg|>", None, [], "Kimi K3 control token '<|end_of_msg|>'", id="end-of-msg"),
    pytest.param("Checking. <|sep|>", None, [], "Kimi K3 control token '<|sep|>'", id="bare-sep"),
    pytest.param('call tool="lookup_order" index="1" {"order_id": "A-1"}', None, [], "kimi_k3 tool-call markup",
                 id="stripped-call-header"),
    pytest.param(None, 'argument key="city" type="string" Oslo', [], "kimi_k3 tool-call markup in reasoning",
                 id="stripped-argument-header"),
    pytest.param("Use <|im_end|> and |sep| in prose; an open|close door.", None, [], None, id="near-misses"),
])
def test_markup_leak_is_named_by_family(content, reasoning, names, family):
    calls = [call(name=n) for n in names]
    o = C.check_markup(content, reasoning, calls)
    assert o.passed is (family is None)
    if family:
        assert o.detail.startswith("leak: ") and o.detail.removeprefix("leak: ").startswith(family), o.detail


@pytest.mark.parametrize("thinking, finish, content, reasoning, failing", [
    pytest.param(True, "length", "The user asks about the order, so I", None, "no_reasoning_leak",
                 id="truncated-reasoning-as-content-vllm-50258"),
    pytest.param(True, "stop", "The code is ZX-1.", None, "reasoning_present", id="no-reasoning-field"),
    pytest.param(True, "length", None, "I think", None, id="cut-inside-reasoning-is-no-leak"),
    pytest.param(True, "length", "partial answer", "I thought", None, id="answer-cut-after-reasoning"),
    pytest.param(True, "stop", "ok", "I thought", None, id="healthy"),
    pytest.param(None, "length", "cut", None, None, id="thinking-not-declared-checks-nothing"),
])
def test_reasoning_out_of_its_field_is_named(thinking, finish, content, reasoning, failing):
    outcomes = C.check_reasoning(thinking, finish, content, reasoning)
    bad = [o for o in outcomes if not o.passed]
    assert [o.check for o in bad] == ([failing] if failing else [])
    if failing == "no_reasoning_leak":
        assert bad[0].detail.startswith("leak: reasoning truncated into content") and "vllm#50258" in bad[0].detail
        assert len(outcomes) == 1  # the leak, not also "no reasoning field"
    if not thinking:
        assert outcomes == []


def test_longest_silence_is_the_widest_gap_between_byte_carrying_moments():
    s = 1_000_000_000
    assert C.longest_silence_s([0, s // 10, 2 * s // 10, 95 * s // 10, 96 * s // 10]) == 9.3
    assert C.longest_silence_s([0, None, s]) == 1.0 and C.longest_silence_s([5]) is None


@pytest.mark.parametrize("calls, leaked, ok, detail", [
    pytest.param([call()], None, True, "called", id="present"),
    pytest.param([], None, False, "no tool_calls", id="absent"),
    pytest.param([], "kimi_k3", False, "kimi_k3 tool markup", id="absent-leaked"),
    pytest.param([call(name="lookup_order")], None, False, "not the required", id="other-tool"),
])
def test_required_call_check(calls, leaked, ok, detail):
    o = C.check_required_call(calls, "get_weather", leaked)
    assert o.passed is ok and detail in o.detail


SCHEMA = {"type": "object", "required": ["severity"], "properties": {"severity": {"enum": ["sev1", "sev2"]}}}


@pytest.mark.parametrize("content, finish, final, schema, result, ok, detail", [
    pytest.param("Tracking ZX-12345.", "stop", FinalSpec(uses_result=("tracking_code",)), None,
                 {"tracking_code": "ZX-12345"}, True, "meets", id="uses-result"),
    pytest.param("It has shipped.", "stop", FinalSpec(uses_result=("tracking_code",)), None,
                 {"tracking_code": "ZX-12345"}, False, "does not use the tool result", id="ignores-result"),
    pytest.param("", "stop", FinalSpec(), None, None, False, "empty", id="empty"),
    pytest.param("Partial answ", "length", FinalSpec(), None, None, False, "max_tokens", id="cut"),
    pytest.param('{"severity": "sev2"}', "stop", FinalSpec(), SCHEMA, None, True, "schema-valid", id="structured"),
    pytest.param('{"severity": "sev9"}', "stop", FinalSpec(), SCHEMA, None, False, "breaks its schema",
                 id="structured-bad-enum"),
    pytest.param('```json\n{"severity": "sev2"}\n```', "stop", FinalSpec(), SCHEMA, None, False, "not JSON",
                 id="structured-fenced"),
    pytest.param("<|open|>tools<|sep|>", "stop", FinalSpec(), None, None, False, "markup", id="markup"),
    pytest.param("light RAIN today", "stop", FinalSpec(contains_any=("light rain",)), None, None, True, "meets",
                 id="contains-any-case-insensitive"),
])
def test_final_answer_check(content, finish, final, schema, result, ok, detail):
    o = C.check_final(content, finish, final, schema, result)
    assert o.passed is ok and detail in o.detail


FALLBACK = FallbackSpec(max_retries=1, acknowledge_any=("timed out", "unavailable"), must_not_contain=("light rain",))


@pytest.mark.parametrize("calls, content, retries, ok, detail", [
    pytest.param([], "The weather service timed out; shall I try again?", 0, True, "acknowledges", id="ack"),
    pytest.param([call()], None, 0, True, "retried", id="retry"),
    pytest.param([call()], None, 1, False, "beyond", id="retry-loop"),
    pytest.param([call(name="lookup_order")], None, 0, False, "instead", id="other-tool"),
    pytest.param([], "It is 7 degrees with light rain.", 0, False, "although the tool failed", id="invented"),
    pytest.param([], "Sure, here you go.", 0, False, "does not acknowledge", id="ignores-error"),
])
def test_tool_error_fallback_check(calls, content, retries, ok, detail):
    o = C.check_fallback(calls, content, "get_weather", FALLBACK, retries)
    assert o.passed is ok and detail in o.detail


SENT = {"error": "weather service timed out", "code": "UPSTREAM_TIMEOUT", "retryable": True}


@pytest.mark.parametrize("content, ok, detail", [
    pytest.param("According to the tool result, " + json.dumps(SENT), False, "only echoes", id="echo-of-the-json"),
    pytest.param("Weather service timed out.", False, "only echoes", id="echo-of-the-message"),
    pytest.param("The weather service timed out, so the forecast is unavailable for now.", True, "own words",
                 id="quotes-the-error-and-says-more"),
    pytest.param("The lookup timed out on their side; I will not guess.", True, "own words", id="own-words"),
    pytest.param("Sure, here you go.", False, "does not acknowledge", id="ignores-error"),
])
def test_a_fallback_is_judged_on_the_models_own_words(content, ok, detail):
    """The attack: the reply echoed the tool error the kit sent, and the echo held the acknowledgement words."""
    o = C.check_fallback([], content, "get_weather", FALLBACK, 0, sent=SENT)
    assert o.passed is ok and detail in o.detail, o.detail


def test_own_words_removes_copied_runs_and_codes():
    assert C.own_words("Code UPSTREAM_TIMEOUT, sorry.", SENT) == "Code  … , sorry."
    assert C.own_words("the weather service timed out", SENT).split() == ["the"] + ["…"] * 4
    assert C.own_words("it timed out", SENT) == "it timed out"  # two shared words are vocabulary, not an echo
    assert C.own_words("anything", None) == "anything"


def test_the_emulated_model_acknowledges_a_failed_tool_in_its_own_words():
    from k3lib.emulator.replies import FAILED_TOOL_ANSWER, tool_failed

    assert tool_failed(json.dumps(SENT)) and tool_failed("Error: upstream down") and not tool_failed('{"temp": 7}')
    o = C.check_fallback([], FAILED_TOOL_ANSWER, "get_weather", load_sample().cases[3].turns[0].fallback, 0,
                         sent=SENT)
    assert o.passed, o.detail


@pytest.mark.parametrize("status, message, kind", [
    pytest.param(400, 'HTTP 400 BadRequestError from x: "auto" tool choice requires --enable-auto-tool-choice and '
                      "--tool-call-parser to be set", "auto-tool-choice", id="auto"),
    pytest.param(400, 'tool_choice="required" requires --tool-call-parser to be set', "tool-parser", id="required"),
    pytest.param(400, "This model's maximum context length is 4096 tokens", None, id="other-400"),
    pytest.param(500, C.AUTO_TOOL_CHOICE_TEXT, None, id="not-a-400"),
])
def test_environment_refusal_uses_vllm_exact_text(status, message, kind):
    assert C.environment_refusal(status, message) == kind


# -- history sent back, parse of a reply -------------------------------------------------------------------------


def _record(**kw) -> ChatRecord:
    base = dict(request_id="r", url="u", stream=False, wall_anchor_ns=0, perf_anchor_ns=0, enqueued_ns=0,
                http_status=200)
    return ChatRecord(**(base | kw))


def test_assistant_message_goes_back_as_received_non_stream():
    msg = {"role": "assistant", "content": None, "refusal": None, "reasoning_content": "think",
           "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
                           "function": {"name": "get_weather", "arguments": GOOD_ARGS}}]}
    rec = _record(raw_json={"choices": [{"index": 0, "message": msg}]})
    out = assistant_message(rec)
    assert out == {"role": "assistant", "content": None, "reasoning_content": "think",
                   "tool_calls": msg["tool_calls"]}


@pytest.mark.parametrize("field, keys", [
    pytest.param("reasoning", {"reasoning"}, id="reasoning"),
    pytest.param("reasoning_content", {"reasoning_content"}, id="reasoning_content"),
    pytest.param("both", {"reasoning", "reasoning_content"}, id="both"),
])
def test_assistant_message_from_a_stream_keeps_the_reasoning_field_name(field, keys):
    tc = ToolCall(0, "functions.get_weather:0", "function", "get_weather", GOOD_ARGS)
    out = assistant_message(_record(stream=True, reasoning="think", reasoning_field=field, tool_calls=(tc,)))
    assert {k for k in out if k.startswith("reasoning")} == keys
    assert out["tool_calls"][0]["function"]["arguments"] == GOOD_ARGS


def test_parsed_reply_sees_an_object_where_a_string_was_due():
    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"unit": "celsius"}}}]}
    parsed = parsed_reply(_record(raw_json={"choices": [{"index": 0, "message": msg}]}))
    (c,) = parsed["tool_calls"]
    assert c["arguments"] == {"unit": "celsius"} and "not a string" in c["json_error"]


# -- across repetitions ------------------------------------------------------------------------------------------


def _step(level, rep, seq, calls=None, ok=True, leaked=None, checks=()):
    return {"level": level, "repetition": rep, "seq": seq, "case": "c", "turn": 0, "round": seq,
            "reply": {"ok": ok, "http_status": 200 if ok else 500},
            "parsed": {"tool_calls": calls or [], "leaked_markup": leaked}, "checks": list(checks)}


def test_stability_ignores_text_but_not_structure():
    same = [{"name": "get_weather", "parsed": {"location": {"city": "Oslo"}, "unit": "celsius"}}]
    other_city = [{"name": "get_weather", "parsed": {"location": {"city": "Lima"}, "unit": "celsius"}}]
    fewer_keys = [{"name": "get_weather", "parsed": {"location": {"city": "Oslo"}}}]
    steps = [_step(1, 0, 1, same), _step(1, 0, 2), _step(1, 1, 1, other_city), _step(1, 1, 2),
             _step(1, 2, 1, fewer_keys), _step(1, 2, 2), _step(1, 3, 1, leaked="kimi_k3")]
    got = {rep: o for _lvl, rep, o in C.stability_outcomes(steps)}
    assert got[0].passed and got[1].passed
    assert not got[2].passed and not got[3].passed and "markup" in got[3].detail


def test_rates_count_per_level_and_check():
    outs = [(1, C.CheckResult("arguments_valid", True, "")), (1, C.CheckResult("arguments_valid", False, "")),
            (4, C.CheckResult("arguments_valid", True, ""))]
    rows = {(r.level, r.check): r for r in C.rates(outs, [1, 4])}
    assert (rows[(1, "arguments_valid")].passed, rows[(1, "arguments_valid")].total) == (1, 2)
    assert rows[(4, "arguments_valid")].rate == 1.0 and rows[(4, "final_answer")].total == 0
    assert set(r.check for r in rows.values()) == set(C.CHECKS)


def _result(steps, levels=(1,)):
    return AgentResult({"min_pass_rate": 1.0}, {"cases": [{"id": "c", "title": "t"}]},
                       [{"level": lv} for lv in levels], [], steps)


def test_findings_fail_a_check_with_its_counts_and_block_agents():
    bad = {"check": "arguments_valid", "passed": False, "detail": "invalid JSON"}
    good = {"check": "arguments_valid", "passed": True, "detail": "ok"}
    steps = [_step(1, 0, 1, checks=[good]), _step(1, 1, 1, checks=[bad]), _step(1, 2, 1, checks=[good])]
    f = {x.rule: x for x in iter_findings(_result(steps))}
    assert f["agent.arguments_valid"].status == "fail"
    assert "fails 1 of 3" in f["agent.arguments_valid"].message
    assert level_for(f["agent.arguments_valid"])[0] == "limited-observation"
    assert f["agent.arguments_valid"].observed["1"]["total"] == 3
    assert f["agent.final_answer"].status == "not-observable"


def test_environment_refusal_is_an_environment_finding():
    step = _step(1, 0, 1, ok=False) | {"environment": "auto-tool-choice", "tools": ["get_weather"]}
    f = {x.rule: x for x in iter_findings(_result([step]))}
    env = f["agent.auto_tool_choice"]
    assert env.status == "fail" and "auto tool choice not enabled on the server" in env.message
    assert env.evidence["category"] == "environment" and level_for(env)[0] == "environment-rebuild"


def test_failing_reply_is_escaped():
    evil = '<script>alert("x")</script><|open|>tools<|sep|>'
    step = _step(1, 0, 1, checks=[{"check": "no_markup_leak", "passed": False, "detail": "kimi_k3 <u>"}])
    step["reply"]["raw_json"] = {"choices": [{"message": {"content": evil}}]}
    step["parsed"]["content"] = evil
    step["decision"] = "<img src=x onerror=alert(1)>"
    html = FailingReply(step, step["checks"])._repr_html_()
    assert "<script>" not in html and "<img" not in html and "<u>" not in html
    assert "&lt;script&gt;" in html and "&lt;|open|&gt;tools" in html
    assert "No reply failed" in FailingReply(None, [])._repr_html_()
    assert "<script>" not in cases_table(_result([step])).to_html()


def test_public_names_are_sorted_and_exist():
    assert k3lib.agent.__all__ == sorted(k3lib.agent.__all__)
    assert all(hasattr(k3lib.axes.agent, n) for n in k3lib.agent.__all__)


def test_max_clean_concurrency_is_the_agents_traffic_cap():
    ok = {"check": "arguments_valid", "passed": True, "detail": ""}
    bad = {"check": "arguments_valid", "passed": False, "detail": ""}
    steps = [_step(1, 0, 1, checks=[ok]), _step(2, 0, 1, checks=[ok]), _step(4, 0, 1, checks=[bad])]
    assert _result(steps, (1, 2, 4)).max_clean_concurrency() == 2
    assert _result([_step(1, 0, 1, checks=[bad])], (1, 2)).max_clean_concurrency() is None
    refused = _step(1, 0, 1, ok=False) | {"environment": "auto-tool-choice"}
    assert _result([refused], (1,)).max_clean_concurrency() is None


def test_history_kept_names_what_went_missing_and_the_client_mode():
    got = {"role": "assistant", "content": None, "reasoning": "think first",
           "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function",
                           "function": {"name": "lookup_order", "arguments": "{}"}}]}
    whole = C.check_history([(got, history_message(got, "full"))], "full")
    assert whole.passed and whole.check == "history_kept"
    no_reasoning = C.check_history([(got, got), (got, history_message(got, "drop-reasoning"))], "drop-reasoning")
    assert not no_reasoning.passed
    assert no_reasoning.detail == "reply 2 of 2 went back without its reasoning (axes.agent.history: drop-reasoning)"
    no_calls = C.check_history([(got, history_message(got, "drop-tool-calls"))], "drop-tool-calls")
    assert not no_calls.passed and "without its tool calls" in no_calls.detail
    # a reply without reasoning or calls has nothing to lose
    plain = {"role": "assistant", "content": "done"}
    assert C.check_history([(plain, history_message(plain, "drop-reasoning"))], "drop-reasoning").passed
    assert "history_kept" in k3lib.agent.CHECKS
