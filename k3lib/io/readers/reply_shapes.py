"""The shapes a pasted reply comes in, read into plain data: a JSON body (whole or cut short), an SSE capture, a
list of chunks, a Python dict repr, an OpenAI SDK repr, an error body, or assistant text with tool-call markup;
and where the completion sits inside what was read."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, cast

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._cutjson import CutJson, read_cut_json
from k3lib.io.readers.reply_stream import DONE_CUT, as_list, json_or_none, parse_sse_chunks, reassemble_stream
from k3lib.io.readers.tool_markup import detect_markup
from k3lib.io.shapes import ChatBody, ChatCompletion, ChatMessage

__all__ = ["FORMATS_TRIED", "Loaded", "error_message", "find_completion", "is_chunk_list", "load_text", "to_plain"]

# What `inspect_tool_reply` tried, for the one line a refused text gets.
FORMATS_TRIED = ("a JSON body (whole or cut short), an SSE capture (`data: {...}` lines), a list of chunks, an "
                 "OpenAI SDK repr (ChatCompletion, Responses events), an error body, or assistant text with "
                 "tool-call markup")

# A reply this large is a misdirected file, not a chat completion; bound the work.
_MAX_CHARS = 20_000_000

_FENCE = re.compile(r"^\s*```[\w-]*\s*$|^\s*~~~[\w-]*\s*$")
_PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.|In \[\d+\]:|Out\[\d+\]:|\$|#)\s?")
_SDK_START = re.compile(r"\b(?:ChatCompletion(?:Chunk)?|ParsedChatCompletion(?:\[[\w\[\], ]*\])?)\(")


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


_RESPONSES_START = re.compile(r"\bResponse[A-Za-z]*Event\(|\bResponse\((?=.*\boutput=)")


@dataclass(frozen=True)
class Loaded:
    value: Any
    source_format: str
    cut: CutJson | None = None           # a JSON body cut short, with the containers still open at the cut
    truncated: bool = False


def load_text(text: str) -> Loaded:
    if len(text) > _MAX_CHARS:
        raise ArtifactError(f"the reply is {len(text)} characters long: not a chat completion")
    body = _strip_paste(text).strip()
    if not body:
        raise ArtifactError("the reply is empty")
    if re.search(r"^\s*data:", body, re.M):
        sse = parse_sse_chunks(body)
        if sse:
            return Loaded(sse, "sse", truncated=_sse_cut(body))
    value = json_or_none(body)
    if value is not None:
        # One JSON object per line is a chunk log; a single object is a body.
        return Loaded(value, "json")
    lines = [ln for ln in body.split("\n") if ln.strip().startswith("{")]
    if len(lines) > 1:
        chunks = [c for c in (json_or_none(ln.strip()) for ln in lines) if isinstance(c, dict)]
        if len(chunks) > 1 and is_chunk_list(chunks):
            return Loaded(chunks, "chunks", truncated=len(chunks) < len(lines))
    if _RESPONSES_START.search(body):
        # Responses-API events printed one per line (`for event in stream: print(event)`); the last may be cut.
        reprs = [ln[m.start():] for ln in body.split("\n") if (m := _RESPONSES_START.search(ln))]
        parsed = [_parse_repr(r) for r in reprs]
        events = [p for p in parsed if isinstance(p, dict)]
        cut_events = len(events) < len(parsed)
        if parsed and parsed[-1] is None and reprs[-1].startswith("ResponseFunctionCallArgumentsDoneEvent("):
            # Cut inside the "arguments done" event: every delta came before it.
            events.append({"type": DONE_CUT})
        if events:
            return Loaded(events if len(reprs) > 1 or "Event(" in reprs[0] else events[0], "sdk_repr",
                          truncated=cut_events)
    m = _SDK_START.search(body)
    if m:
        # One repr per line for SDK stream captures (ChatCompletionChunk(...)).
        reprs = [ln[_SDK_START.search(ln).start():] for ln in body.split("\n")  # type: ignore[union-attr]
                 if _SDK_START.search(ln)]
        if len(reprs) > 1 and "ChatCompletionChunk(" in body:
            parsed = [p for p in (_parse_repr(r) for r in reprs) if isinstance(p, dict)]
            if parsed:
                return Loaded(parsed, "sdk_repr", truncated=len(parsed) < len(reprs))
        value = _parse_repr(body[m.start():])
        if isinstance(value, dict):
            return Loaded(value, "sdk_repr")
    value = _parse_repr(body)
    if isinstance(value, (dict, list)):
        return Loaded(value, "python_repr")
    cut = read_cut_json(body)
    if cut is not None and not cut.complete and isinstance(cut.value, dict):
        # A pretty-printed body pasted up to a line limit: read what is there.
        return Loaded(cut.value, "json", cut=cut, truncated=True)
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
        if find_completion(value)[0] is not None or is_chunk_list(value) or error_message(value):
            return Loaded(value, "json")
    if detect_markup(body):
        # The assistant's text alone, as a chat UI or a log shows it: content with no structured call.
        return Loaded({"choices": [{"index": 0, "message": {"role": "assistant", "content": body}}]}, "content")
    raise ArtifactError(f"this is not a chat-completion reply: tried {FORMATS_TRIED}")


def _sse_cut(body: str) -> bool:
    """An SSE capture that ends before `data: [DONE]` and inside a chunk."""
    last = body.rstrip().rsplit("\n", 1)[-1].strip()
    if not last.startswith("data:"):
        return False
    payload = last[5:].strip()
    return payload != "[DONE]" and json_or_none(payload) is None


def error_message(value: Any) -> str | None:
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


def to_plain(obj: Any) -> Any:
    # SDK objects (pydantic models) become dicts; anything else is taken as is.
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return dump()
        except Exception as exc:  # a foreign object's own failure  # noqa: BLE001
            raise ArtifactError(f"could not read the reply object: {exc}") from exc
    return obj


def find_completion(value: Any, depth: int = 0) -> tuple[ChatCompletion | None, ChatBody | None]:
    """(completion, request) from a reply, a {request, response} pair or a wrapper such as {"body": …}."""
    if depth > 4 or not isinstance(value, dict):
        return None, None
    if "choices" in value or "delta" in value:
        return cast(ChatCompletion, value), None
    request = value.get("request") if isinstance(value.get("request"), dict) else None
    for key in ("response", "reply", "body", "result", "output", "data", "completion"):
        inner = value.get(key)
        if isinstance(inner, str):
            parsed = json_or_none(inner)
            inner = parsed if parsed is not None else inner
        if isinstance(inner, list) and inner and all(isinstance(c, dict) for c in inner):
            return reassemble_stream(inner), request
        found, inner_request = find_completion(inner, depth + 1)
        if found is not None:
            return found, request or inner_request
    if "role" in value and ("content" in value or "tool_calls" in value):
        # A bare assistant message.
        return {"choices": [{"index": 0, "message": cast(ChatMessage, value)}]}, request
    return None, request


def is_chunk_list(value: Any) -> bool:
    return isinstance(value, list) and any(
        isinstance(c, dict) and (c.get("object") == "chat.completion.chunk"
                                 or any(isinstance(ch, dict) and "delta" in ch for ch in as_list(c.get("choices"))))
        for c in value)
