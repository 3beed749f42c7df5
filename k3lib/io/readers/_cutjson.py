"""A JSON reader for texts cut short: a pretty-printed reply pasted up to a line limit, a capture that stopped
mid-body. It returns what the prefix holds; containers still open at the cut are kept as far as they go."""

from __future__ import annotations

import json.decoder
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from k3lib.core.jsonvalue import JsonObject, JsonValue

__all__ = ["CutJson", "CutText", "read_cut_json"]

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_NUMBER_CHARS = re.compile(r"-?[0-9][0-9.eE+-]*|-$")
_WS = re.compile(r"[ \t\n\r]*")
_LITERALS = {"true": True, "false": False, "null": None}
# Deeper than any reply; a hostile paste must not exhaust memory with open brackets.
_MAX_DEPTH = 256
# json.decoder's string scanner (the C one where built, else the Python one); typeshed does not declare it
_scanstring: Callable[[str, int, bool], tuple[str, int]] = vars(json.decoder)["scanstring"]


class CutText(str):
    """A string value the text ends inside: what was received of it, not the whole value."""

    #: read by `k3lib.io.chatstream.ToolCall`: arguments received in part are neither valid nor invalid JSON
    cut = True


@dataclass(frozen=True)
class CutJson:
    value: Any
    complete: bool                                   # the text held the whole value
    open_paths: tuple[tuple[str | int, ...], ...]    # containers the text ends inside, outermost first

    def is_open(self, path: tuple[str | int, ...]) -> bool:
        """Whether the container at `path` was still being received when the text ended."""
        return path in self.open_paths


class _Garbage(Exception):
    """The text is not the start of a JSON value (as opposed to a JSON value cut short)."""


def read_cut_json(text: str) -> CutJson | None:
    """The JSON object or array at the start of `text`, complete or cut; None when the text is neither.

    A key cut mid-way is dropped; a number or literal cut mid-way is dropped; a string value cut mid-way is kept as
    a `CutText`. Text after a complete value is ignored."""
    try:
        return _Reader(text).read()
    except (_Garbage, RecursionError, MemoryError):
        return None


class _Frame:
    __slots__ = ("container", "path", "state", "key")

    def __init__(self, container: JsonObject | list[JsonValue], path: tuple[str | int, ...]) -> None:
        self.container = container
        self.path = path
        # dict: "key" (a key or `}`), "colon", "value", "next" (`,` or `}`); list: "value", "next"
        self.state = "key" if isinstance(container, dict) else "value"
        self.key: str | None = None


class _Reader:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.stack: list[_Frame] = []
        self.root: Any = None

    def ws(self) -> None:
        self.i = _WS.match(self.s, self.i).end()  # type: ignore[union-attr]

    def cut(self) -> CutJson:
        return CutJson(self.root, False, tuple(f.path for f in self.stack))

    def read(self) -> CutJson:
        self.ws()
        if self.i >= self.n or self.s[self.i] not in "{[":
            raise _Garbage
        while True:
            self.ws()
            if self.i >= self.n:
                return self.cut()
            if not self.stack and self.root is not None:
                return CutJson(self.root, True, ())
            if self.stack:
                done = self.step(self.stack[-1])
                if done is not None:
                    return done
            else:
                result = self.value(())
                if result is not None:
                    return result

    def step(self, frame: _Frame) -> CutJson | None:
        c = self.s[self.i]
        is_dict = isinstance(frame.container, dict)
        close = "}" if is_dict else "]"
        if frame.state in ("key", "next") or (not is_dict and frame.state == "value" and not frame.container):
            if c == close and (frame.state == "next" or not frame.container):
                self.i += 1
                self.stack.pop()
                if not self.stack:
                    return CutJson(self.root, True, ())
                return None
        if frame.state == "next":
            if c != ",":
                raise _Garbage
            self.i += 1
            frame.state = "key" if is_dict else "value"
            return None
        if frame.state == "key":
            if c != '"':
                raise _Garbage
            key = self.string()
            if key is None or isinstance(key, CutText):
                return self.cut()
            frame.key, frame.state = key, "colon"
            return None
        if frame.state == "colon":
            if c != ":":
                raise _Garbage
            self.i += 1
            frame.state = "value"
            return None
        if is_dict:
            assert frame.key is not None  # the "key" state set it before "colon" and "value"
            path = frame.path + (frame.key,)
        else:
            path = frame.path + (len(frame.container),)
        frame.state = "next"
        return self.value(path)

    def attach(self, value: Any) -> None:
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        if isinstance(frame.container, dict):
            frame.container[frame.key] = value  # type: ignore[index]
        else:
            frame.container.append(value)

    def value(self, path: tuple[str | int, ...]) -> CutJson | None:
        c = self.s[self.i]
        if c in "{[":
            if len(self.stack) >= _MAX_DEPTH:
                raise _Garbage
            container: JsonObject | list[JsonValue] = {} if c == "{" else []
            self.attach(container)
            self.stack.append(_Frame(container, path))
            self.i += 1
            return None
        if c == '"':
            text = self.string()
            if isinstance(text, CutText):
                self.attach(text)
                return self.cut()
            self.attach(text)
            return None
        m = _NUMBER_CHARS.match(self.s, self.i)
        if m:
            if m.end() >= self.n:
                return self.cut()  # the number may go on past the cut ("1." of "1.5")
            token = m.group(0)
            if not _NUMBER.fullmatch(token):
                raise _Garbage
            self.attach(float(token) if any(ch in token for ch in ".eE") else int(token))
            self.i = m.end()
            return None
        for word, literal in _LITERALS.items():
            if self.s.startswith(word, self.i):
                self.attach(literal)
                self.i += len(word)
                return None
            if word.startswith(self.s[self.i:]):
                return self.cut()
        raise _Garbage

    def string(self) -> str | None:
        try:
            text, end = _scanstring(self.s, self.i + 1, False)
        except ValueError:
            tail = self.s[self.i + 1:]
            if re.search(r'(?<!\\)"', tail):
                raise _Garbage from None  # a closed string with a bad escape: not JSON
            # The text ends inside the string: keep what arrived, minus a half escape sequence.
            tail = re.sub(r"\\(?:u[0-9a-fA-F]{0,3})?$", "", tail)
            try:
                partial = json.loads('"' + tail + '"', strict=False)
            except ValueError:
                partial = tail
            self.i = self.n
            return CutText(partial)
        self.i = end
        return text
