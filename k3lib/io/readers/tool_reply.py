"""Chat-completion reply reader for tool calls: structured `tool_calls` (streams reassembled from deltas),
their arguments' JSON validity, and tool-call markup leaked into content, reasoning or a function name.
Accepts a JSON body (whole or cut short), an SSE capture, a list of chunks, a Python dict repr, an OpenAI SDK repr
of a Chat Completion or of Responses-API events, an error body, or the assistant's text alone when it carries
tool-call markup (`reply_shapes` and `reply_stream` read those shapes; this module classifies what they read)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from k3lib.core.errors import ArtifactError
from k3lib.io.chatstream import ToolCall
from k3lib.io.readers._cutjson import CutJson, CutText
from k3lib.io.readers.reply_shapes import (
    FORMATS_TRIED,
    Loaded,
    error_message,
    find_completion,
    is_chunk_list,
    load_text,
    to_plain,
)
from k3lib.io.readers.reply_stream import as_list, as_mapping, from_responses, reassemble_stream
from k3lib.io.readers.tool_markup import detect_markup
from k3lib.io.shapes import ChatBody, ChatCompletion

__all__ = ["ToolCallRecord", "ToolReplyClassification", "ToolReplyJson", "classify_tool_reply", "inspect_tool_reply"]

#: The kit's one tool-call record; the reader's name for it stays importable.
ToolCallRecord = ToolCall


class ToolReplyJson(TypedDict):
    """`k3 inspect tool-reply --json` (schemas/inspect/tool-reply.schema.json)."""

    has_tool_calls: bool | None
    leaked_markup: str | None
    arguments_valid_json: bool | None
    function_names: list[str]
    finish_reason: str | None
    source_format: str
    truncated: bool
    error: str | None


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

    def as_dict(self) -> ToolReplyJson:
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
# Classification


def _record(index: int, call: Any) -> ToolCall | None:
    if not isinstance(call, Mapping):
        return None
    fn = as_mapping(call.get("function"))
    # A name the text ends inside was not seen whole: unknown, not wrong (cut arguments: see ToolCall).
    name = fn.get("name") if isinstance(fn.get("name"), str) and not isinstance(fn.get("name"), CutText) else None
    raw_index = call.get("index")
    idx = raw_index if isinstance(raw_index, int) else index
    return ToolCall(index=idx, id=call.get("id") if isinstance(call.get("id"), str) else None,
                    type=call.get("type") if isinstance(call.get("type"), str) else None,
                    name=name, arguments=fn.get("arguments"))


def _offered(request: ChatBody | None) -> tuple[str, ...] | None:
    if not request:
        return None
    names = []
    for tool in as_list(request.get("tools")):
        if isinstance(tool, Mapping):
            raw_fn = tool.get("function")
            fn = raw_fn if isinstance(raw_fn, Mapping) else tool
            if isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return tuple(names) if names or "tools" in request else None


def _classify_data(value: Any, source_format: str, loaded: Loaded | None = None) -> ToolReplyClassification:
    value = to_plain(value)
    truncated = bool(loaded and loaded.truncated)
    cut = loaded.cut if loaded else None
    error = error_message(value)
    if error is not None:
        return ToolReplyClassification(
            has_tool_calls=False, function_names=(), leaked_markup=None, arguments_valid_json=None, tool_calls=(),
            content=None, reasoning=None, finish_reason=None, source_format=source_format, leak_location=None,
            offered_tools=None, unknown_function_names=(), truncated=truncated, error=error)
    completion, request, source_format = _completion(value, source_format, truncated)
    unseen = truncated and _message_unseen(completion, cut)
    contents, reasonings, calls, finish_reason = _read_choices(completion, cut)
    content = "".join(contents) if contents else None
    reasoning = "\n".join(reasonings) if reasonings else None
    leak, where = _leak(content, reasoning, calls)
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


def _completion(value: Any, source_format: str,
                truncated: bool) -> tuple[ChatCompletion, ChatBody | None, str]:
    """The chat completion in `value` (a Responses reply, chunks reassembled, a wrapped or listed reply), the request
    found beside it, and the format read. Raises ArtifactError when there is none, or its `choices` is no list."""
    request: ChatBody | None = None
    if isinstance(value, list) and not value:
        raise ArtifactError(f"an empty list: no chunk and no reply in it (tried {FORMATS_TRIED})")
    responses = from_responses(value, truncated)
    if responses is not None:
        completion: ChatCompletion | None = responses
    elif is_chunk_list(value):
        completion = reassemble_stream(value)
        source_format = source_format if source_format in ("sse", "sdk_repr") else "chunks"
    elif isinstance(value, list):
        # A list holding one completion (e.g. a JSON array of one reply).
        completion = next((find_completion(v)[0] for v in value if find_completion(v)[0] is not None), None)
    else:
        completion, request = find_completion(value)
        if completion is not None and "delta" in completion:
            completion = reassemble_stream([completion])
        elif completion is not None and any(isinstance(c, Mapping) and "delta" in c
                                            for c in as_list(completion.get("choices"))):
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
    return completion, request, source_format


def _read_choices(completion: Mapping[str, Any],
                  cut: CutJson | None) -> tuple[list[str], list[str], list[ToolCall], str | None]:
    """Every choice's content parts, reasoning texts (each once) and tool calls, and the first finish reason."""
    contents: list[str] = []
    reasonings: list[str] = []
    calls: list[ToolCall] = []
    finish_reason = None
    for cpos, choice in enumerate(as_list(completion.get("choices"))):
        if not isinstance(choice, Mapping):
            continue
        message = as_mapping(choice.get("message"))
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
        raw_calls = as_list(message.get("tool_calls"))
        if cut is not None:
            raw_calls = [_mark_unseen(call, cut, ("choices", cpos, "message", "tool_calls", i))
                         for i, call in enumerate(raw_calls)]
        if isinstance(message.get("function_call"), Mapping):
            # The legacy single-call field is structured too.
            raw_calls = raw_calls + [{"type": "function", "function": message["function_call"]}]
        calls.extend(rec for i, call in enumerate(raw_calls) if (rec := _record(i, call)) is not None)
    return contents, reasonings, calls, finish_reason


def _leak(content: str | None, reasoning: str | None, calls: list[ToolCall]) -> tuple[str | None, str | None]:
    """The first tool-call markup leaked into the text, the reasoning or a function name, and where it was."""
    for location, text in (("content", content), ("reasoning", reasoning)):
        leak = detect_markup(text)
        if leak:
            return leak, location
    for rec in calls:
        leak = detect_markup(rec.name)
        if leak:
            return leak, "function_name"
    return None, None


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


def _message_unseen(completion: ChatCompletion, cut: CutJson | None) -> bool:
    """Whether a cut reply ends before a message was whole (then "no tool calls" cannot be told)."""
    choices = [c for c in as_list(completion.get("choices")) if isinstance(c, Mapping)]
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
        loaded = load_text(obj_or_text)
        return _classify_data(loaded.value, loaded.source_format, loaded)
    if obj_or_text is None:
        raise ArtifactError("no reply given")
    return _classify_data(obj_or_text, "dict")


def inspect_tool_reply(text: str | bytes) -> ToolReplyJson:
    """`k3 inspect tool-reply FILE --json`."""
    return classify_tool_reply(text).as_dict()
