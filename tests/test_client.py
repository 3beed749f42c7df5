"""Chat client: error shapes, broken streams, tool-call reassembly, key hygiene (MockTransport), and timing
through a real socket to a known-timing server."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import socket
import statistics
import time
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from k3lib.io.knowntiming import KnownTimingConfig, KnownTimingServer
from k3lib.io.client import (
    ChatClient,
    SyncChatClient,
    ToolCallAssembler,
    aprobe_endpoint,
    parse_error_body,
    probe_endpoint,
    record_of,
    root_url,
    run_sync,
)
from k3lib.core.errors import APIError, BadInputError, ProtocolError, TargetUnreachable

MSG = [{"role": "user", "content": "hello"}]


# -- helpers ----------------------------------------------------------------------------------------------


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chunk(delta: dict[str, Any] | None = None, *, finish: str | None = None, usage: Any = None,
          choices: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
                           "system_fingerprint": "vllm-0.33.0-tp8-abcd1234"}
    out["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    if usage is not None:
        out["usage"] = usage
    return out


USAGE = {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16,
         "prompt_tokens_details": {"cached_tokens": 0}}


def stream_transport(parts: list[bytes | Exception], *, status: int = 200,
                     seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    async def body() -> AsyncIterator[bytes]:
        for p in parts:
            if isinstance(p, Exception):
                raise p
            yield p

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(status, headers={"content-type": "text/event-stream"}, content=body())

    return httpx.MockTransport(handler)


def json_transport(status: int, content: bytes, ctype: str = "application/json") -> httpx.MockTransport:
    return httpx.MockTransport(lambda r: httpx.Response(status, headers={"content-type": ctype}, content=content))


def client_with(transport: httpx.AsyncBaseTransport, **kw: Any) -> ChatClient:
    return ChatClient("http://127.0.0.1:9/v1", model="m", transport=transport, **kw)


def run(coro_factory: Callable[[], Any]) -> Any:
    return asyncio.run(coro_factory())


GOOD_STREAM = [sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "Hel"})),
               sse(chunk({"content": "lo"})), sse(chunk(finish="stop")), sse(chunk(usage=USAGE, choices=False)),
               b"data: [DONE]\n\n"]


# -- happy path over MockTransport ------------------------------------------------------------------------


def test_stream_fields_and_usage_request() -> None:
    seen: list[httpx.Request] = []
    rec = run(lambda: client_with(stream_transport(GOOD_STREAM, seen=seen)).chat(MSG, max_tokens=5))
    body = json.loads(seen[0].content)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "m" and body["max_tokens"] == 5
    assert rec.ok and rec.http_status == 200
    assert rec.content == "Hello" and rec.finish_reason == "stop"
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (7, 9, 0)
    assert rec.system_fingerprint == "vllm-0.33.0-tp8-abcd1234" and rec.model == "m"
    assert rec.chunk_count == 5 and len(rec.output_chunk_ns) == 2 and len(rec.itl_ms) == 1
    assert rec.raw_lines[-1] == "[DONE]" and len(rec.raw_lines) == 6
    assert rec.ttft_ms is not None and rec.e2e_ms is not None and rec.e2e_ms >= rec.ttft_ms >= 0
    d = rec.model_dump()
    assert json.loads(json.dumps(d))["content"] == "Hello"
    assert d["ttft_ms"] == rec.ttft_ms and d["itl_ms"] == list(rec.itl_ms)


def test_sse_tolerates_comments_crlf_and_multiline_data() -> None:
    parts = [b": keep-alive\r\n\r\n", b"event: message\r\ndata: " + json.dumps(chunk({"content": "a"})).encode()
             + b"\r\n\r\n", b'data: {"id":"x","object":"chat.completion.chunk",\ndata: "choices":[{"index":0,'
             b'"delta":{"content":"b"}}]}\n\n', sse(chunk(usage=USAGE, choices=False)), b"data:[DONE]\n\n"]
    rec = run(lambda: client_with(stream_transport(parts)).chat(MSG))
    assert rec.ok and rec.content == "ab" and rec.completion_tokens == 9


@pytest.mark.parametrize("usage, expected", [
    pytest.param({"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": None}, None,
                 id="details-null-vllm-0.22"),
    pytest.param({"prompt_tokens": 3, "completion_tokens": 1}, None, id="details-absent"),
    pytest.param({"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}, 0,
                 id="zero-vllm-0.24"),
    pytest.param({"prompt_tokens": 300, "completion_tokens": 1,
                  "prompt_tokens_details": {"cached_tokens": 256}}, 256, id="hit"),
])
def test_cached_tokens_null_is_not_zero(usage: dict[str, Any], expected: int | None) -> None:
    parts = [sse(chunk({"content": "x"})), sse(chunk(usage=usage, choices=False)), b"data: [DONE]\n\n"]
    rec = run(lambda: client_with(stream_transport(parts)).chat(MSG))
    assert rec.cached_tokens == expected


@pytest.mark.parametrize("deltas, text, field", [
    pytest.param([{"reasoning_content": "th"}, {"reasoning_content": "ink"}], "think", "reasoning_content",
                 id="vllm-0.10-reasoning_content"),
    pytest.param([{"reasoning": "th"}, {"reasoning": "ink"}], "think", "reasoning", id="vllm-0.16-reasoning"),
    pytest.param([{"reasoning": "th", "reasoning_content": "th"}, {"reasoning": "ink", "reasoning_content": "ink"}],
                 "think", "both", id="vllm-0.12-both"),
])
def test_reasoning_field_names(deltas: list[dict[str, Any]], text: str, field: str) -> None:
    parts = [sse(chunk(d)) for d in deltas] + [sse(chunk({"content": "ok"})), b"data: [DONE]\n\n"]
    rec = run(lambda: client_with(stream_transport(parts)).chat(MSG))
    assert (rec.reasoning, rec.reasoning_field, rec.content) == (text, field, "ok")
    assert rec.first_reasoning_ns is not None and rec.first_reasoning_ns < rec.first_content_ns
    assert rec.ttft_ms == pytest.approx((rec.first_reasoning_ns - rec.sent_ns) / 1e6)


def test_tool_call_deltas_reassembled_over_stream() -> None:
    tc = [
        {"tool_calls": [{"index": 0, "id": "functions.get_weather:0", "type": "function",
                         "function": {"name": "get_weather", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
        {"tool_calls": [{"index": 1, "id": "functions.get_time:1", "type": "function",
                         "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}}]},  # whole at once
        {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]},
    ]
    parts = [sse(chunk(d)) for d in tc] + [sse(chunk(finish="tool_calls")), b"data: [DONE]\n\n"]
    rec = run(lambda: client_with(stream_transport(parts)).chat(MSG))
    assert rec.finish_reason == "tool_calls" and rec.content is None
    assert [(t.index, t.id, t.name, t.arguments) for t in rec.tool_calls] == [
        (0, "functions.get_weather:0", "get_weather", '{"city": "Oslo"}'),
        (1, "functions.get_time:1", "get_time", '{"tz": "UTC"}')]
    assert rec.first_tool_call_ns is not None and rec.ttft_ms is not None
    assert rec.tool_calls[0].to_openai()["function"]["arguments"] == '{"city": "Oslo"}'


@pytest.mark.parametrize("deltas, expected", [
    pytest.param([{"id": "a", "function": {"name": "f", "arguments": "{"}}, {"function": {"arguments": "}"}}],
                 [("a", "f", "{}")], id="no-index-continues-last"),
    pytest.param([{"id": "a", "function": {"name": "f", "arguments": "{}"}},
                  {"id": "b", "function": {"name": "g", "arguments": "[]"}}],
                 [("a", "f", "{}"), ("b", "g", "[]")], id="no-index-new-id-opens-call"),
    pytest.param([{"index": 0, "id": "a", "type": "function", "function": {"name": "f"}},
                  {"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":1}'}}],
                 [("a", "f", '{"x":1}')], id="repeated-id-and-name-not-duplicated"),
])
def test_tool_call_assembler(deltas: list[dict[str, Any]], expected: list[tuple[str, str, str]]) -> None:
    asm = ToolCallAssembler()
    for d in deltas:
        asm.feed([d])
    assert [(t.id, t.name, t.arguments) for t in asm.result()] == expected


def test_non_stream_reply_parsed_and_kept_raw() -> None:
    reply = {"id": "chatcmpl-9", "object": "chat.completion", "model": "m", "system_fingerprint": None,
             "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                 "role": "assistant", "content": None, "reasoning": "need weather",
                 "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": '{"city": "Lima"}'}}]}}],
             "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15,
                       "prompt_tokens_details": None}}
    rec = run(lambda: client_with(json_transport(200, json.dumps(reply).encode())).chat(MSG, stream=False))
    assert rec.ok and not rec.stream and rec.raw_json == reply
    assert rec.ttft_ms is None and rec.e2e_ms is not None and rec.itl_ms == ()
    assert rec.tool_calls[0].name == "get_weather" and rec.tool_calls[0].arguments == '{"city": "Lima"}'
    assert (rec.reasoning, rec.reasoning_field, rec.cached_tokens, rec.completion_tokens) == \
        ("need weather", "reasoning", None, 4)


# -- error bodies -----------------------------------------------------------------------------------------

ERROR_BODIES = [
    pytest.param(400, b'{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}',
                 "too long", "BadRequestError", None, id="flat-vllm-0.10.0"),
    pytest.param(400, b'{"error":{"message":"bad tool","type":"BadRequestError","param":"tools","code":400}}',
                 "bad tool", "BadRequestError", "tools", id="nested-vllm-0.10.1+"),
    pytest.param(401, b'{"error":"Unauthorized"}', "Unauthorized", None, None, id="auth-401"),
    pytest.param(404, b'{"detail":"Not Found"}', "Not Found", None, None, id="fastapi-detail"),
    pytest.param(502, b"<html><body>502 Bad Gateway</body></html>", "non-JSON error body: <html><body>502 Bad",
                 None, None, id="non-json-proxy"),
    pytest.param(500, b"", "empty error body", None, None, id="empty"),
]


@pytest.mark.parametrize("status, body, message, etype, param", ERROR_BODIES)
def test_error_shapes_become_one_api_error(status: int, body: bytes, message: str, etype: str | None,
                                           param: str | None) -> None:
    client = client_with(json_transport(status, body, "application/json" if body[:1] == b"{" else "text/html"))
    with pytest.raises(APIError) as info:
        run(lambda: client.chat(MSG))
    exc = info.value
    assert exc.status == status and exc.type == etype and exc.param == param
    assert exc.message.startswith(message)
    assert exc.url == "http://127.0.0.1:9/v1/chat/completions"
    rec = record_of(exc)
    assert rec is not None and rec.http_status == status and rec.error_kind == "APIError" and not rec.ok
    # non-strict: the same failure as a value
    rec2 = run(lambda: client.chat(MSG, strict=False))
    assert (rec2.error_kind, rec2.http_status, rec2.api_error_type, rec2.api_error_param) == \
        ("APIError", status, etype, param)


def test_parse_error_body_is_pure() -> None:
    err = parse_error_body(400, '{"error":{"message":"m","type":"T","param":null,"code":400}}', url="u")
    assert (err.status, err.message, err.type, err.param, err.url) == (400, "m", "T", None, "u")


def test_error_event_inside_a_200_stream() -> None:
    parts = [sse(chunk({"content": "par"})),
             sse({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}),
             b"data: [DONE]\n\n"]
    with pytest.raises(APIError) as info:
        run(lambda: client_with(stream_transport(parts)).chat(MSG))
    assert info.value.status == 500 and "engine died" in info.value.message
    rec = record_of(info.value)
    assert rec is not None and rec.content == "par" and rec.http_status == 200


# -- broken streams keep their partial record -------------------------------------------------------------

BROKEN = [
    pytest.param([sse(chunk({"content": "Hel"})), sse(chunk({"content": "lo"}))], "without `data: [DONE]`",
                 id="truncated-no-done"),
    pytest.param([sse(chunk({"content": "Hel"})), sse(chunk({"content": "lo"})), b'data: {"choices": [\n\n'],
                 "invalid JSON", id="invalid-json"),
    pytest.param([sse(chunk({"content": "Hel"})), sse(chunk({"content": "lo"})),
                  httpx.RemoteProtocolError("peer closed connection without sending complete message body")],
                 "broke mid-reply", id="mid-stream-disconnect"),
    pytest.param([sse(chunk({"content": "Hel"})), sse(chunk({"content": "lo"})), httpx.ReadError("reset")],
                 "broke mid-reply", id="read-error"),
]


@pytest.mark.parametrize("parts, needle", BROKEN)
def test_broken_stream_is_protocol_error_with_partial_record(parts: list[Any], needle: str) -> None:
    client = client_with(stream_transport(parts))
    with pytest.raises(ProtocolError) as info:
        run(lambda: client.chat(MSG))
    assert needle in str(info.value)
    rec = record_of(info.value)
    assert rec is not None and rec.content == "Hello" and len(rec.output_chunk_ns) == 2
    assert rec.error_kind == "ProtocolError" and not rec.ok and rec.done_ns is not None
    lenient = run(lambda: client_with(stream_transport(parts)).chat(MSG, strict=False))
    assert lenient.content == "Hello" and lenient.error_kind == "ProtocolError" and needle in lenient.error


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_target_unreachable() -> None:
    client = ChatClient(f"http://127.0.0.1:{free_port()}", model="m", connect_timeout_s=2)
    with pytest.raises(TargetUnreachable, match="cannot connect"):
        run(lambda: client.chat(MSG))
    rec = run(lambda: client.chat(MSG, strict=False))
    assert rec.error_kind == "TargetUnreachable" and rec.http_status is None and rec.ttft_ms is None


def test_timeout_before_first_byte_is_target_unreachable() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200)

    client = client_with(httpx.MockTransport(handler))
    t0 = time.perf_counter()
    with pytest.raises(TargetUnreachable, match="within 0.2 s") as info:
        run(lambda: client.chat(MSG, timeout_s=0.2))
    assert time.perf_counter() - t0 < 5
    assert record_of(info.value).error_kind == "Timeout"


def test_stall_after_first_byte_is_protocol_error_with_partial() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield sse(chunk({"content": "a"}))
        await asyncio.sleep(30)
        yield b"data: [DONE]\n\n"

    client = client_with(httpx.MockTransport(
        lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())))
    rec = run(lambda: client.chat(MSG, timeout_s=0.3, strict=False))
    assert rec.error_kind == "Timeout" and rec.content == "a" and not rec.cancelled


def test_multi_megabyte_event_and_body_pass_whole() -> None:
    big = "y" * (6 * 1024 * 1024)
    line = sse(chunk({"content": big}))
    pieces = [line[i:i + 65536] for i in range(0, len(line), 65536)]  # one event over ~100 reads
    seen: list[httpx.Request] = []
    client = client_with(stream_transport(pieces + [sse(chunk(usage=USAGE, choices=False)), b"data: [DONE]\n\n"],
                                          seen=seen))
    prompt = [{"role": "user", "content": "z" * (4 * 1024 * 1024)}]
    rec = run(lambda: client.chat(prompt))
    assert rec.ok and len(rec.content) == len(big)
    assert len(seen[0].content) > 4 * 1024 * 1024


# -- API key hygiene --------------------------------------------------------------------------------------

SECRET = "sk-k3kit-test-0123456789abcdef"


def test_api_key_sent_but_never_shown(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("K3_TEST_API_KEY", SECRET)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(401, json={"error": "Unauthorized"})

    caplog.set_level(logging.DEBUG)
    client = ChatClient("http://127.0.0.1:9", model="m", api_key_env="K3_TEST_API_KEY",
                        transport=httpx.MockTransport(handler))
    with pytest.raises(APIError) as info:
        run(lambda: client.chat(MSG))
    rec = run(lambda: client.chat(MSG, strict=False))
    assert seen == [f"Bearer {SECRET}"] * 2
    shown = " ".join([repr(client), str(vars(client)), str(info.value), repr(info.value), repr(rec),
                      json.dumps(rec.model_dump(), default=str), caplog.text, repr(SyncChatClient("http://127.0.0.1:9",
                                                                                              api_key_env="K3_TEST_API_KEY"))])
    assert SECRET not in shown
    assert "K3_TEST_API_KEY" in repr(client)


def test_missing_api_key_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("K3_TEST_API_KEY", raising=False)
    with pytest.raises(BadInputError, match="K3_TEST_API_KEY"):
        ChatClient("http://127.0.0.1:9", api_key_env="K3_TEST_API_KEY")


@pytest.mark.parametrize("url, root", [
    pytest.param("http://h:8000/v1/", "http://h:8000", id="v1-slash"),
    pytest.param("http://h:8000", "http://h:8000", id="bare"),
    pytest.param(" https://h/x/v1 ", "https://h/x", id="path-prefix"),
])
def test_root_url(url: str, root: str) -> None:
    assert root_url(url) == root


def test_root_url_without_scheme_is_bad_input() -> None:
    with pytest.raises(BadInputError):
        root_url("localhost:8000")


# -- against a real server over a socket ------------------------------------------------------------------

CHUNKS = 12
KNOWN = KnownTimingConfig(ttft_ms=60.0, itl_ms=15.0, chunks=CHUNKS, tokens_per_chunk=2)


@pytest.fixture(scope="module")
def server() -> Any:
    with KnownTimingServer(KNOWN) as srv:
        yield srv


def test_timing_against_known_server(server: KnownTimingServer) -> None:
    async def go() -> list[Any]:
        async with ChatClient(server.url) as client:
            return [await client.chat(MSG, max_tokens=64) for _ in range(3)]

    recs = run(go)
    for rec in recs:
        assert rec.ok and rec.model == "known-timing"
        # tokens come from usage: 2 tokens per chunk, so the chunk count would be wrong by half
        assert rec.completion_tokens == 2 * CHUNKS and len(rec.output_chunk_ns) == CHUNKS
        assert len(rec.itl_ms) == CHUNKS - 1
        assert rec.ttft_ms == pytest.approx(KNOWN.ttft_ms, abs=25.0)
        assert statistics.median(rec.itl_ms) == pytest.approx(KNOWN.itl_ms, abs=5.0)
        assert rec.e2e_ms >= KNOWN.ttft_ms + (CHUNKS - 1) * KNOWN.itl_ms - 1
        assert rec.client_queue_ms is not None and 0 <= rec.client_queue_ms < 50
        assert rec.tpot_ms == pytest.approx(KNOWN.itl_ms / 2, abs=3.0)
        # the wall anchor maps perf marks onto the epoch
        assert abs(rec.wall_ns(rec.sent_ns) - time.time_ns()) < 60e9


def test_sent_mark_is_when_the_request_goes_onto_the_wire(server: KnownTimingServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # aiohttp writes headers and body together from a task of their own, which runs only after every request
    # started alongside has taken its turn: TTFT runs from that write, not from when a connection was in hand
    from k3lib.io.client import chat as chat_module

    writes: dict[str, list[int]] = {}
    real = chat_module._on_body_sent

    async def spy(session: Any, ctx: Any, params: Any) -> None:
        before = ctx.trace_request_ctx.sent_ns
        await real(session, ctx, params)
        writes.setdefault(ctx.trace_request_ctx.rid, []).append(ctx.trace_request_ctx.sent_ns)
        assert before is not None  # the connection's mark came first; the write moved it
        assert ctx.trace_request_ctx.sent_ns >= before

    monkeypatch.setattr(chat_module, "_on_body_sent", spy)

    async def go() -> list[Any]:
        async with ChatClient(server.url, model="known-timing") as client:
            body = {"messages": MSG, "stream": True, "k3_ttft_ms": 5, "k3_chunks": 2}
            return await asyncio.gather(*(client.chat_body(body, request_id=f"b{i}") for i in range(16)))

    recs = run(go)
    assert sorted(writes) == sorted(r.request_id for r in recs)
    for rec in recs:
        # one body write per request, and the record's mark is the one taken at it
        assert len(writes[rec.request_id]) == 1 and rec.sent_ns == writes[rec.request_id][0]
        assert rec.enqueued_ns <= rec.sent_ns < rec.first_byte_ns


def test_semaphore_wait_is_client_queue(server: KnownTimingServer) -> None:
    async def go() -> list[Any]:
        sem = asyncio.Semaphore(1)
        async with ChatClient(server.url, model="known-timing") as client:
            body = {"messages": MSG, "stream": True, "k3_chunks": 2}
            return await asyncio.gather(*(client.chat_body(body, semaphore=sem) for _ in range(2)))

    a, b = sorted(run(go), key=lambda r: r.client_queue_ms)
    assert a.client_queue_ms < 20
    # the second waited for the whole first request: that wait is queueing, not TTFT
    assert b.client_queue_ms >= KNOWN.ttft_ms + KNOWN.itl_ms - 5
    assert b.ttft_ms == pytest.approx(KNOWN.ttft_ms, abs=25.0)


def test_probe_and_helpers(server: KnownTimingServer) -> None:
    async def go() -> tuple[Any, ...]:
        async with ChatClient(server.url) as client:
            return (await client.probe("/health"), await client.probe("/version"), await client.probe("/nope"),
                    await client.get_json("/v1/models"), await client.tokenize(prompt="one two three"),
                    await client.tokenize(messages=MSG), await client.resolve_model())

    health, version, missing, models, tok_text, tok_chat, model = run(go)
    assert health.ok and health.status == 200 and health.body_text == "" and health.latency_ms > 0
    assert version.json() == {"version": "known-timing"}
    assert not missing.ok and missing.status == 404 and missing.error_kind == "APIError"
    assert models["data"][0]["id"] == model == "known-timing"
    assert tok_text.count == 3 and tok_chat.count == 1 + 3 + 2 and tok_chat.max_model_len == KNOWN.max_model_len
    down = probe_endpoint(f"http://127.0.0.1:{free_port()}/health", timeout_s=2)
    assert down.status is None and down.error_kind == "TargetUnreachable" and not down.ok
    assert set(dataclasses.asdict(health)) >= {"url", "status", "latency_ms", "body_text", "error"}


def test_probe_truncates_body(server: KnownTimingServer) -> None:
    rec = run(lambda: aprobe_endpoint(server.url + "/v1/models", body_limit_chars=10))
    assert rec.body_truncated and len(rec.body_text) == 10 and rec.json() is None


def test_get_json_raises_typed_errors(server: KnownTimingServer) -> None:
    with pytest.raises(APIError) as info:
        run(lambda: ChatClient(server.url).get_json("/nope"))
    assert info.value.status == 404
    with pytest.raises(TargetUnreachable):
        run(lambda: ChatClient(f"http://127.0.0.1:{free_port()}").get_json("/health", timeout_s=2))


def test_sync_client_works_inside_a_running_loop(server: KnownTimingServer) -> None:
    # a Jupyter kernel runs an event loop on the caller's thread: asyncio.run would raise there
    async def notebook_cell() -> tuple[Any, Any]:
        with SyncChatClient(server.url) as sync:
            rec = sync.chat(MSG)
        probe = run_sync(aprobe_endpoint(server.url + "/health"))
        return rec, probe

    rec, probe = run(notebook_cell)
    assert rec.ok and rec.completion_tokens == 2 * CHUNKS and probe.ok
    with SyncChatClient(server.url) as sync:  # and from plain sync code, twice on the same loop
        assert sync.chat(MSG).ok and sync.probe("/health").ok


def test_one_client_serves_two_event_loops(server: KnownTimingServer) -> None:
    client = ChatClient(server.url)
    assert run(lambda: client.chat(MSG, k3_chunks=1)).ok
    assert run(lambda: client.chat(MSG, k3_chunks=1)).ok


def test_what_a_client_opened_on_a_loop_is_closed_when_the_loop_ends(server: KnownTimingServer) -> None:
    # a client's aiohttp session and httpx pools belong to the loop they were made on: an asyncio.run that ends
    # (a notebook cell, run_sync, a load worker) closes them on that loop, aclose or not, and a client dropped
    # while its loop runs is closed on it too; nothing is left for the collector to warn about
    async def dropped_in_a_running_loop() -> bool:
        client = ChatClient(server.url)
        ok = (await client.chat(MSG, k3_chunks=1)).ok
        del client
        gc.collect()
        await asyncio.sleep(0.1)  # the dropped client's close runs on this loop
        return ok

    def two_loops_and_no_aclose() -> None:
        client = ChatClient(server.url)  # no model: the /v1/models look-up goes over the httpx pool
        assert run(lambda: client.chat(MSG, k3_chunks=1)).ok
        assert run(lambda: client.chat(MSG, k3_chunks=1)).ok

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        two_loops_and_no_aclose()
        with SyncChatClient(server.url) as sync:
            assert sync.chat(MSG, k3_chunks=1).ok
        assert run(dropped_in_a_running_loop)
        del sync
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)
                and "unclosed" in str(w.message).lower()]
    assert unclosed == []


def test_external_cancel_attaches_partial_record(server: KnownTimingServer) -> None:
    async def go() -> Any:
        async with ChatClient(server.url) as client:
            task = asyncio.create_task(client.chat(MSG, k3_ttft_ms=10, k3_itl_ms=500, k3_chunks=5))
            await asyncio.sleep(0.3)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError as exc:
                return record_of(exc)
        return None

    rec = run(go)
    assert rec is not None and rec.cancelled and rec.error_kind == "Cancelled"
    assert rec.content is not None and rec.content.startswith(" w0")
