"""Streamed and event-shaped replies into one `chat.completion`-shaped dict: SSE captures framed into chunks,
chunks reassembled (tool-call deltas by the kit's one assembler), and Responses-API replies and events."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, cast

from k3lib.io.chatstream import SSEDecoder, ToolCallAssembler
from k3lib.io.readers._cutjson import CutText
from k3lib.io.shapes import (
    ChatChoice,
    ChatChunk,
    ChatCompletion,
    ChatMessage,
    ResponsesCall,
    ResponsesEvent,
    ToolCallJson,
)

__all__ = ["DONE_CUT", "as_list", "as_mapping", "from_responses", "json_or_none", "parse_sse_chunks",
           "reassemble_stream"]

# The event a reader adds for a Responses stream cut inside its "arguments done" event.
DONE_CUT = "response.function_call_arguments.done(cut)"


def json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_sse_chunks(text: str) -> list[ChatChunk]:
    """The JSON payloads of an SSE capture (`data: {...}` lines); `[DONE]`, comments and cut lines are skipped.

    Framed by the kit's one SSE decoder, made lenient for pastes: lines may be indented, a capture that dropped
    the blank line between events is split where a new `data:` line follows a whole JSON payload, and
    one-JSON-object-per-line captures are read too. A payload that is not JSON (a stream cut mid-chunk) is
    dropped."""
    chunks: list[ChatChunk] = []
    decoder = SSEDecoder()

    def take(payload: str | None) -> None:
        if payload is not None:
            payload = payload.strip()
            if payload and payload != "[DONE]":
                value = json_or_none(payload)
                if isinstance(value, dict):
                    chunks.append(cast(ChatChunk, value))

    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.strip()
        if line.startswith("data:"):
            pending = decoder.buffered
            if pending is not None and json_or_none(pending) is not None:
                take(decoder.flush())
            decoder.line("data:" + line[5:].strip())
        elif line.startswith("{"):
            take(decoder.flush())
            value = json_or_none(line)
            if isinstance(value, dict):
                chunks.append(cast(ChatChunk, value))
        elif not line:
            take(decoder.line(""))
        # event:, id:, retry:, comments and stray text carry nothing
    take(decoder.flush())
    return chunks


class _Gathered(TypedDict):
    """What one choice index has gathered from the chunks so far."""

    content: list[str]
    reasoning: list[str]
    calls: ToolCallAssembler
    finish_reason: str | None
    role: str | None


def reassemble_stream(chunks: Iterable[Mapping[str, Any]]) -> ChatCompletion:
    """A `chat.completion`-shaped dict from `chat.completion.chunk` dicts.

    Tool-call deltas are assembled by the kit's one `ToolCallAssembler` (the live client's too), so a stream
    reads the same here as when the client received it."""
    choices: dict[int, _Gathered] = {}
    head: ChatCompletion = {}
    for chunk in chunks:
        if not isinstance(chunk, Mapping):
            continue
        if "id" not in head and chunk.get("id") is not None:
            head["id"] = chunk["id"]
        if "model" not in head and chunk.get("model") is not None:
            head["model"] = chunk["model"]
        if "created" not in head and chunk.get("created") is not None:
            head["created"] = chunk["created"]
        if "system_fingerprint" not in head and chunk.get("system_fingerprint") is not None:
            head["system_fingerprint"] = chunk["system_fingerprint"]
        if chunk.get("usage"):
            head["usage"] = chunk["usage"]
        for pos, choice in enumerate(as_list(chunk.get("choices"))):
            if not isinstance(choice, Mapping):
                continue
            raw_index = choice.get("index")
            idx = raw_index if isinstance(raw_index, int) else pos
            acc = choices.setdefault(idx, {"content": [], "reasoning": [], "calls": ToolCallAssembler(),
                                           "finish_reason": None, "role": None})
            _feed_choice(acc, choice)
    out_choices: list[ChatChoice] = []
    for idx in sorted(choices):
        acc = choices[idx]
        calls = acc["calls"].calls()
        message: ChatMessage = {
            "role": acc["role"] or "assistant",
            "content": "".join(acc["content"]) if acc["content"] else None,
            "reasoning": "".join(acc["reasoning"]) if acc["reasoning"] else None,
            "tool_calls": calls,
        }
        out_choices.append({"index": idx, "message": message, "finish_reason": acc["finish_reason"]})
    return {**head, "object": "chat.completion", "choices": out_choices}


def _feed_choice(acc: _Gathered, choice: Mapping[str, Any]) -> None:
    """Add one chunk's choice to what its index has gathered: role, content, reasoning, tool-call deltas, finish."""
    raw_delta = choice.get("delta")
    # Some proxies send whole messages in chunks.
    delta = raw_delta if isinstance(raw_delta, Mapping) else as_mapping(choice.get("message"))
    if isinstance(delta.get("role"), str):
        acc["role"] = delta["role"]
    if isinstance(delta.get("content"), str):
        acc["content"].append(delta["content"])
    for key in ("reasoning", "reasoning_content"):
        if isinstance(delta.get(key), str):
            # 0.12–0.14 send both fields with the same text; keep one copy.
            if key == "reasoning_content" and isinstance(delta.get("reasoning"), str):
                continue
            acc["reasoning"].append(delta[key])
    acc["calls"].feed(as_list(delta.get("tool_calls")))
    if choice.get("finish_reason") is not None:
        acc["finish_reason"] = choice["finish_reason"]


def from_responses(value: Any, truncated: bool) -> ChatCompletion | None:
    """A `chat.completion`-shaped dict from a Responses-API reply or its streaming events; None if it is neither.

    Events: `response.output_item.added` opens a function call, `…function_call_arguments.delta` appends to its
    arguments, `…arguments.done` and `response.output_item.done` carry the whole; a call whose stream was cut
    before either keeps its arguments as received so far (a `CutText`)."""
    if isinstance(value, dict) and isinstance(value.get("output"), list) and (
            value.get("object") == "response" or any(isinstance(i, dict) and i.get("type") in (
                "function_call", "message", "reasoning") for i in value["output"])):
        events: list[Any] = [{"type": "response.output_item.done", "output_index": n, "item": item}
                             for n, item in enumerate(value["output"])]
        truncated = truncated or value.get("status") == "incomplete"
    elif isinstance(value, list) and value and all(
            isinstance(e, dict) and str(e.get("type", "")).startswith("response.") for e in value):
        events = value
    else:
        return None
    calls: dict[Any, ResponsesCall] = {}
    done: set[Any] = set()
    content: list[str] = []
    reasoning: list[str] = []

    def call_for(event: ResponsesEvent) -> ResponsesCall:
        key = event.get("output_index", event.get("item_id"))
        by_id = next((k for k, c in calls.items() if event.get("item_id") and c["item_id"] == event["item_id"]), None)
        return calls.setdefault(by_id if by_id is not None else key, {
            "item_id": event.get("item_id"), "id": None, "name": None, "arguments": ""})

    # A final `response.completed` event carries the whole reply: its items count as finished ones.
    expanded: list[Any] = []
    for event in events:
        expanded.append(event)
        inner = event.get("response") if isinstance(event, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("output"), list):
            expanded += [{"type": "response.output_item.done", "output_index": n, "item": item}
                         for n, item in enumerate(inner["output"])]
    for event in expanded:
        kind = event.get("type")
        item = event.get("item") if isinstance(event.get("item"), dict) else None
        if item is not None and item.get("type") == "function_call":
            call = call_for({**event, "item_id": item.get("id")})
            call["id"] = item.get("call_id") or call["id"]
            call["name"] = item.get("name") or call["name"]
            if kind == "response.output_item.done" or item.get("status") == "completed":
                call["arguments"] = item.get("arguments")
                done.add(id(call))
            elif isinstance(item.get("arguments"), str) and item["arguments"]:
                call["arguments"] = item["arguments"]
        elif item is not None and item.get("type") == "message" and kind == "response.output_item.done":
            for part in as_list(item.get("content")):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    content.append(part["text"])
        elif kind == "response.function_call_arguments.delta" and isinstance(event.get("delta"), str):
            call = call_for(event)
            if isinstance(call["arguments"], str):
                call["arguments"] += event["delta"]
        elif kind == "response.function_call_arguments.done":
            call = call_for(event)
            call["arguments"] = event.get("arguments")
            call["name"] = event.get("name") or call["name"]
            done.add(id(call))
        elif kind == DONE_CUT and calls:
            done.add(id(calls[list(calls)[-1]]))
        elif kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            content.append(event["delta"])
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta") and isinstance(
                event.get("delta"), str):
            reasoning.append(event["delta"])
    tool_calls: list[ToolCallJson] = []
    for key in sorted(calls, key=str):
        call = calls[key]
        args = call["arguments"]
        if truncated and id(call) not in done and isinstance(args, str):
            args = CutText(args)
        tool_calls.append({"id": call["id"], "type": "function", "function": {"name": call["name"],
                                                                             "arguments": args}})
    message: ChatMessage = {"role": "assistant", "content": "".join(content) or None,
                            "reasoning": "".join(reasoning) or None, "tool_calls": tool_calls}
    return {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": None}]}
