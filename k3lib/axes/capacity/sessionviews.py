"""The session phase for a reader: its levels, its turns (aligned with the server's series), and each session's
prompt and cached tokens turn after turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sessionjudge import align
from .run_shapes import SessionTurnRow

if TYPE_CHECKING:
    from .result import CapacityResult

__all__ = ["session_figure", "session_levels_table", "session_turns_table"]

_LEVEL_COLS = ("sessions", "status", "turns", "sessions_started", "sessions_finished", "ok", "server_errors",
               "timeouts", "cancelled", "preemptions", "ttft_p50_ms", "ttft_p95_ms", "e2e_p95_ms", "note")
_TURN_COLS = ("level", "session", "turn", "ok", "prompt_tokens", "growth_tokens", "expected_growth_tokens",
              "cached_tokens", "designed_cached_tokens", "expect_tool", "function", "tool_ok", "answered_ids",
              "ttft_ms", "max_gap_ms", "kv_usage_max", "running_max", "waiting_max", "preemptions_around", "error")


def session_levels_table(result: "CapacityResult") -> Any:
    """One row per level of concurrent sessions."""
    import pandas as pd

    levels = (result.run.get("sessions") or {}).get("levels") or []
    return pd.DataFrame([{c: lv.get(c) for c in _LEVEL_COLS} for lv in levels], columns=list(_LEVEL_COLS))


def session_turns_table(result: "CapacityResult") -> Any:
    """One row per turn: the prompt's growth, the cache it found, the tool call, the ids its results answered, its
    timing and the server's state while it ran."""
    import pandas as pd

    rows = []
    for t in align(result.sessions, result.metrics):
        ids = [a.get("id") for a in t.get("answers") or []]
        rows.append({c: t.get(c) for c in _TURN_COLS} | {"answered_ids": ", ".join(str(i) for i in ids) or None})
    return pd.DataFrame(rows, columns=list(_TURN_COLS))


def session_figure(result: "CapacityResult") -> Any:
    """Prompt tokens (line) and cached tokens (markers) per turn, one colour per session: the history grows, and a
    healthy cache keeps up with it."""
    import plotly.graph_objects as go

    fig = go.Figure()
    by_session: dict[str, list[SessionTurnRow]] = {}
    for t in result.sessions:
        if t.get("ok"):
            by_session.setdefault(str(t.get("session")), []).append(t)
    for sid, turns in by_session.items():
        turns.sort(key=lambda t: t.get("turn") or 0)
        x = [t.get("turn") for t in turns]
        fig.add_trace(go.Scatter(x=x, y=[t.get("prompt_tokens") for t in turns], mode="lines", name=f"{sid} prompt",
                                 legendgroup=sid))
        fig.add_trace(go.Scatter(x=x, y=[t.get("cached_tokens") for t in turns], mode="markers",
                                 name=f"{sid} cached", legendgroup=sid, showlegend=False))
    fig.update_layout(title="Agent sessions: prompt tokens (lines) and cached tokens (markers) per turn"
                      if by_session else "Agent sessions: no turn completed", height=420,
                      xaxis_title="turn", yaxis_title="tokens")
    return fig
