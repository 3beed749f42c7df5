"""Resuming a capacity run that a stop or a kill cut in its session phase (`k3 validate --resume`).

The batch sets the cut attempt apart whole (`aborted/<n>/evidence/capacity/`, hashed, marked aborted) before the
axis runs again. When that attempt was cut in the middle of its session phase, with the same plan, the new attempt
does not start over: it keeps what the cut one finished, a copy read from the attempt set apart, and continues.

- Kept: every phase before the sessions (their run description, their request records, the series sampled), every
  session level that ended, and, in the level that was cut, each session that had ended (its turns, its requests).
  A session ends in the run description as it ends (`current.finished`), so a kill keeps exactly those.
- Not kept: the turns and requests of the sessions the stop cut. They stay in `aborted/<n>/` only: a judged level
  holds whole sessions, never a cut one, and no finished session's turn is sent twice.
- The cut level then holds its sessions for its duration again, numbered past every session the cut attempt started
  (a generated session is never replayed under an id already sent), and its record says what it kept
  (`resumed`). An attempt cut before its session phase, or with another plan, is not resumed: the axis runs whole.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...core.evidence import Row
from ...core.store import RunStore
from .result import DIR, GPU_JSON, METRICS_JSON, REQUESTS, RUN_JSON, SESSIONS_JSONL
from .shape import CapacityPlan

#: the run description's fields a resumed run keeps from its cut attempt (the phases before the sessions')
KEPT_FIELDS = ("steps", "long_context", "refusal", "ready", "health", "failure", "dead", "soak", "notes",
               "calibration", "model_card", "cache_config_info", "log_error")


@dataclasses.dataclass(frozen=True)
class CutSessions:
    """What a run cut in its session phase finished, read from the attempt set apart under `under`."""

    under: str
    run: Row  # the cut attempt's run description
    levels: tuple[Row, ...]  # the session levels that ended
    level: int | None  # the level the stop cut (None: cut between levels)
    finished: tuple[str, ...]  # the sessions of that level that ended
    next_session: int  # the generator's next number: past every session the cut attempt started
    turns: tuple[Row, ...]  # the kept turns (ended levels, ended sessions of the cut level)
    requests: tuple[Row, ...]  # the kept request records (the earlier phases', the kept turns')
    metrics: tuple[Row, ...]
    gpu: tuple[Row, ...]

    @property
    def kept_phases(self) -> list[Row]:
        return [p for p in self.run.get("phases") or [] if p.get("phase") != "sessions"]

    def kept_state(self) -> Row:
        """The run description's fields of the phases before the sessions, as the cut attempt left them; a failure
        or a health poll of the cut level is the cut attempt's, not kept."""
        state = {k: self.run.get(k) for k in KEPT_FIELDS}
        sent = {t.get("request_id") for t in self.turns}
        failure = state.get("failure")
        if isinstance(failure, dict) and failure.get("phase") == "sessions" and failure.get("request_id") not in sent:
            state["failure"] = None
        ended = max((lv.get("end_wall") or 0 for lv in self.levels), default=0)
        state["health"] = [h for h in state.get("health") or []
                           if h.get("phase") != "sessions" or (h.get("t_wall") or 0) <= ended]
        return state

    def level_turns(self, level: int) -> list[Row]:
        return [t for t in self.turns if t.get("level") == level] if level == self.level else []


def _latest_attempt(store: RunStore) -> str | None:
    """The latest attempt set apart that holds capacity evidence (`aborted/<n>`), or None."""
    seen = sorted((int(p.name) for p in store.path("aborted").glob("*") if p.name.isdigit()), reverse=True)
    return next((f"aborted/{n}" for n in seen if store.path(f"aborted/{n}/{DIR}").is_dir()), None)


def _cut_in_sessions(run: Any, plan: CapacityPlan) -> bool:
    if not isinstance(run, dict) or run.get("dead") or not isinstance(run.get("sessions"), dict):
        return False
    phases = run.get("phases") or []
    cut = [p for p in phases if p.get("phase") == "sessions" and p.get("status") == "running"]
    return bool(cut) and plan.model_dump(mode="json") == run.get("plan")


def cut_sessions(store: RunStore, plan: CapacityPlan) -> CutSessions | None:
    """The latest cut attempt, when it was cut in its session phase under the same plan and nothing of this attempt
    was written yet; None otherwise (the axis then runs whole)."""
    under = _latest_attempt(store)
    if under is None or store.path(RUN_JSON).exists() or store.path(REQUESTS).exists():
        return None
    rel = f"{under}/{RUN_JSON}"
    run = store.read_json(rel) if store.path(rel).is_file() else None
    if not _cut_in_sessions(run, plan):
        return None
    assert isinstance(run, dict)
    sessions = run["sessions"]
    current = sessions.get("current") or {}
    levels = tuple(lv for lv in sessions.get("levels") or [] if isinstance(lv, dict))
    ended = {lv.get("sessions") for lv in levels}
    level = current.get("sessions")
    finished = tuple(str(s) for s in current.get("finished") or [])

    def stream(name: str) -> list[Row]:
        return store.read_jsonl(f"{under}/{name}") if store.path(f"{under}/{name}").is_file() else []

    turns = [t for t in stream(SESSIONS_JSONL)
             if t.get("level") in ended or (t.get("level") == level and t.get("session") in finished)]
    sent = {t.get("request_id") for t in turns}
    requests = [r for r in stream(REQUESTS) if r.get("phase") != "sessions" or r.get("request_id") in sent]
    metrics = store.read_json(f"{under}/{METRICS_JSON}") if store.path(f"{under}/{METRICS_JSON}").is_file() else []
    gpu = store.read_json(f"{under}/{GPU_JSON}") if store.path(f"{under}/{GPU_JSON}").is_file() else []
    return CutSessions(under=under, run=run, levels=levels, level=level, finished=finished,
                       next_session=int(current.get("next") or sessions.get("next") or 0), turns=tuple(turns),
                       requests=tuple(requests), metrics=tuple(metrics), gpu=tuple(gpu))


def restore(store: RunStore, cut: CutSessions) -> None:
    """Write the kept records into this attempt's folder, before it sends anything."""
    for r in cut.requests:
        store.append_jsonl(REQUESTS, r)
    for t in cut.turns:
        store.append_jsonl(SESSIONS_JSONL, t)
