"""Tool-call reply classifier: real-world replies to their labels, every input shape, markup families, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import real_world_missing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3lib.core.errors import ArtifactError
from k3lib.io.readers.reply_stream import parse_sse_chunks, reassemble_stream
from k3lib.io.readers.tool_markup import detect_markup
from k3lib.io.readers.tool_reply import classify_tool_reply, inspect_tool_reply

REAL_WORLD = Path(__file__).resolve().parents[1].parent / "shared" / "real-world"
LABELS_FILE = REAL_WORLD / "labels.json"
INSPECT_KEYS = {"has_tool_calls", "leaked_markup", "arguments_valid_json", "function_names", "finish_reason",
                "source_format", "truncated", "error"}


def _real_world_cases() -> list:
    if not LABELS_FILE.exists():
        return [real_world_missing(None, None)]
    labels = json.loads(LABELS_FILE.read_text(encoding="utf-8"))
    return [pytest.param(key, value, id=Path(key).name)
            for key, value in sorted(labels.items()) if key.startswith("toolcalls/")]


def _core(got: dict) -> dict:
    """The four fields the real-world labels carry."""
    return {k: got[k] for k in ("has_tool_calls", "leaked_markup", "arguments_valid_json", "function_names")}


@pytest.mark.parametrize(("key", "label"), _real_world_cases())
def test_real_world_reply_matches_labels(key: str, label: dict) -> None:
    got = inspect_tool_reply((REAL_WORLD / key).read_text(encoding="utf-8"))
    assert {k: got[k] for k in label} == label
    assert set(got) == INSPECT_KEYS
    assert got["truncated"] is False and got["error"] is None


def test_request_included_names_unknown_functions(real_world) -> None:
    assert LABELS_FILE.exists(), f"{LABELS_FILE} is missing"
    variants = json.loads((REAL_WORLD / "variants.json").read_text(encoding="utf-8"))["files"]
    checked = []
    for key, info in variants.items():
        expected = info.get("expect", {}).get("unknown_function")
        if key.startswith("toolcalls/") and expected:
            result = classify_tool_reply((REAL_WORLD / key).read_text(encoding="utf-8"))
            assert result.unknown_function_names == (expected,)
            assert result.offered_tools and expected not in result.offered_tools
            checked.append(key)
    assert checked, "variants.json names no tool-call reply with an unknown function: nothing was checked"


# ---------------------------------------------------------------------------------------------------------------
# detect_markup

@pytest.mark.parametrize(("text", "family"), [
    pytest.param("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}"
                 "<|tool_call_end|><|tool_calls_section_end|>", "kimi_k2", id="kimi-k2-section"),
    pytest.param("Let me check.<|tool_call_begin|>functions.f:0", "kimi_k2", id="kimi-k2-call-only"),
    pytest.param('Sure. functions.get_weather:0 {"city": "Oslo"}', "kimi_k2", id="kimi-k2-special-tokens-stripped"),
    pytest.param('<|open|>tools<|sep|><|open|>call tool="python" index="1"<|sep|>', "kimi_k3", id="kimi-k3-xtml"),
    pytest.param('<|open|>call tool="get_weather"<|sep|>', "kimi_k3", id="kimi-k3-call-only"),
    pytest.param('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', "hermes", id="hermes"),
    pytest.param('<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>', "harmony",
                 id="harmony"),
    pytest.param('commentary to=functions.fetch_url json{"url": "x"}', "harmony", id="harmony-tokens-stripped"),
    pytest.param('[TOOL_CALLS] [{"name": "f", "arguments": {}}]', "mistral", id="mistral"),
    pytest.param('<tool_call>{"name": "f"}</tool_call> then [TOOL_CALLS]', "hermes", id="earliest-family-wins"),
    pytest.param('{"name": "get_weather", "parameters": {"city": "Quito"}}', None, id="bare-json-is-not-markup"),
    pytest.param("The functions module has 3 tools; call me at 10:30.", None, id="prose"),
    pytest.param("Use <b>bold</b> and a [link](x).", None, id="html-and-markdown"),
    pytest.param("", None, id="empty"),
    pytest.param(None, None, id="none"),
])
def test_detect_markup(text: str | None, family: str | None) -> None:
    assert detect_markup(text) == family


# ---------------------------------------------------------------------------------------------------------------
# Input shapes


def _completion(message: dict, finish: str = "tool_calls") -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}]}


def _call(name: str, arguments, idx: int = 0) -> dict:
    return {"id": f"call-{idx}", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(("message", "expected"), [
    pytest.param({"content": None, "tool_calls": [_call("f", '{"a": 1}')]},
                 {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": True,
                  "function_names": ["f"]}, id="one-valid-call"),
    pytest.param({"content": None, "tool_calls": [_call("f", '{"a": 1}'), _call("g", '{"b":', 1)]},
                 {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": False,
                  "function_names": ["f", "g"]}, id="one-of-two-truncated"),
    pytest.param({"content": None, "tool_calls": [_call("f", {"a": 1})]},
                 {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": False,
                  "function_names": ["f"]}, id="arguments-object-breaks-contract"),
    pytest.param({"content": None, "tool_calls": [_call("f", "")]},
                 {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": False,
                  "function_names": ["f"]}, id="arguments-empty-string"),
    pytest.param({"content": None, "tool_calls": [_call("f", None)]},
                 {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": False,
                  "function_names": ["f"]}, id="arguments-missing"),
    pytest.param({"content": "", "tool_calls": [], "reasoning": "I will call <tool_call>{\"name\": \"f\"}"},
                 {"has_tool_calls": False, "leaked_markup": "hermes", "arguments_valid_json": None,
                  "function_names": []}, id="leak-in-reasoning"),
    pytest.param({"content": None, "reasoning_content": "<|tool_calls_section_begin|>"},
                 {"has_tool_calls": False, "leaked_markup": "kimi_k2", "arguments_valid_json": None,
                  "function_names": []}, id="leak-in-reasoning-content"),
    pytest.param({"content": None, "tool_calls": [_call("<|channel|>commentary", "{}")]},
                 {"has_tool_calls": True, "leaked_markup": "harmony", "arguments_valid_json": True,
                  "function_names": ["<|channel|>commentary"]}, id="leak-in-function-name"),
    pytest.param({"content": "It is 12 degrees in Oslo."},
                 {"has_tool_calls": False, "leaked_markup": None, "arguments_valid_json": None,
                  "function_names": []}, id="plain-answer"),
    pytest.param({"content": [{"type": "text", "text": "[TOOL_CALLS] [...]"}]},
                 {"has_tool_calls": False, "leaked_markup": "mistral", "arguments_valid_json": None,
                  "function_names": []}, id="content-parts"),
    pytest.param({"content": None, "function_call": {"name": "legacy", "arguments": "{}"}},
                 {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": True,
                  "function_names": ["legacy"]}, id="legacy-function-call"),
])
def test_message_shapes(message: dict, expected: dict) -> None:
    body = _completion(message)
    assert _core(classify_tool_reply(body).as_dict()) == expected
    assert _core(inspect_tool_reply(json.dumps(body))) == expected


def _chunk(delta: dict, finish: str | None = None, index: int = 0) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


STREAM = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}),
    _chunk({"tool_calls": [{"index": 1, "id": "c1", "type": "function",
                            "function": {"name": "lookup_order", "arguments": "{\"order_id\": "}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}),
    _chunk({"tool_calls": [{"index": 1, "function": {"arguments": "\"A-12345\"}"}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]}),
    _chunk({}, finish="tool_calls"),
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": {"completion_tokens": 9}},
]


def test_reassemble_stream_interleaved_parallel_calls() -> None:
    completion = reassemble_stream(STREAM)
    message = completion["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather", "lookup_order"]
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"city": "Oslo"}, {"order_id": "A-12345"}]
    assert [c["id"] for c in message["tool_calls"]] == ["c0", "c1"]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert completion["usage"] == {"completion_tokens": 9}


def test_reassemble_stream_name_repeated_in_every_delta_is_not_doubled() -> None:
    chunks = [_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{\"a\""}}]}),
              _chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]})]
    [call] = reassemble_stream(chunks)["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "f", "arguments": "{\"a\": 1}"}


def _sse(chunks: list[dict], eol: str = "\n", blank: bool = True) -> str:
    sep = eol + eol if blank else eol
    return sep.join(f"data: {json.dumps(c)}" for c in chunks) + sep + "data: [DONE]" + sep


EXPECTED_STREAM = {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": True,
                   "function_names": ["get_weather", "lookup_order"]}


@pytest.mark.parametrize("artifact", [
    pytest.param(_sse(STREAM), id="sse"),
    pytest.param(_sse(STREAM, eol="\r\n"), id="sse-crlf"),
    pytest.param(_sse(STREAM, blank=False), id="sse-no-blank-lines"),
    pytest.param("```\n$ curl -N http://127.0.0.1:8000/v1/chat/completions -d @req.json\n" + _sse(STREAM) + "```\n",
                 id="sse-in-markdown-fence-with-prompt"),
    pytest.param(": keep-alive\nevent: message\n" + _sse(STREAM), id="sse-comments-and-events"),
    pytest.param(_sse(STREAM) + 'data: {"id": "chatcmpl-1", "choi', id="sse-cut-mid-chunk"),
    pytest.param(json.dumps(STREAM), id="json-array-of-chunks"),
    pytest.param("\n".join(json.dumps(c) for c in STREAM), id="jsonl-chunks"),
    pytest.param(STREAM, id="list-of-chunk-dicts"),
])
def test_stream_shapes(artifact) -> None:
    result = classify_tool_reply(artifact)
    assert _core(result.as_dict()) == EXPECTED_STREAM
    assert result.finish_reason == "tool_calls"


def test_stream_with_leaked_markup_in_content_deltas() -> None:
    chunks = [_chunk({"role": "assistant", "content": "<|tool_calls_"}),
              _chunk({"content": "section_begin|><|tool_call_begin|>functions.f:0"}),
              _chunk({}, finish="stop")]
    assert _core(classify_tool_reply(_sse(chunks)).as_dict()) == {
        "has_tool_calls": False, "leaked_markup": "kimi_k2", "arguments_valid_json": None, "function_names": []}


def test_parse_sse_chunks_skips_done_comments_and_garbage() -> None:
    text = ': ping\n\ndata: {"a": 1}\n\ndata: [DONE]\n\ndata: not json\n\n'
    assert parse_sse_chunks(text) == [{"a": 1}]


SDK_REPR = (
    "ChatCompletion(id='chatcmpl-9', choices=[Choice(finish_reason='tool_calls', index=0, logprobs=None, "
    "message=ChatCompletionMessage(content=None, refusal=None, role='assistant', annotations=None, audio=None, "
    "function_call=None, tool_calls=[ChatCompletionMessageFunctionToolCall(id='functions.get_weather:0', "
    "function=Function(arguments='{\"city\": \"Oslo\"}', name='get_weather'), type='function')], "
    "reasoning_content=None), stop_reason=None)], created=1, model='m', object='chat.completion', "
    "service_tier=None, system_fingerprint=None, usage=CompletionUsage(completion_tokens=5, prompt_tokens=9, "
    "total_tokens=14, completion_tokens_details=None, prompt_tokens_details=None))"
)


@pytest.mark.parametrize("artifact", [
    pytest.param(SDK_REPR, id="sdk-repr"),
    pytest.param(">>> print(resp)\n" + SDK_REPR + "\n", id="sdk-repr-after-prompt"),
    pytest.param("```python\n" + SDK_REPR + "\n```", id="sdk-repr-in-fence"),
    pytest.param(repr(json.loads(json.dumps(_completion(
        {"content": None, "tool_calls": [_call("get_weather", '{"city": "Oslo"}')]})))), id="python-dict-repr"),
    pytest.param("response:\n" + json.dumps(_completion(
        {"content": None, "tool_calls": [_call("get_weather", '{"city": "Oslo"}')]}), indent=2), id="labelled-json"),
    pytest.param(json.dumps({"request": {"tools": [{"type": "function", "function": {"name": "get_weather"}}]},
                             "response": _completion({"content": None, "tool_calls": [
                                 _call("get_weather", '{"city": "Oslo"}')]})}), id="request-response-pair"),
    pytest.param("\r\n".join(json.dumps(_completion(
        {"content": None, "tool_calls": [_call("get_weather", '{"city": "Oslo"}')]}), indent=2).split("\n")),
        id="crlf-json"),
])
def test_other_text_shapes(artifact: str) -> None:
    assert _core(inspect_tool_reply(artifact)) == {"has_tool_calls": True, "leaked_markup": None,
                                            "arguments_valid_json": True, "function_names": ["get_weather"]}


def test_sdk_chunk_reprs_one_per_line_are_a_stream() -> None:
    lines = [
        "ChatCompletionChunk(id='c', choices=[Choice(delta=ChoiceDelta(content=None, role='assistant', "
        "tool_calls=[ChoiceDeltaToolCall(index=0, id='x', function=ChoiceDeltaToolCallFunction(arguments='', "
        "name='f'), type='function')]), finish_reason=None, index=0)], created=1, model='m', "
        "object='chat.completion.chunk')",
        "ChatCompletionChunk(id='c', choices=[Choice(delta=ChoiceDelta(content=None, tool_calls=["
        "ChoiceDeltaToolCall(index=0, id=None, function=ChoiceDeltaToolCallFunction(arguments='{\"a\": 1}', "
        "name=None), type=None)]), finish_reason='tool_calls', index=0)], created=1, model='m', "
        "object='chat.completion.chunk')",
    ]
    result = classify_tool_reply("\n".join(lines))
    assert result.source_format == "sdk_repr"
    assert _core(result.as_dict()) == {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": True,
                                "function_names": ["f"]}
    assert result.tool_calls[0].parsed == {"a": 1}


def test_sdk_object_with_model_dump() -> None:
    class FakeCompletion:
        def model_dump(self) -> dict:
            return _completion({"content": "<|open|>tools<|sep|>"}, finish="stop")

    result = classify_tool_reply(FakeCompletion())
    assert result.leaked_markup == "kimi_k3" and result.leak_location == "content"


def test_tool_call_records_keep_parsed_arguments_and_errors() -> None:
    result = classify_tool_reply(_completion({"content": None, "tool_calls": [
        _call("f", '{"a": [1, 2]}'), _call("g", '{"a": ', 1)]}))
    first, second = result.tool_calls
    # the kit's one tool-call record (k3lib.io.chatstream.ToolCall): the agent checks read the same fields
    assert first.parsed == {"a": [1, 2]} and first.json_error is None and first.arguments_valid_json is True
    assert second.parsed is None and "invalid JSON" in (second.json_error or "")
    assert second.arguments_valid_json is False
    assert result.offered_tools is None and result.unknown_function_names == ()


@pytest.mark.parametrize("artifact", [
    pytest.param("", id="empty"),
    pytest.param("hello world", id="prose"),
    pytest.param('{"object": "list", "data": []}', id="json-without-choices"),
    pytest.param("INFO 01-01 00:00:00 [x.py:1] vLLM API server version 0.10.2", id="a-log-line"),
    pytest.param(None, id="none"),
    pytest.param(42, id="int"),
])
def test_not_a_reply_is_an_artifact_error(artifact) -> None:
    with pytest.raises(ArtifactError):
        classify_tool_reply(artifact)


# ---------------------------------------------------------------------------------------------------------------
# Fuzzing: only ArtifactError may escape

def _never_crashes(value) -> None:
    try:
        got = inspect_tool_reply(value) if isinstance(value, str) else classify_tool_reply(value).as_dict()
    except ArtifactError:
        return
    assert set(got) == INSPECT_KEYS
    assert got["has_tool_calls"] in (True, False, None)
    assert got["arguments_valid_json"] in (True, False, None)
    if not got["has_tool_calls"]:
        assert got["arguments_valid_json"] is None and got["function_names"] == []
    if got["has_tool_calls"] is None:
        assert got["truncated"] is True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises_anything_but_artifact_error(text: str) -> None:
    _never_crashes(text)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10)
    | st.sampled_from(["<tool_call>", "[TOOL_CALLS]", "{\"a\": 1}", "{"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["choices", "message", "delta", "tool_calls", "function", "name", "arguments", "index",
                         "content", "reasoning", "id", "type", "response", "request", "tools", "object",
                         "finish_reason", "role"]), children, max_size=5),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSONISH)
def test_arbitrary_json_values_never_raise_anything_but_artifact_error(value) -> None:
    _never_crashes(value)
    _never_crashes(json.dumps(value))


# ---------------------------------------------------------------------------------------------------------------
# Responses API (issue 18): a whole reply as JSON, and streaming events as SSE

_RESPONSE_EVENTS = [
    {"type": "response.output_item.added", "output_index": 0,
     "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": "{\"city\":"},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": " \"Oslo\"}"},
]


def test_responses_reply_as_json() -> None:
    body = {"id": "resp_1", "object": "response", "status": "completed", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": "{\"city\": \"Oslo\"}", "status": "completed"}]}
    got = inspect_tool_reply(json.dumps(body))
    assert _core(got) == {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": True,
                          "function_names": ["get_weather"]}
    assert got["truncated"] is False


def test_responses_events_as_sse_whole_and_cut() -> None:
    sse = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in _RESPONSE_EVENTS)
    whole = inspect_tool_reply(sse)
    assert (whole["arguments_valid_json"], whole["truncated"], whole["function_names"]) == (True, False,
                                                                                           ["get_weather"])
    cut = inspect_tool_reply(sse + 'event: response.function_call_arguments.delta\ndata: {"type": "response.fu')
    # The stream ends inside an event: the arguments so far cannot be judged, the call and its name are known.
    assert (cut["has_tool_calls"], cut["arguments_valid_json"], cut["truncated"]) == (True, None, True)


@pytest.mark.parametrize(("artifact", "expected"), [
    pytest.param("ResponseCompletedEvent(response=Response(id='resp_1', created_at=1.0, model='m', object='response', "
                 "output=[ResponseFunctionToolCall(arguments='{\"q\": 1}', call_id='call_1', name='search', "
                 "type='function_call', id='fc_1', status='completed')], status='completed'), sequence_number=9, "
                 "type='response.completed')",
                 {"has_tool_calls": True, "leaked_markup": None, "arguments_valid_json": True,
                  "function_names": ["search"]}, id="completed-event-alone"),
    pytest.param("Response(id='resp_1', created_at=1.0, model='m', object='response', output=[ResponseOutputMessage("
                 "id='msg_1', content=[ResponseOutputText(annotations=[], text='<tool_call>{\"name\": \"x\"}"
                 "</tool_call>', type='output_text')], role='assistant', status='completed', type='message')], "
                 "status='completed')",
                 {"has_tool_calls": False, "leaked_markup": "hermes", "arguments_valid_json": None,
                  "function_names": []}, id="response-repr-with-markup-in-text"),
])
def test_responses_sdk_reprs(artifact: str, expected: dict) -> None:
    assert _core(inspect_tool_reply(artifact)) == expected
