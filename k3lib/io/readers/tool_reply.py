"""Chat-completion reply reader for tool calls: structured `tool_calls` (streams reassembled from deltas),
their arguments' JSON validity, and tool-call markup leaked into content, reasoning or a function name.
Accepts a JSON body (whole or cut short), an SSE capture, a list of chunks, a Python dict repr, an OpenAI SDK repr
of a Chat Completion or of Responses-API events, an error body, or the assistant's text alone when it carries
tool-call markup."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from k3lib.io.chatstream import SSEDecoder, ToolCall, ToolCallAssembler
from k3lib.core.errors import ArtifactError
from k3lib.io.readers._cutjson import CutJson, CutText, read_cut_json

__all__ = [
    "MARKUP_FAMILIES",
    "ToolCallRecord",
    "ToolReplyClassification",
    "classify_tool_reply",
    "detect_markup",
    "inspect_tool_reply",
    "parse_sse_chunks",
    "reassemble_stream",
]

# Tool-call markup by family: what a model emits when the server's tool parser did not (or could not) turn it
# into `tool_calls`. Names follow vLLM's `--tool-call-parser` names where one exists.
MARKUP_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("kimi_k2", re.compile(
        r"<\|tool_calls_section_(?:begin|end)\|>|<\|tool_call_(?:begin|end|argument_begin)\|>"
        # With skip_special_tokens the markers vanish and the call header is what is left.
        r"|(?<![\w.])functions\.[A-Za-z_][\w.-]*:\d+\s*\{")),
    ("kimi_k3", re.compile(r"<\|open\|>\s*(?:tools|call\b)|<\|close\|>\s*(?:tools|call)\b")),
    ("harmony", re.compile(
        r"<\|channel\|>|<\|call\|>|<\|constrain\|>|<\|message\|>"
        r"|\b(?:analysis|commentary)\s+to=functions\.[\w.-]+")),
    ("hermes", re.compile(r"</?tool_call>")),
    ("mistral", re.compile(r"\[TOOL_CALLS\]")),
    ("deepseek_v3", re.compile(r"<｜tool▁(?:calls?▁begin|call▁end|sep)｜>")),
    ("llama3_json", re.compile(r"<\|python_tag\|>")),
    # Llama 4 wraps a call (JSON or pythonic) in its own special tokens.
    ("llama4_json", re.compile(
        r"<\|python_start\|>|<\|python_end\|>|<\|header_start\|>\s*assistant\s*<\|header_end\|>")),
)

# What `inspect_tool_reply` tried, for the one line a refused text gets.
FORMATS_TRIED = ("a JSON body (whole or cut short), an SSE capture (`data: {...}` lines), a list of chunks, an "
                 "OpenAI SDK repr (ChatCompletion, Responses events), an error body, or assistant text with "
                 "tool-call markup")

# A reply this large is a misdirected file, not a chat completion; bound the work.
_MAX_CHARS = 20_000_000


#: The kit's one tool-call record; the reader's name for it stays importable.
ToolCallRecord = ToolCall


@dataclass(frozen=True)
class ToolReplyClassification:
    has_tool_calls: bool | None          # None when the reply is cut before its message ends and no call was seen
    function_names: tuple[str, ...]
    leaked_markup: str | None
    arguments_valid_json: bool | None    # None when there are no structured calls
    tool_calls: tuple[ToolCall, ...]
    content: str | None
    reasoning: str | None
    finish_reason: str | None
    source_format: str                   # json | dict | sse | chunks | sdk_repr | python_repr
    leak_location: str | None            # content | reasoning | function_name
    offered_tools: tuple[str, ...] | None  # from the request, when the artifact includes it
    unknown_function_names: tuple[str, ...]  # called but not offered (empty when the request is absent)
    truncated: bool = False              # the reply was cut short; fields past the cut are None
    error: str | None = None             # an error body's message (then there is no completion to read)

    def as_dict(self) -> dict[str, Any]:
        """The `k3 inspect tool-reply --json` shape (schemas/inspect/tool-reply.schema.json)."""
        return {
            "has_tool_calls": self.has_tool_calls,
            "leaked_markup": self.leaked_markup,
            "arguments_valid_json": self.arguments_valid_json,
            "function_names": list(self.function_names),
            "finish_reason": self.finish_reason,
            "source_format": self.source_format,
            "truncated": self.truncated,
            "error": self.error,
        }


# ---------------------------------------------------------------------------------------------------------------
# Pure helpers reused on live replies


def detect_markup(text: str | None) -> str | None:
    """The family whose tool-call markup appears in `text` (the earliest one when several do), or None."""
    if not text or not isinstance(text, str):
        return None
    best: tuple[int, str] | None = None
    for family, pattern in MARKUP_FAMILIES:
        m = pattern.search(text)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), family)
    return best[1] if best else None


def parse_sse_chunks(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE capture (`data: {...}` lines); `[DONE]`, comments and cut lines are skipped.

    Framed by the kit's one SSE decoder, made lenient for pastes: lines may be indented, a capture that dropped
    the blank line between events is split where a new `data:` line follows a whole JSON payload, and
    one-JSON-object-per-line captures are read too. A payload that is not JSON (a stream cut mid-chunk) is
    dropped."""
    chunks: list[dict[str, Any]] = []
    decoder = SSEDecoder()

    def take(payload: str | None) -> None:
        if payload is not None:
            payload = payload.strip()
            if payload and payload != "[DONE]":
                value = _json_or_none(payload)
                if isinstance(value, dict):
                    chunks.append(value)

    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.strip()
        if line.startswith("data:"):
            pending = decoder.buffered
            if pending is not None and _json_or_none(pending) is not None:
                take(decoder.flush())
            decoder.line("data:" + line[5:].strip())
        elif line.startswith("{"):
            take(decoder.flush())
            value = _json_or_none(line)
            if isinstance(value, dict):
                chunks.append(value)
        elif not line:
            take(decoder.line(""))
        # event:, id:, retry:, comments and stray text carry nothing
    take(decoder.flush())
    return chunks


def reassemble_stream(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A `chat.completion`-shaped dict from `chat.completion.chunk` dicts.

    Tool-call deltas are assembled by the kit's one `ToolCallAssembler` (the live client's too), so a stream
    reads the same here as when the client received it."""
    choices: dict[int, dict[str, Any]] = {}
    head: dict[str, Any] = {}
    for chunk in chunks:
        if not isinstance(chunk, Mapping):
            continue
        for key in ("id", "model", "created", "system_fingerprint"):
            if key not in head and chunk.get(key) is not None:
                head[key] = chunk[key]
        if chunk.get("usage"):
            head["usage"] = chunk["usage"]
        for pos, choice in enumerate(_as_list(chunk.get("choices"))):
            if not isinstance(choice, Mapping):
                continue
            raw_index = choice.get("index")
            idx = raw_index if isinstance(raw_index, int) else pos
            acc = choices.setdefault(idx, {"content": [], "reasoning": [], "calls": ToolCallAssembler(),
                                           "finish_reason": None, "role": None})
            raw_delta = choice.get("delta")
            # Some proxies send whole messages in chunks.
            delta = raw_delta if isinstance(raw_delta, Mapping) else _as_mapping(choice.get("message"))
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
            acc["calls"].feed(_as_list(delta.get("tool_calls")))
            if choice.get("finish_reason") is not None:
                acc["finish_reason"] = choice["finish_reason"]
    out_choices = []
    for idx in sorted(choices):
        acc = choices[idx]
        calls = acc["calls"].calls()
        message: dict[str, Any] = {
            "role": acc["role"] or "assistant",
            "content": "".join(acc["content"]) if acc["content"] else None,
            "reasoning": "".join(acc["reasoning"]) if acc["reasoning"] else None,
            "tool_calls": calls,
        }
        out_choices.append({"index": idx, "message": message, "finish_reason": acc["finish_reason"]})
    return {**head, "object": "chat.completion", "choices": out_choices}


# ---------------------------------------------------------------------------------------------------------------
# Turning an artifact into plain data

_FENCE = re.compile(r"^\s*```[\w-]*\s*$|^\s*~~~[\w-]*\s*$")
_PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.|In \[\d+\]:|Out\[\d+\]:|\$|#)\s?")
_SDK_START = re.compile(r"\b(?:ChatCompletion(?:Chunk)?|ParsedChatCompletion(?:\[[\w\[\], ]*\])?)\(")


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strip_paste(text: str) -> str:
    """Remove Markdown fences and interactive prompts that surround a pasted reply."""
    out = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if _FENCE.match(line):
            continue
        out.append(_PROMPT.sub("", line, count=1) if _PROMPT.match(line) and not line.lstrip().startswith(
            ("{", "[", "data:")) else line)
    return "\n".join(out)


def _ast_to_data(node: ast.AST) -> Any:
    """An SDK or dict repr as plain data: `Foo(a=1, b=Bar(c='x'))` → {"a": 1, "b": {"c": "x"}}."""
    if isinstance(node, ast.Call):
        return {kw.arg: _ast_to_data(kw.value) for kw in node.keywords if kw.arg is not None}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_ast_to_data(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {(_ast_to_data(k) if k is not None else None): _ast_to_data(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value  # type: ignore[operator]
    if isinstance(node, ast.Name):
        # Enum members and sentinels (NOT_GIVEN) carry no tool-call data.
        return None
    if isinstance(node, ast.Attribute):
        return node.attr
    raise ValueError(f"unsupported node {type(node).__name__}")


def _parse_repr(text: str) -> Any:
    if len(text) > _MAX_CHARS:
        return None
    try:
        return _ast_to_data(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


_DONE_CUT = "response.function_call_arguments.done(cut)"
_RESPONSES_START = re.compile(r"\bResponse[A-Za-z]*Event\(|\bResponse\((?=.*\boutput=)")


@dataclass(frozen=True)
class _Loaded:
    value: Any
    source_format: str
    cut: CutJson | None = None           # a JSON body cut short, with the containers still open at the cut
    truncated: bool = False


def _load_text(text: str) -> _Loaded:
    if len(text) > _MAX_CHARS:
        raise ArtifactError(f"the reply is {len(text)} characters long: not a chat completion")
    body = _strip_paste(text).strip()
    if not body:
        raise ArtifactError("the reply is empty")
    if re.search(r"^\s*data:", body, re.M):
        chunks = parse_sse_chunks(body)
        if chunks:
            return _Loaded(chunks, "sse", truncated=_sse_cut(body))
    value = _json_or_none(body)
    if value is not None:
        # One JSON object per line is a chunk log; a single object is a body.
        return _Loaded(value, "json")
    lines = [ln for ln in body.split("\n") if ln.strip().startswith("{")]
    if len(lines) > 1:
        chunks = [c for c in (_json_or_none(ln.strip()) for ln in lines) if isinstance(c, dict)]
        if len(chunks) > 1 and _is_chunk_list(chunks):
            return _Loaded(chunks, "chunks", truncated=len(chunks) < len(lines))
    if _RESPONSES_START.search(body):
        # Responses-API events printed one per line (`for event in stream: print(event)`); the last may be cut.
        reprs = [ln[m.start():] for ln in body.split("\n") if (m := _RESPONSES_START.search(ln))]
        parsed = [_parse_repr(r) for r in reprs]
        events = [p for p in parsed if isinstance(p, dict)]
        cut_events = len(events) < len(parsed)
        if parsed and parsed[-1] is None and reprs[-1].startswith("ResponseFunctionCallArgumentsDoneEvent("):
            # Cut inside the "arguments done" event: every delta came before it.
            events.append({"type": _DONE_CUT})
        if events:
            return _Loaded(events if len(reprs) > 1 or "Event(" in reprs[0] else events[0], "sdk_repr",
                           truncated=cut_events)
    m = _SDK_START.search(body)
    if m:
        # One repr per line for SDK stream captures (ChatCompletionChunk(...)).
        reprs = [ln[_SDK_START.search(ln).start():] for ln in body.split("\n")  # type: ignore[union-attr]
                 if _SDK_START.search(ln)]
        if len(reprs) > 1 and "ChatCompletionChunk(" in body:
            parsed = [p for p in (_parse_repr(r) for r in reprs) if isinstance(p, dict)]
            if parsed:
                return _Loaded(parsed, "sdk_repr", truncated=len(parsed) < len(reprs))
        value = _parse_repr(body[m.start():])
        if isinstance(value, dict):
            return _Loaded(value, "sdk_repr")
    value = _parse_repr(body)
    if isinstance(value, (dict, list)):
        return _Loaded(value, "python_repr")
    cut = read_cut_json(body)
    if cut is not None and not cut.complete and isinstance(cut.value, dict):
        # A pretty-printed body pasted up to a line limit: read what is there.
        return _Loaded(cut.value, "json", cut=cut, truncated=True)
    # A body with a leading label ("response:", "Error code: 400 - {...}") or trailing text: the first object that
    # looks like a reply or an error body, as JSON or as a Python dict repr.
    decoder = json.JSONDecoder()
    for m in re.finditer(r"(?m)^\s*[\[{]|[:=-]\s*[\[{]", body):
        try:
            value, _ = decoder.raw_decode(body, m.end() - 1)
        except (ValueError, RecursionError):
            line_end = body.find("\n", m.end())
            value = _parse_repr(body[m.end() - 1:line_end if line_end >= 0 else len(body)])
            if value is None:
                continue
        if _find_completion(value)[0] is not None or _is_chunk_list(value) or _error_message(value):
            return _Loaded(value, "json")
    if detect_markup(body):
        # The assistant's text alone, as a chat UI or a log shows it: content with no structured call.
        return _Loaded({"choices": [{"index": 0, "message": {"role": "assistant", "content": body}}]}, "content")
    raise ArtifactError(f"this is not a chat-completion reply: tried {FORMATS_TRIED}")


def _sse_cut(body: str) -> bool:
    """An SSE capture that ends before `data: [DONE]` and inside a chunk."""
    last = body.rstrip().rsplit("\n", 1)[-1].strip()
    if not last.startswith("data:"):
        return False
    payload = last[5:].strip()
    return payload != "[DONE]" and _json_or_none(payload) is None


def _error_message(value: Any) -> str | None:
    """The message of an error body: vLLM ≥0.10.1 / OpenAI `{"error": {...}}`, vLLM ≤0.10.0's flat
    `{"object": "error", "message": …}`, or `{"detail": …}` from a proxy."""
    if not isinstance(value, dict) or "choices" in value:
        return None
    err = value.get("error")
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    if isinstance(err, str) and err.strip():
        return err
    if value.get("object") == "error" and isinstance(value.get("message"), str):
        return value["message"]
    if set(value) <= {"detail"} and isinstance(value.get("detail"), str):
        return value["detail"]
    return None


def _from_responses(value: Any, truncated: bool) -> dict[str, Any] | None:
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
    calls: dict[Any, dict[str, Any]] = {}
    done: set[Any] = set()
    content: list[str] = []
    reasoning: list[str] = []

    def call_for(event: dict[str, Any]) -> dict[str, Any]:
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
            for part in _as_list(item.get("content")):
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
        elif kind == _DONE_CUT and calls:
            done.add(id(calls[list(calls)[-1]]))
        elif kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            content.append(event["delta"])
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta") and isinstance(
                event.get("delta"), str):
            reasoning.append(event["delta"])
    tool_calls = []
    for key in sorted(calls, key=str):
        call = calls[key]
        args = call["arguments"]
        if truncated and id(call) not in done and isinstance(args, str):
            args = CutText(args)
        tool_calls.append({"id": call["id"], "type": "function", "function": {"name": call["name"],
                                                                             "arguments": args}})
    message = {"role": "assistant", "content": "".join(content) or None, "reasoning": "".join(reasoning) or None,
               "tool_calls": tool_calls}
    return {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": None}]}


def _to_plain(obj: Any) -> Any:
    # SDK objects (pydantic models) become dicts; anything else is taken as is.
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return dump()
        except Exception as exc:  # a foreign object's own failure  # noqa: BLE001
            raise ArtifactError(f"could not read the reply object: {exc}") from exc
    return obj


def _find_completion(value: Any, depth: int = 0) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(completion, request) from a reply, a {request, response} pair or a wrapper such as {"body": …}."""
    if depth > 4 or not isinstance(value, dict):
        return None, None
    if "choices" in value or "delta" in value:
        return value, None
    request = value.get("request") if isinstance(value.get("request"), dict) else None
    for key in ("response", "reply", "body", "result", "output", "data", "completion"):
        inner = value.get(key)
        if isinstance(inner, str):
            parsed = _json_or_none(inner)
            inner = parsed if parsed is not None else inner
        if isinstance(inner, list) and inner and all(isinstance(c, dict) for c in inner):
            return reassemble_stream(inner), request
        found, inner_request = _find_completion(inner, depth + 1)
        if found is not None:
            return found, request or inner_request
    if "role" in value and ("content" in value or "tool_calls" in value):
        # A bare assistant message.
        return {"choices": [{"index": 0, "message": value}]}, request
    return None, request


def _is_chunk_list(value: Any) -> bool:
    return isinstance(value, list) and any(
        isinstance(c, dict) and (c.get("object") == "chat.completion.chunk"
                                 or any(isinstance(ch, dict) and "delta" in ch for ch in _as_list(c.get("choices"))))
        for c in value)


# ---------------------------------------------------------------------------------------------------------------
# Classification


def _record(index: int, call: Any) -> ToolCall | None:
    if not isinstance(call, Mapping):
        return None
    fn = _as_mapping(call.get("function"))
    # A name the text ends inside was not seen whole: unknown, not wrong (cut arguments: see ToolCall).
    name = fn.get("name") if isinstance(fn.get("name"), str) and not isinstance(fn.get("name"), CutText) else None
    raw_index = call.get("index")
    idx = raw_index if isinstance(raw_index, int) else index
    return ToolCall(index=idx, id=call.get("id") if isinstance(call.get("id"), str) else None,
                    type=call.get("type") if isinstance(call.get("type"), str) else None,
                    name=name, arguments=fn.get("arguments"))


def _offered(request: dict[str, Any] | None) -> tuple[str, ...] | None:
    if not request:
        return None
    names = []
    for tool in _as_list(request.get("tools")):
        if isinstance(tool, Mapping):
            raw_fn = tool.get("function")
            fn = raw_fn if isinstance(raw_fn, Mapping) else tool
            if isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return tuple(names) if names or "tools" in request else None


def _classify_data(value: Any, source_format: str, loaded: _Loaded | None = None) -> ToolReplyClassification:
    value = _to_plain(value)
    truncated = bool(loaded and loaded.truncated)
    cut = loaded.cut if loaded else None
    request: dict[str, Any] | None = None
    error = _error_message(value)
    if error is not None:
        return ToolReplyClassification(
            has_tool_calls=False, function_names=(), leaked_markup=None, arguments_valid_json=None, tool_calls=(),
            content=None, reasoning=None, finish_reason=None, source_format=source_format, leak_location=None,
            offered_tools=None, unknown_function_names=(), truncated=truncated, error=error)
    if isinstance(value, list) and not value:
        raise ArtifactError(f"an empty list: no chunk and no reply in it (tried {FORMATS_TRIED})")
    responses = _from_responses(value, truncated)
    if responses is not None:
        completion: dict[str, Any] | None = responses
    elif _is_chunk_list(value):
        completion = reassemble_stream(value)
        source_format = source_format if source_format in ("sse", "sdk_repr") else "chunks"
    elif isinstance(value, list):
        # A list holding one completion (e.g. a JSON array of one reply).
        completion = next((_find_completion(v)[0] for v in value if _find_completion(v)[0] is not None), None)
    else:
        completion, request = _find_completion(value)
        if completion is not None and "delta" in completion:
            completion = reassemble_stream([completion])
        elif completion is not None and any(isinstance(c, Mapping) and "delta" in c
                                            for c in _as_list(completion.get("choices"))):
            completion = reassemble_stream([completion])
    if completion is None:
        raise ArtifactError(f"no `choices` in this reply: it is not a chat completion (tried {FORMATS_TRIED})")
    choices = completion.get("choices")
    if not isinstance(choices, list) or (choices and not any(isinstance(c, Mapping) for c in choices)):
        shown = "null" if choices is None else type(choices).__name__ if not isinstance(choices, list) else \
            "a list without choice objects"
        raise ArtifactError(f"`choices` is {shown}: a chat completion's `choices` is a list of objects with a "
                            f"`message` (or `delta`); tried {FORMATS_TRIED}")
    if not choices and not truncated:
        raise ArtifactError(f"`choices` is empty: the reply holds no message to read; tried {FORMATS_TRIED}")
    unseen = truncated and _message_unseen(completion, cut)

    contents: list[str] = []
    reasonings: list[str] = []
    calls: list[ToolCall] = []
    finish_reason = None
    for cpos, choice in enumerate(_as_list(completion.get("choices"))):
        if not isinstance(choice, Mapping):
            continue
        message = _as_mapping(choice.get("message"))
        if finish_reason is None and isinstance(choice.get("finish_reason"), str):
            finish_reason = choice["finish_reason"]
        if isinstance(message.get("content"), str):
            contents.append(message["content"])
        elif isinstance(message.get("content"), list):
            # Content parts: [{"type": "text", "text": "…"}].
            contents.extend(p["text"] for p in message["content"]
                            if isinstance(p, Mapping) and isinstance(p.get("text"), str))
        seen_reasoning = set()
        for key in ("reasoning", "reasoning_content"):
            text = message.get(key)
            if isinstance(text, str) and text not in seen_reasoning:
                seen_reasoning.add(text)
                reasonings.append(text)
        raw_calls = _as_list(message.get("tool_calls"))
        if cut is not None:
            raw_calls = [_mark_unseen(call, cut, ("choices", cpos, "message", "tool_calls", i))
                         for i, call in enumerate(raw_calls)]
        if isinstance(message.get("function_call"), Mapping):
            # The legacy single-call field is structured too.
            raw_calls = raw_calls + [{"type": "function", "function": message["function_call"]}]
        for i, call in enumerate(raw_calls):
            rec = _record(i, call)
            if rec is not None:
                calls.append(rec)

    content = "".join(contents) if contents else None
    reasoning = "\n".join(reasonings) if reasonings else None
    leak, where = None, None
    for location, text in (("content", content), ("reasoning", reasoning)):
        leak = detect_markup(text)
        if leak:
            where = location
            break
    if leak is None:
        for rec in calls:
            leak = detect_markup(rec.name)
            if leak:
                where = "function_name"
                break
    names = tuple(rec.name for rec in calls if rec.name)
    offered = _offered(request)
    unknown = tuple(n for n in names if offered is not None and n not in offered)
    verdicts = [rec.arguments_valid_json for rec in calls]
    valid = None if not calls else False if False in verdicts else None if None in verdicts else True
    return ToolReplyClassification(
        has_tool_calls=True if calls else None if unseen else False, function_names=names, leaked_markup=leak,
        arguments_valid_json=valid, tool_calls=tuple(calls), content=content, reasoning=reasoning,
        finish_reason=finish_reason, source_format=source_format, leak_location=where, offered_tools=offered,
        unknown_function_names=unknown, truncated=truncated)


def _open_in(cut: CutJson, rel: tuple[Any, ...]) -> bool:
    """Whether the container at `rel` (a path from `choices`) was still open where the text ends."""
    return any("choices" in p and p[p.index("choices"):][:len(rel)] == rel for p in cut.open_paths)


def _mark_unseen(call: Any, cut: CutJson, rel: tuple[Any, ...]) -> Any:
    # A call the text ends inside: its missing arguments were not received, which is not the same as absent.
    if not isinstance(call, Mapping) or not _open_in(cut, rel):
        return call
    fn: Mapping[str, Any] = call["function"] if isinstance(call.get("function"), Mapping) else {}
    if "arguments" in fn:
        return call
    return {**call, "function": {**fn, "arguments": CutText("")}}


def _message_unseen(completion: dict[str, Any], cut: CutJson | None) -> bool:
    """Whether a cut reply ends before a message was whole (then "no tool calls" cannot be told)."""
    choices = [c for c in _as_list(completion.get("choices")) if isinstance(c, Mapping)]
    if cut is None:
        # A cut stream: the calls so far are known, the rest is not.
        return True
    if not choices:
        return True
    open_rel = []
    for path in cut.open_paths:
        if "choices" in path:
            open_rel.append(path[path.index("choices"):])
    for pos, choice in enumerate(choices):
        msg = ("choices", pos, "message")
        if any(p[:3] == msg for p in open_rel):
            return True
        if ("choices", pos) in open_rel and "message" not in choice and "delta" not in choice:
            return True
    return ("choices",) in open_rel and len(choices) == 0


def classify_tool_reply(obj_or_text: Any) -> ToolReplyClassification:
    """Classify a reply given as text (JSON, SSE, SDK repr), bytes, a dict, a list of chunks or an SDK object."""
    if isinstance(obj_or_text, (bytes, bytearray)):
        obj_or_text = bytes(obj_or_text).decode("utf-8", errors="replace")
    if isinstance(obj_or_text, str):
        loaded = _load_text(obj_or_text)
        return _classify_data(loaded.value, loaded.source_format, loaded)
    if obj_or_text is None:
        raise ArtifactError("no reply given")
    return _classify_data(obj_or_text, "dict")


def inspect_tool_reply(text: str | bytes) -> dict[str, Any]:
    """`k3 inspect tool-reply FILE --json`."""
    return classify_tool_reply(text).as_dict()
