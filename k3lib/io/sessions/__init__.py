"""Agent sessions: the trace format (`trace`), readers of the public trace shapes (`readers`), sessions generated from
the contract (`generate`) and the faithful replay client (`replay`). See docs/sessions.md."""

from __future__ import annotations

from .generate import FILLER_SAMPLE, Question, SessionShape, generate_sessions
from .readers import READERS, block_text, convert_trace
from .replay import AFFINITY_HEADER, ReplayConfig, SessionReplay, TurnRecord, call_problem, turn_record
from .trace import SessionTurn, TraceMessage, group_sessions, parse_turn, read_trace, trace_lines, write_trace

__all__ = [
    "FILLER_SAMPLE",
    "AFFINITY_HEADER",
    "READERS",
    "Question",
    "ReplayConfig",
    "SessionReplay",
    "SessionShape",
    "SessionTurn",
    "TraceMessage",
    "TurnRecord",
    "block_text",
    "call_problem",
    "convert_trace",
    "generate_sessions",
    "group_sessions",
    "parse_turn",
    "read_trace",
    "trace_lines",
    "turn_record",
    "write_trace",
]
