"""One stream, one reading: the live client and the artifact reader rebuild the same tool calls from the same SSE
bytes, through the kit's one SSE decoder and one tool-call assembler (issue #17: one saw `[get_, f]`, the other
`[get_weatherf]`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3lib.io.chatstream import SSEDecoder, ToolCallAssembler, sse_payloads
from k3lib.io.client import ChatClient
from k3lib.io.readers.tool_reply import classify_tool_reply

MSG = [{"role": "user", "content": "weather?"}]


def ev(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def tc(**call: Any) -> dict[str, Any]:
    return {"tool_calls": [call]}


def stream(*deltas: dict[str, Any]) -> bytes:
    return b"".join([ev({"role": "assistant", "content": ""}), *(ev(d) for d in deltas),
                     ev({}, "tool_calls"), b"data: [DONE]\n\n"])


# The stream of the issue, rebuilt: a server that sends no `index`, streams the first call's name in two pieces,
# and opens the second call with a new `id`. The old client kept the first name piece and dropped the rest
# (`get_`); the old reader keyed index-less deltas by their position in the list, so every delta landed on call 0
# (`get_weatherf`). Read by the OpenAI rules it is two calls, `get_weather` and `f`.
ISSUE_STREAM = stream(
    tc(id="call_1", type="function", function={"name": "get_", "arguments": ""}),
    tc(function={"name": "weather"}),
    tc(function={"arguments": '{"city": '}),
    tc(function={"arguments": '"Oslo"}'}),
    tc(id="call_2", type="function", function={"name": "f", "arguments": "{}"}),
)

# vLLM's own shape (DeltaToolCall): index on every delta, id/type/name on the first, argument fragments after,
# parallel calls interleaved, one call sent whole (kimi_k3).
VLLM_STREAM = stream(
    tc(index=0, id="chatcmpl-tool-a", type="function", function={"name": "get_weather", "arguments": ""}),
    tc(index=1, id="chatcmpl-tool-b", type="function", function={"name": "lookup_order", "arguments": '{"id": '}),
    tc(index=0, function={"arguments": '{"city": '}),
    tc(index=1, function={"arguments": '"A-1"}'}),
    tc(index=0, function={"arguments": '"Lima"}'}),
    tc(index=2, id="chatcmpl-tool-c", type="function", function={"name": "now", "arguments": "{}"}),
)

# Servers that repeat id and the whole name on every delta.
REPEATING_STREAM = stream(
    tc(index=0, id="c", type="function", function={"name": "get_weather", "arguments": '{"city"'}),
    tc(index=0, id="c", function={"name": "get_weather", "arguments": ': "Rome"}'}),
)


def via_client(body: bytes) -> list[tuple[str | None, str | None, str]]:
    async def go() -> Any:
        async def content() -> Any:
            # one read per event, as a server flushes them
            for piece in body.split(b"\n\n"):
                if piece:
                    yield piece + b"\n\n"

        transport = httpx.MockTransport(
            lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=content()))
        async with ChatClient("http://127.0.0.1:9/v1", model="m", transport=transport) as client:
            return await client.chat(MSG)

    rec = asyncio.run(go())
    assert rec.ok and rec.finish_reason == "tool_calls"
    return [(t.id, t.name, t.arguments) for t in rec.tool_calls]


def via_reader(body: bytes) -> list[tuple[str | None, str | None, str]]:
    found = classify_tool_reply(body.decode())
    assert found.source_format == "sse" and found.finish_reason == "tool_calls"
    return [(t.id, t.name, t.arguments) for t in found.tool_calls]


@pytest.mark.parametrize("body, expected", [
    pytest.param(ISSUE_STREAM, [("call_1", "get_weather", '{"city": "Oslo"}'), ("call_2", "f", "{}")],
                 id="issue-17-no-index-name-in-pieces"),
    pytest.param(VLLM_STREAM, [("chatcmpl-tool-a", "get_weather", '{"city": "Lima"}'),
                               ("chatcmpl-tool-b", "lookup_order", '{"id": "A-1"}'),
                               ("chatcmpl-tool-c", "now", "{}")], id="vllm-interleaved-parallel"),
    pytest.param(REPEATING_STREAM, [("c", "get_weather", '{"city": "Rome"}')], id="id-and-name-repeated"),
])
def test_client_and_reader_read_one_stream_the_same(body: bytes, expected: list[tuple[str, str, str]]) -> None:
    assert via_client(body) == expected
    assert via_reader(body) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
                          st.dictionaries(st.from_regex(r"[a-z]{1,5}", fullmatch=True),
                                          st.integers() | st.text(max_size=8), max_size=3)),
                min_size=1, max_size=3),
       st.data())
def test_any_fragmenting_in_vllm_shape_reads_back_whole(calls: list[tuple[str, dict[str, Any]]],
                                                        data: st.DataObject) -> None:
    """Arguments cut anywhere, calls interleaved in any order: both paths give back each call whole."""
    pending: list[list[dict[str, Any]]] = []
    for i, (name, args) in enumerate(calls):
        text = json.dumps(args)
        cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        first = tc(index=i, id=f"id{i}", type="function", function={"name": name, "arguments": ""})
        pending.append([first] + [tc(index=i, function={"arguments": p}) for p in pieces])
    deltas: list[dict[str, Any]] = []
    while any(pending):
        lane = data.draw(st.sampled_from([q for q in pending if q]))
        deltas.append(lane.pop(0))
    body = stream(*deltas)
    expected = [(f"id{i}", name, json.dumps(args)) for i, (name, args) in enumerate(calls)]
    assert via_reader(body) == expected
    assert via_client(body) == expected


def test_an_arguments_object_is_kept_by_the_reader_and_reserialised_by_the_client() -> None:
    asm = ToolCallAssembler()
    asm.feed([{"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}])
    assert asm.calls()[0]["function"]["arguments"] == {"x": 1}
    assert asm.result()[0].arguments == '{"x": 1}'
    asm = ToolCallAssembler()
    asm.feed([{"index": 0, "id": "a", "function": {"name": "f"}}])
    assert asm.calls()[0]["function"]["arguments"] is None and asm.result()[0].arguments == ""


def test_sse_decoder_frames_events_by_the_event_stream_rules() -> None:
    lines = [": keep-alive", "event: message", "data: {\"a\":", "data:1}\r", "", "id: 7", "", "data: [DONE]"]
    assert list(sse_payloads(lines)) == ['{"a":\n1}', "[DONE]"]
    dec = SSEDecoder()
    assert dec.line("data: x") is None and dec.buffered == "x"
    assert dec.line("") == "x" and dec.buffered is None and dec.flush() is None


def test_one_record_type_for_every_path() -> None:
    """The client, the reader and the agent checks hand out the same ToolCall, with the same parse."""
    from k3lib.axes.agent.checks import parse_call
    from k3lib.io.chatstream import ToolCall

    body = stream(tc(index=0, id="a", type="function", function={"name": "f", "arguments": '{"x": [1]}'}))
    reader_call = classify_tool_reply(body.decode()).tool_calls[0]
    agent_call = parse_call(0, {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": [1]}'}})
    assert type(reader_call) is type(agent_call) is ToolCall
    assert reader_call == agent_call and agent_call.parsed == {"x": [1]} and agent_call.json_error is None
    assert ToolCall.model_validate(agent_call.model_dump()) == agent_call
    broken = ToolCall(0, "b", "function", "g", {"x": 1})
    assert broken.arguments_valid_json is False and "not a string" in (broken.json_error or "")
