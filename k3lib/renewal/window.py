"""The review window: every input clipped to it, what fell outside counted, and how much of it each source covers.

Tasks belong to the window by their submission time, incidents by their start, hours rows by their ISO week (a
week the window touches counts; the weekly effort is then divided by the window's length in weeks, never by the
number of week labels). Nothing outside is read as evidence; the counts say what was left out. A source's
coverage is the share of the window it shows: a source that covers less than `rules.min_coverage_share` is "not
shown" — its gaps are never read as idle, nor as busy.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from typing import Any, Sequence

from ..core.errors import BadInputError
from .inputs import HoursRecord, IncidentRecord, TaskRecord, iso_week_start
from .results import Clipping
from .shapes import WindowData

DAY = dt.timedelta(days=1)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


@dataclasses.dataclass(frozen=True)
class ReviewWindow:
    """[start, end) in UTC, as the parameters' `review.series` (or an import's `--window`) state it: what the review
    reads; every task, imported amount, incident and hour is clipped to it."""

    start: dt.datetime
    end: dt.datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise BadInputError("expected the window's start and end with a UTC offset, e.g. 2026-07-24T00:00:00Z",
                                source="window")
        if self.end <= self.start:
            raise BadInputError(f"end {self.end.isoformat()} is not after start {self.start.isoformat()}",
                                source="window")

    def share(self, start: dt.datetime, end: dt.datetime) -> float:
        """The part of [start, end) inside the window (an instant: 1 inside, 0 outside)."""
        if end <= start:
            return 1.0 if self.start <= start < self.end else 0.0
        inside = (min(end, self.end) - max(start, self.start)).total_seconds()
        return max(0.0, inside) / (end - start).total_seconds()

    def label(self) -> str:
        return f"{iso(self.start)} to {iso(self.end)} (end excluded)"

    @property
    def days(self) -> float:
        return (self.end - self.start).total_seconds() / 86400

    @property
    def weeks(self) -> float:
        return self.days / 7

    def holds(self, t: dt.datetime) -> bool:
        return self.start <= t < self.end

    def day_starts(self) -> list[dt.datetime]:
        """The start of each (UTC) day the window touches."""
        first = self.start.replace(hour=0, minute=0, second=0, microsecond=0)
        out, t = [], first
        while t < self.end:
            out.append(t)
            t += DAY
        return out

    def overlap_s(self, a: dt.datetime, b: dt.datetime) -> float:
        return max(0.0, (min(b, self.end) - max(a, self.start)).total_seconds())

    def describe(self) -> WindowData:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "days": round(self.days, 3)}


@dataclasses.dataclass(frozen=True)
class Clipped:
    """What one input kept inside the window and what it left out (counted, with the nearest examples)."""

    kept: tuple[Any, ...]
    outside: int
    examples: tuple[str, ...]  # up to five ids or labels of the rows left out

    def describe(self) -> Clipping:
        return Clipping(inside=len(self.kept), outside=self.outside, outside_examples=self.examples)


def clip_tasks(tasks: Sequence[TaskRecord], window: ReviewWindow) -> Clipped:
    """Tasks submitted inside the window; a task submitted before it (or after it) is another window's work."""
    kept = tuple(t for t in tasks if window.holds(t.submitted_at))
    out = [t for t in tasks if not window.holds(t.submitted_at)]
    return Clipped(kept, len(out), tuple(f"{t.task_id} ({t.path}, {t.submitted_at.date()})" for t in out[:5]))


def clip_incidents(incidents: Sequence[IncidentRecord], window: ReviewWindow) -> Clipped:
    """Incidents that started inside the window (a recovery in another year answers nothing about this one)."""
    kept = tuple(i for i in incidents if window.holds(i.started_at))
    out = [i for i in incidents if not window.holds(i.started_at)]
    return Clipped(kept, len(out), tuple(f"{i.id} ({i.started_at.date()})" for i in out[:5]))


def week_overlap(week: str, window: ReviewWindow) -> float:
    """The share (0–1) of the ISO week `week` (YYYY-Www) that lies inside the window."""
    start = iso_week_start(week)
    return window.overlap_s(start, start + 7 * DAY) / (7 * 86400)


def clip_hours(hours: Sequence[HoursRecord], window: ReviewWindow) -> Clipped:
    """Hours rows of the ISO weeks the window touches; rows of other weeks are left out and counted. A week the
    window touches only in part counts whole: its row is a weekly total the review cannot split (`k3 import` writes
    only the worklogs dated inside the window), and counting it whole never lowers the effort."""
    kept = tuple(h for h in hours if week_overlap(h.week, window) > 0)
    out = [h for h in hours if week_overlap(h.week, window) <= 0]
    return Clipped(kept, len(out), tuple(sorted({f"{h.week} {h.category}" for h in out}))[:5])


# --- coverage ------------------------------------------------------------------------------------------------------

def task_log_coverage(tasks: Sequence[TaskRecord], window: ReviewWindow) -> float | None:
    """The share of the window's days on which the self-hosted task log records at least one submitted task (a
    log exported for one week of three covers a third). None: a window without days."""
    days = window.day_starts()
    if not days:
        return None
    seen = {t.submitted_at.astimezone(dt.timezone.utc).date() for t in tasks if t.path == "self-hosted"}
    return round(sum(d.date() in seen for d in days) / len(days), 4)


def hours_coverage(hours: Sequence[HoursRecord], window: ReviewWindow) -> float | None:
    """The share of the window inside ISO weeks the hours file has at least one row for."""
    weeks = {h.week for h in hours}
    if window.days <= 0:
        return None
    inside = sum(window.overlap_s(iso_week_start(w), iso_week_start(w) + 7 * DAY) for w in weeks)
    return round(min(1.0, inside / (window.days * 86400)), 4)


def by_category(tasks: Sequence[TaskRecord]) -> dict[str, int]:
    return dict(sorted(Counter(t.category for t in tasks).items()))
