"""The session trace: one JSON line per turn of an agent session (docs/sessions.md).

A turn carries its session id and index, the think time before it, the messages it adds (user text or tool results;
for a text-less trace, their token counts), the system prompt and tools (turn 0 only: every later turn resends them
byte-identical), `max_tokens` as a ceiling, and whether a tool call is expected and of which function. A tool result
names the position of the live call it answers in the server's previous reply (`call`), never a recorded id: the
replay binds it to the id the server sent (k3lib.io.sessions.replay).

Reading checks the whole file and says, in one line, which line is wrong and how (`BadInputError`): sessions whose
turns start at 0 and follow each other, tools and system only on turn 0, a tool result only after a turn that
expected a call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Required, TypedDict, cast

from ...core.errors import BadInputError
from ...core.store import atomic_write_bytes
from ..shapes import ToolDef

__all__ = ["SessionTurn", "TraceMessage", "group_sessions", "parse_turn", "read_trace", "trace_lines",
           "write_trace"]

#: think times above this are capped, as AIPerf (60 s) and inference-perf cap recorded idle gaps
THINK_CAP_S = 60.0


class TraceMessageJson(TypedDict, total=False):
    role: Required[str]
    content: str
    tokens: int
    call: int


class TurnJson(TypedDict, total=False):
    """One line of a session trace (docs/sessions.md)."""

    session: Required[str]
    turn: Required[int]
    think_s: Required[float]
    add: Required[list[TraceMessageJson]]
    max_tokens: Required[int]
    expect: Required[str]  # "tool" or "text"
    function: str
    system: str
    system_tokens: int
    tools: list[ToolDef]


@dataclass(frozen=True)
class TraceMessage:
    """One message a turn adds: `role` "user" or "tool"; `content` text, or `tokens` for a text-less trace (the
    replay writes that many tokens of deterministic words); `call`: for a tool result, the position of the live
    call it answers in the previous reply."""

    role: str
    content: str | None = None
    tokens: int | None = None
    call: int | None = None

    def to_json(self) -> TraceMessageJson:
        out: TraceMessageJson = {"role": self.role}
        if self.content is not None:
            out["content"] = self.content
        if self.tokens is not None:
            out["tokens"] = self.tokens
        if self.call is not None:
            out["call"] = self.call
        return out


@dataclass(frozen=True)
class SessionTurn:
    session: str
    turn: int
    think_s: float
    add: tuple[TraceMessage, ...]
    max_tokens: int
    expect_tool: bool = False
    function: str | None = None
    system: str | None = None  # turn 0: the system prompt, byte-identical across sessions
    system_tokens: int | None = None  # turn 0 of a text-less trace: the shared system prefix, in tokens
    tools: tuple[Mapping[str, Any], ...] = field(default=())  # turn 0

    def to_json(self) -> TurnJson:
        out: TurnJson = {"session": self.session, "turn": self.turn, "think_s": round(self.think_s, 6),
                               "add": [m.to_json() for m in self.add], "max_tokens": self.max_tokens,
                               "expect": "tool" if self.expect_tool else "text"}
        if self.function:
            out["function"] = self.function
        if self.system is not None:
            out["system"] = self.system
        if self.system_tokens is not None:
            out["system_tokens"] = self.system_tokens
        if self.tools:
            out["tools"] = [cast(ToolDef, dict(t)) for t in self.tools]
        return out


def _count(value: Any, what: str, *, positive: bool = True) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        raise ValueError(f"{what} must be an integer {'≥ 1' if positive else '≥ 0'}, got {value!r}")
    return value


def _message(raw: Any, i: int) -> TraceMessage:
    if not isinstance(raw, Mapping):
        raise ValueError(f"add[{i}] must be an object {{role, content | tokens}}, got {type(raw).__name__}")
    role = raw.get("role")
    if role not in ("user", "tool"):
        raise ValueError(f"add[{i}].role must be \"user\" or \"tool\", got {role!r}")
    content, tokens = raw.get("content"), raw.get("tokens")
    if (content is None) == (tokens is None):
        raise ValueError(f"add[{i}] needs exactly one of content (text) and tokens (a count)")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"add[{i}].content must be text, got {type(content).__name__}")
    call = raw.get("call")
    if role == "tool":
        call = _count(0 if call is None else call, f"add[{i}].call", positive=False)
    elif call is not None:
        raise ValueError(f"add[{i}]: only a tool result answers a call")
    return TraceMessage(role, content, None if tokens is None else _count(tokens, f"add[{i}].tokens"), call)


def parse_turn(raw: Any) -> SessionTurn:
    """One line's object as a turn; ValueError says what is wrong."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"a turn is a JSON object, got {type(raw).__name__}")
    session = raw.get("session")
    if not isinstance(session, (str, int)) or isinstance(session, bool) or str(session) == "":
        raise ValueError(f"session must be a non-empty id, got {session!r}")
    turn = _count(raw.get("turn"), "turn", positive=False)
    think = raw.get("think_s", 0.0)
    if isinstance(think, bool) or not isinstance(think, (int, float)) or not math.isfinite(think) or think < 0:
        raise ValueError(f"think_s must be seconds ≥ 0, got {think!r}")
    add = raw.get("add")
    if not isinstance(add, list) or not add:
        raise ValueError("add must be a non-empty list of messages")
    expect = raw.get("expect", "text")
    if expect not in ("tool", "text"):
        raise ValueError(f"expect must be \"tool\" or \"text\", got {expect!r}")
    function = raw.get("function")
    if function is not None and (not isinstance(function, str) or expect != "tool"):
        raise ValueError("function names the expected tool: a string, with expect \"tool\"")
    tools = raw.get("tools") or []
    system, system_tokens = raw.get("system"), raw.get("system_tokens")
    if turn and (tools or system is not None or system_tokens is not None):
        raise ValueError("system and tools belong to turn 0 (every later turn resends them unchanged)")
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
                                              for t in tools):
        raise ValueError("tools must be a list of {type: function, function: {name, parameters}}")
    if system is not None and not isinstance(system, str):
        raise ValueError("system must be text")
    return SessionTurn(str(session), turn, min(float(think), THINK_CAP_S), tuple(_message(m, i) for i, m in
                                                                                 enumerate(add)),
                       _count(raw.get("max_tokens"), "max_tokens"), expect == "tool", function, system,
                       None if system_tokens is None else _count(system_tokens, "system_tokens"),
                       tuple(dict(t) for t in tools))


def group_sessions(turns: Iterable[SessionTurn], source: str = "the trace") -> list[list[SessionTurn]]:
    """Turns grouped by session in the order sessions first appear, each checked: turns 0, 1, 2, … and a tool
    result only after a turn that expected a call."""
    sessions: dict[str, list[SessionTurn]] = {}
    for t in turns:
        sessions.setdefault(t.session, []).append(t)
    out = []
    for sid, rows in sessions.items():
        rows.sort(key=lambda t: t.turn)
        for i, t in enumerate(rows):
            if t.turn != i:
                raise BadInputError(f"session {sid!r}: turn {i} is missing (turns run 0, 1, 2, … once each)",
                                    source=source, field="turn")
            answers = any(m.role == "tool" for m in t.add)
            if answers and (i == 0 or not rows[i - 1].expect_tool):
                raise BadInputError(f"session {sid!r} turn {i}: a tool result follows a turn that expected no call",
                                    source=source, field="add")
        out.append(rows)
    return out


def read_trace(path: str | Path) -> list[list[SessionTurn]]:
    """A trace file (JSON lines, blank lines skipped) as its sessions."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read the session trace: {exc}", source=str(p)) from None
    turns = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            turns.append(parse_turn(json.loads(line)))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise BadInputError(f"{exc} (expected one turn per line, see docs/sessions.md)", source=str(p),
                                field=f"line {n}") from None
    if not turns:
        raise BadInputError("no turn in the session trace (expected one JSON object per line)", source=str(p))
    return group_sessions(turns, str(p))


def trace_lines(sessions: Sequence[Sequence[SessionTurn]]) -> list[str]:
    return [json.dumps(t.to_json(), ensure_ascii=False, sort_keys=True) for s in sessions for t in s]


def write_trace(path: str | Path, sessions: Sequence[Sequence[SessionTurn]]) -> Path:
    """Write sessions as a trace file (what a reader makes of a downloaded file, for the operator to keep)."""

    p = Path(path)
    atomic_write_bytes(p, ("\n".join(trace_lines(sessions)) + "\n").encode())
    return p
