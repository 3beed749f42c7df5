"""The faithful session replay: each turn resends the history as a client really holds it.

A turn appends the server's live assistant message (its content, its reasoning under the field the server used,
since K3 expects it back, and its `tool_calls` with the server's own ids); a recorded tool result is bound by its
position (`call`) to the id of the live call at that position, and a live call the trace has no result for is
answered with a plain `{"status": "ok"}` (a client must answer every call it got). Tools and the system prompt are
resent byte-identical every turn; a session-affinity header names the session. Requests go through the kit's
streaming client (`ChatClient.chat_body`), with its timing marks and its cancellation: a cancelled replay (Ctrl-C,
the phase's bound) keeps every turn it finished and sends nothing more.

Each turn gives one record (`turn_record`): the prompt's growth against what was appended, the cached tokens
against the history the previous turn left (designed reuse), the tool call expected against the one produced and
its validity, the time to the first token of any kind (reasoning included) and the largest gap between chunks.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

import jsonschema

from ..client import ChatClient, ChatRecord, record_of
from ..shapes import ChatBody, ChatMessage, ToolDef
from .readers import block_text
from .trace import SessionTurn, TraceMessage

__all__ = ["AFFINITY_HEADER", "Answer", "CallSeen", "ReplayConfig", "SessionReplay", "TurnRecord", "call_problem"]

#: the session-affinity header (AIPerf's name; a router that pins sessions to a replica reads it)
AFFINITY_HEADER = "X-Session-Affinity"
#: what a live call the trace has no recorded result for gets back
PLAIN_RESULT = '{"status": "ok"}'
CHARS_PER_TOKEN = 4.0


class Answer(TypedDict):
    """How a recorded tool result was bound: the live call's position, its id (None: no live call there)."""

    call: int
    id: str | None
    unbound: NotRequired[bool]


class CallSeen(TypedDict):
    """A live tool call of a turn's reply and why a client could not execute it (None: it could)."""

    id: Any
    name: Any
    problem: str | None


class TurnRecord(TypedDict):
    """One turn's record (`turn_record`), a line of the sessions evidence."""

    session: str
    turn: int
    think_s: float
    ok: bool
    request_id: str
    http_status: int | None
    error: str | None
    cancelled: bool
    sent_wall: float | None
    done_wall: float | None
    prompt_tokens: int | None
    previous_prompt_tokens: int | None
    growth_tokens: int | None
    expected_growth_tokens: int | None
    cached_tokens: int | None
    designed_cached_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    reasoning_sent_back: bool
    expect_tool: bool
    function: str | None
    calls: list[CallSeen]
    tool_ok: bool | None
    function_match: bool | None
    previous_call_ids: list[Any]
    answers: list[Answer]
    plain_results: int
    ttft_ms: float | None
    max_gap_ms: float | None
    max_silence_ms: float | None
    e2e_ms: float | None
    finish_reason: str | None
    label: NotRequired[str | None]  # the replay's level label, set as the turn ends
    level: NotRequired[int]  # the concurrency level, set by the capacity axis's sink


@dataclass(frozen=True)
class ReplayConfig:
    model: str | None
    request_timeout_s: float
    sampling: Mapping[str, Any] = field(default_factory=dict)  # temperature, top_p, chat_template_kwargs…
    block_tokens: int = 16  # the server's prefix-cache unit: reuse is designed in whole blocks
    chars_per_token: float = CHARS_PER_TOKEN  # what the expected growth counts added text at (the server's, measured)
    affinity_header: str = AFFINITY_HEADER


def call_problem(call: Mapping[str, Any], tools: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why a live tool call is not one a client can execute (None: it is): no id, a function not offered, arguments
    that are not a JSON object or do not match the function's schema."""
    if not isinstance(call.get("id"), str) or not call["id"]:
        return "no call id"
    name = call.get("name")
    if not isinstance(name, str) or name not in tools:
        return f"function {name!r} was not offered"
    try:
        args = json.loads(call.get("arguments") or "")
    except (TypeError, ValueError) as exc:
        return f"arguments are not JSON: {exc}"[:200]
    if not isinstance(args, dict):
        return "arguments are not a JSON object"
    schema = (tools[name].get("function") or {}).get("parameters") or {}
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as exc:
        return f"arguments break the schema: {exc.message}"[:200]
    except jsonschema.SchemaError:
        return None  # the trace's schema is not checkable: the call is taken as given
    return None


def _text(message: TraceMessage, sid: str, turn: int, i: int) -> str:
    if message.content is not None:
        return message.content
    return block_text(f"{sid}:{turn}:{i}", message.tokens or 1)


def _assistant(rec: ChatRecord) -> ChatMessage:
    """The live reply as the next turn's history holds it."""
    msg: ChatMessage = {"role": "assistant", "content": rec.content or ""}
    if rec.reasoning and rec.reasoning_field in (None, "reasoning", "both"):
        msg["reasoning"] = rec.reasoning
    elif rec.reasoning:
        msg["reasoning_content"] = rec.reasoning
    if rec.tool_calls:
        msg["tool_calls"] = [tc.to_openai() for tc in rec.tool_calls]
    return msg


class SessionReplay:
    """One session against the server: `await run()` plays its turns in order (think time first), appending each
    turn's record to `sink` as it ends. A failed turn ends the session (its history is no longer the trace's); a
    turn of tool results for calls the server did not make is not sent (its results are listed unbound in the next
    turn's record) and the session goes on. No turn starts after `stop_at_ns` once the session played `min_turns`
    (the caller bounds the whole)."""

    def __init__(self, client: ChatClient, turns: Sequence[SessionTurn], config: ReplayConfig, *,
                 sink: Callable[[TurnRecord], None], on_request: Callable[[ChatRecord], None] | None = None,
                 label: str = "", stop_at_ns: int | None = None, min_turns: int = 0) -> None:
        self.client, self.turns, self.config = client, list(turns), config
        self.sink, self.on_request, self.label = sink, on_request, label
        self.stop_at_ns = stop_at_ns  # perf mark: no turn starts after it, once `min_turns` turns were played
        self.min_turns = min_turns
        head = self.turns[0]
        self.sid = head.session
        self.tools = [cast(ToolDef, dict(t)) for t in head.tools]
        self.by_name = {str((src.get("function") or {}).get("name")): t for src, t in zip(head.tools, self.tools)}
        system = head.system if head.system is not None else (
            block_text("k3-shared-system", head.system_tokens) if head.system_tokens else None)
        self.history: list[ChatMessage] = [{"role": "system", "content": system}] if system is not None else []
        self.last: ChatRecord | None = None
        self.unsent: list[Answer] = []  # recorded results left unsent (no live call), told with the next turn
        self.records: list[TurnRecord] = []

    def _bind(self, turn: SessionTurn) -> tuple[list[ChatMessage], list[Answer], int]:
        """The turn's new messages, tool results bound to the live ids by position; the bindings; how many live
        calls got the plain result because the trace has none for them."""
        live = list(self.last.tool_calls) if self.last is not None else []
        out: list[ChatMessage] = []
        bound: list[Answer] = []
        answered: set[int] = set()
        for i, m in enumerate(turn.add):
            if m.role == "tool":
                pos = m.call or 0
                if pos >= len(live) or pos in answered:
                    bound.append({"call": pos, "id": None, "unbound": True})
                    continue
                answered.add(pos)
                out.append({"role": "tool", "tool_call_id": live[pos].id, "content": _text(m, self.sid, turn.turn, i)})
                bound.append({"call": pos, "id": live[pos].id})
        plain = [k for k in range(len(live)) if k not in answered]
        # every live call is answered before the conversation moves on, in the order of the calls
        filled: list[ChatMessage] = [{"role": "tool", "tool_call_id": live[k].id, "content": PLAIN_RESULT} for k in plain]
        users: list[ChatMessage] = [{"role": "user", "content": _text(m, self.sid, turn.turn, i)}
                 for i, m in enumerate(turn.add) if m.role == "user"]
        return out + filled + users, bound, len(plain)

    def _body(self, turn: SessionTurn, messages: list[ChatMessage]) -> ChatBody:
        body = cast(ChatBody, {"messages": messages, "max_tokens": turn.max_tokens, "stream": True,
                               **self.config.sampling})
        if self.tools:
            body["tools"] = self.tools
        if self.config.model:
            body["model"] = self.config.model
        return body

    async def run(self) -> list[TurnRecord]:
        for turn in self.turns:
            if turn.think_s > 0:
                await asyncio.sleep(turn.think_s)
            if self.stop_at_ns is not None and time.perf_counter_ns() >= self.stop_at_ns and \
                    len(self.records) >= self.min_turns:
                break
            if not await self._turn(turn):
                break
        return self.records

    async def _turn(self, turn: SessionTurn) -> bool:
        new, bound, plain = self._bind(turn)
        if not new:
            # the trace's results answer no live call (the model did not call, which its turn's record already
            # counts): a client sends nothing, and the session goes on with its next user message
            self.unsent += bound
            return True
        bound, self.unsent = self.unsent + bound, []
        previous = self.last
        messages = self.history + new
        rid = f"{self.label}{self.sid}-t{turn.turn}"
        try:
            rec = await self.client.chat_body(self._body(turn, messages), strict=False, request_id=rid,
                                              timeout_s=self.config.request_timeout_s,
                                              headers={self.config.affinity_header: self.sid})
        except asyncio.CancelledError as exc:
            partial = record_of(exc)
            if partial is not None:
                self._record(turn, partial, previous, new, bound, plain)
            raise
        self._record(turn, rec, previous, new, bound, plain)
        if not rec.ok:
            return False
        self.history = messages + [_assistant(rec)]
        self.last = rec
        return True

    def _record(self, turn: SessionTurn, rec: ChatRecord, previous: ChatRecord | None, new: list[ChatMessage],
                bound: list[Answer], plain: int) -> None:
        if self.on_request is not None:
            self.on_request(rec)
        d = turn_record(turn, rec, previous, new, bound, plain, self.by_name, self.config.block_tokens,
                        self.config.chars_per_token)
        d["label"] = self.label.rstrip("-") or None
        self.records.append(d)
        self.sink(d)


def _calls(rec: ChatRecord, tools: Mapping[str, Mapping[str, Any]]) -> list[CallSeen]:
    out: list[CallSeen] = []
    for tc in rec.tool_calls:
        raw = {"id": tc.id, "name": tc.name, "arguments": tc.arguments}
        out.append({"id": tc.id, "name": tc.name, "problem": call_problem(raw, tools)})
    return out


def turn_record(turn: SessionTurn, rec: ChatRecord, previous: ChatRecord | None, new: list[ChatMessage],
                bound: list[Answer], plain: int, tools: Mapping[str, Mapping[str, Any]],
                block_tokens: int, chars_per_token: float = CHARS_PER_TOKEN) -> TurnRecord:
    """What one turn shows (see the module docstring); pure over the records."""
    prev_prompt = previous.prompt_tokens if previous is not None else None
    growth = (rec.prompt_tokens - prev_prompt) if rec.prompt_tokens is not None and prev_prompt is not None else None
    added_chars = sum(len(str(m.get("content") or "")) for m in new)
    expected = None
    if previous is not None and previous.completion_tokens is not None:
        expected = previous.completion_tokens + math.ceil(added_chars / chars_per_token)
    designed = None
    if prev_prompt is not None:
        designed = max(0, (prev_prompt // block_tokens - 1) * block_tokens)
    calls = _calls(rec, tools) if rec.ok else []
    tool_ok = None
    if turn.expect_tool and rec.ok:
        tool_ok = bool(calls) and all(c["problem"] is None for c in calls)
    gaps = rec.itl_ms
    ttft = rec.ttft_ms
    silences = [x for x in (ttft, max(gaps) if gaps else None) if x is not None]
    return {
        "session": turn.session, "turn": turn.turn, "think_s": turn.think_s, "ok": rec.ok,
        "request_id": rec.request_id, "http_status": rec.http_status, "error": rec.error,
        "cancelled": rec.cancelled, "sent_wall": (rec.wall_ns(rec.sent_ns) or 0) / 1e9 or None,
        "done_wall": (rec.wall_ns(rec.done_ns) or 0) / 1e9 or None,
        "prompt_tokens": rec.prompt_tokens, "previous_prompt_tokens": prev_prompt, "growth_tokens": growth,
        "expected_growth_tokens": expected, "cached_tokens": rec.cached_tokens, "designed_cached_tokens": designed,
        "completion_tokens": rec.completion_tokens, "reasoning_tokens": rec.reasoning_tokens,
        "reasoning_sent_back": bool(previous is not None and previous.reasoning),
        "expect_tool": turn.expect_tool, "function": turn.function, "calls": calls, "tool_ok": tool_ok,
        "function_match": (None if not (turn.expect_tool and turn.function and calls) else
                           any(c["name"] == turn.function for c in calls)),
        "previous_call_ids": [tc.id for tc in previous.tool_calls] if previous is not None else [],
        "answers": bound, "plain_results": plain,
        "ttft_ms": ttft, "max_gap_ms": max(gaps) if gaps else None,
        "max_silence_ms": max(silences) if silences else None, "e2e_ms": rec.e2e_ms,
        "finish_reason": rec.finish_reason,
    }
