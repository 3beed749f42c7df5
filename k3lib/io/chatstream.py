"""Streamed chat completions, read once for the whole kit: SSE framing and tool-call delta assembly.

The live client (`k3lib.io.client`), the artifact reader (`k3lib.io.readers.tool_reply`) and the renewal drill all frame
`text/event-stream` bodies with `SSEDecoder` and rebuild tool calls with `ToolCallAssembler`, so one stream gives
the same calls whichever path reads it. Pure Python, no third-party imports: a foundation module.

Tool-call deltas follow OpenAI's streaming rules as vLLM sends them (`DeltaToolCall`): the first delta of call *i*
carries `index=i`, `id`, `type` and `function.name`; later ones carry `index` and an `arguments` fragment to
concatenate (some parsers, e.g. kimi_k3, send the whole string at once). Servers that stray from this are read so:

- no `index`: a delta whose `id` differs from the last call's opens a new call (so does one with an `id` and a
  name when the last call has a name but no id); one without an `id` (or with the same one) continues the last;
- `id` and `type` repeated on later deltas are kept once (the first one wins);
- `function.name` repeated whole on later deltas is kept once; a different piece is appended (a name streamed in
  pieces, `get_` + `weather`);
- `arguments` sent as a JSON object instead of a string is kept as the object (the reader reports it as a broken
  contract; the client re-serialises it, as for a non-streamed reply).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Final, TypedDict

from pydantic import computed_field

from k3lib.core.record import Record
from k3lib.io.shapes import ToolCallJson

__all__ = ["PARSE", "SSEDecoder", "ToolCall", "ToolCallAssembler", "sse_payloads"]

#: The parse that `ToolCall.model_dump()` adds to the fields; `model_dump(exclude=PARSE)` gives the fields alone.
PARSE: Final[set[str]] = {"parsed", "json_error"}


class SSEDecoder:
    """Incremental `text/event-stream` framing (WHATWG rules, the `data` field only).

    Feed it lines without their newline; `line` returns an event's payload (its `data:` lines joined by "\\n")
    when a blank line ends the event, else None. `flush` ends the current event now (end of body, or a capture
    that dropped the blank line). Comments (`:`), `event:`, `id:` and `retry:` lines carry nothing for chat
    completions and are skipped."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: list[str] = []

    @property
    def buffered(self) -> str | None:
        """The payload of the event being read, None when no `data:` line came since the last event."""
        return "\n".join(self._data) if self._data else None

    def line(self, line: str) -> str | None:
        if line.endswith("\r"):
            line = line[:-1]
        if line == "":
            return self.flush()
        if line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def flush(self) -> str | None:
        if not self._data:
            return None
        payload = "\n".join(self._data)
        self._data = []
        return payload


def sse_payloads(lines: Iterable[str]) -> Iterator[str]:
    """Every event payload of a stream given as lines (`[DONE]` included); a last event without its blank line
    is returned too."""
    decoder = SSEDecoder()
    for line in lines:
        payload = decoder.line(line)
        if payload is not None:
            yield payload
    payload = decoder.flush()
    if payload is not None:
        yield payload


def _has_name(delta: Mapping[str, Any]) -> bool:
    fn = delta.get("function")
    return isinstance(fn, Mapping) and isinstance(fn.get("name"), str) and bool(fn["name"])


class ToolCall(Record):
    """One tool call as received: the kit's one record of it, for the live client (streamed or not), the agent
    and paths checks, and the reply reader.

    `arguments` is what the server sent, normally a JSON *string* (OpenAI's contract); an object there breaks the
    contract and is kept as received. The fields are the record as the client's records store it
    (`model_dump(exclude=PARSE)`); `model_dump()` adds the parse, `parsed` and `json_error`, as the agent and paths
    records store a call, and `model_validate` reads either back (the parse is read again from `arguments`).
    `parsed`, `json_error` and `arguments_valid_json` are read from `arguments` once, on first use. An `arguments`
    string that is marked `cut` (the reader's `CutText`: the reply ends inside it) is neither valid nor invalid: it
    was not received whole."""

    index: int
    id: Any = None  # a string by contract; kept as received
    type: Any = None
    name: Any = None
    arguments: Any = None

    @cached_property
    def _judged(self) -> tuple[bool | None, Any, str | None]:
        args = self.arguments
        if isinstance(args, str):
            if getattr(args, "cut", False):
                return None, None, "the reply ends inside the arguments"
            try:
                return True, json.loads(args), None
            except (ValueError, RecursionError) as exc:
                return False, None, f"invalid JSON: {exc}"
        if args is None:
            return False, None, "arguments missing"
        return False, None, f"arguments are a JSON {type(args).__name__}, not a string"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def parsed(self) -> Any:
        """`json.loads(arguments)` when they are a valid JSON string, else None."""
        return self._judged[1]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def json_error(self) -> str | None:
        """Why the arguments are not a valid JSON string; None when they are."""
        return self._judged[2]

    @property
    def arguments_valid_json(self) -> bool | None:
        """True/False; None when the reply ends inside the arguments."""
        return self._judged[0]

    def to_openai(self) -> ToolCallJson:
        """The shape to send back in an assistant history message."""
        return {"id": self.id, "type": self.type or "function",
                "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_openai(cls, index: int, raw: Mapping[str, Any]) -> ToolCall:
        """A message's `{"id", "type", "function": {"name", "arguments"}}` at position `index`."""
        raw_fn = raw.get("function")
        fn: Mapping[str, Any] = raw_fn if isinstance(raw_fn, Mapping) else {}
        return cls(index=index, id=raw.get("id"), type=raw.get("type"), name=fn.get("name"),
                   arguments=fn.get("arguments"))


class _Gathered(TypedDict):
    """One call being assembled: `args` the string pieces, `obj` a non-string arguments value."""

    id: Any
    type: Any
    name: Any
    args: list[str]
    obj: Any


class ToolCallAssembler:
    """Rebuilds the tool calls of one choice from its streamed `delta.tool_calls` lists (rules in the module
    docstring). `calls()` gives message-shaped dicts with `arguments` as received; `result()` the client's
    `ToolCall` values."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        #: index → {"id", "type", "name", "args": list of str pieces, "obj": a non-string arguments value}
        self._calls: dict[int, _Gathered] = {}

    def feed(self, deltas: Sequence[Any]) -> None:
        calls = self._calls
        for delta in deltas:
            if not isinstance(delta, Mapping):
                continue
            index = delta.get("index")
            call_id = delta.get("id") or None
            if not isinstance(index, int) or isinstance(index, bool):
                if not calls:
                    index = 0
                else:
                    index = max(calls)
                    last = calls[index]
                    if call_id is not None and call_id != last["id"] and (
                            last["id"] is not None or (last["name"] is not None and _has_name(delta))):
                        index += 1
            call = calls.get(index)
            if call is None:
                call = calls[index] = {"id": None, "type": None, "name": None, "args": [], "obj": None}
            if call_id is not None and call["id"] is None:
                call["id"] = call_id
            if delta.get("type") and call["type"] is None:
                call["type"] = delta["type"]
            fn = delta.get("function")
            if not isinstance(fn, Mapping):
                continue
            name = fn.get("name")
            if isinstance(name, str) and name:
                current = call["name"]
                if current is None:
                    call["name"] = name
                elif name != current:
                    call["name"] = current + name
            args = fn.get("arguments")
            if isinstance(args, str):
                call["args"].append(args)
            elif args is not None:
                call["obj"], call["args"] = args, []

    def calls(self) -> list[ToolCallJson]:
        """`[{"id", "type", "function": {"name", "arguments"}}]` in index order; `arguments` is None when no
        fragment came, the joined string, or the object a server sent instead of a string."""
        out: list[ToolCallJson] = []
        for _, c in sorted(self._calls.items()):
            args: Any = "".join(c["args"]) if c["args"] else c["obj"]
            out.append({"id": c["id"], "type": c["type"], "function": {"name": c["name"], "arguments": args}})
        return out

    def result(self) -> tuple[ToolCall, ...]:
        out = []
        for i, c in sorted(self._calls.items()):
            if c["args"]:
                args = "".join(c["args"])
            else:
                # an object breaks the contract: kept re-serialised, as the non-streamed path does
                args = "" if c["obj"] is None else json.dumps(c["obj"])
            out.append(ToolCall(index=i, id=c["id"], type=c["type"], name=c["name"], arguments=args))
        return tuple(out)
