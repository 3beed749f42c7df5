"""Off-hours on-call effort from PagerDuty's analytics fields: each incident's effort (the user-defined effort
when set, else the engaged seconds) spread evenly over its engaged window — first acknowledgement to resolution —
and the part outside business hours (Monday to Friday, in the responders' zone) counted as out-of-hours, per ISO
week. The zone and hours are stated in the header; an incident without the analytics fields adds nothing."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from zoneinfo import ZoneInfo

from .params import IncidentParams
from .provenance import ReviewWindow, iso_week


def off_hours_seconds(start: dt.datetime, end: dt.datetime, p: IncidentParams) -> dict[str, float]:
    """ISO week → seconds of [start, end) outside business hours, read in `p.timezone`."""
    zone = ZoneInfo(p.timezone)
    out: dict[str, float] = defaultdict(float)
    day = start.astimezone(zone).date()
    while True:
        lo = dt.datetime.combine(day, dt.time(), zone)
        hi = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), zone)
        a, b = max(start, lo), min(end, hi)
        if lo >= end:
            break
        if b > a:
            busy = 0.0
            if day.weekday() < 5:
                open_, close = (dt.datetime.combine(day, dt.time(h), zone) for h in p.business_hours)
                busy = max(0.0, (min(b, close) - max(a, open_)).total_seconds())
            if (b - a).total_seconds() > busy:
                out[iso_week(a, p.timezone)] += (b - a).total_seconds() - busy
        day += dt.timedelta(days=1)
    return dict(out)


def off_hours_effort(efforts: list[dict], p: IncidentParams, window: ReviewWindow) -> tuple[dict[str, float], list[str]]:
    """ISO week → out-of-hours effort in hours, and a note per incident that added some."""
    hours: dict[str, float] = defaultdict(float)
    notes = []
    for e in efforts:
        start, end, seconds = e["from"], max(e["to"], e["from"]), e["seconds"]
        if end == start:  # resolved at acknowledgement: the effort sits at that instant
            if not window.holds(start):
                continue
            off = off_hours_seconds(start, start + dt.timedelta(seconds=1), p)
            span = 1.0
        else:
            off = off_hours_seconds(max(start, window.start), min(end, window.end), p)
            span = (end - start).total_seconds()
        added = 0.0
        for week, s in off.items():
            hours[week] += seconds * s / span / 3600
            added += seconds * s / span / 3600
        if added:
            notes.append(f"out-of-hours: {e['id']} {added:.2f} h of {seconds / 3600:.2f} h effort")
    return dict(hours), notes
