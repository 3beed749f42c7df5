"""PagerDuty (REST `incidents`, Analytics raw incidents; JSON or CSV) and Opsgenie incidents as the review's
incidents file: start, recovery minutes on a stated clock, detection where the record shows it, and the class and
the drill's four answers from the team's postmortems (a small CSV keyed by incident id) — blank otherwise, listed
one line per incident to fill, and never counted as favourable by the review."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
from pathlib import Path
from typing import Any, TypedDict

from ...core.errors import BadInputError
from ..inputs import FIVE_QUESTIONS, INCIDENT_COLUMNS, IncidentCategory, read_incidents
from .params import IncidentParams
from .provenance import Provenance, ReviewWindow, iso, write_text
from .tables import Row, RowError, blank, cell, looks_like, mapping, obj, read_rows, row_error, to_float, to_time

CLASSES: tuple[str, ...] = IncidentCategory.__args__  # type: ignore[attr-defined]
ANSWERS = FIVE_QUESTIONS[1:]  # the drill's four: no incident tool carries them
AUTOMATIC = {"integration_reference", "service_reference", "inbound_integration_reference", "events_api_v2",
             "events_api", "api", "email_integration", "nagios", "monitoring"}
MANUAL = {"user_reference", "web_trigger", "user", "mobile", "slack"}


Answers = dict[str, str | bool | None]  # an incident's category and five answers by name (None: blank)
# PagerDuty analytics' effort: seconds, and the engaged window from the first acknowledgement to the resolution
Effort = TypedDict("Effort", {"seconds": float, "from": dt.datetime, "to": dt.datetime}, total=False)


@dataclasses.dataclass
class Incident:
    id: str
    number: str  # what the tool's UI shows (PagerDuty's incident_number, Opsgenie's tinyId)
    title: str
    service: str
    tags: tuple[str, ...]
    started_at: dt.datetime
    minutes_to_recover: float | None
    values: Answers  # category and the five answers: str/bool, or None (blank)
    from_record: set[str]  # which of `values` the export itself gave
    effort: Effort  # PagerDuty analytics: engaged window and effort seconds ({}: none)
    warnings: list[str] = dataclasses.field(default_factory=list)  # what the record says against itself


def _bool(v: Any) -> bool | None:
    if blank(v):
        return None
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError(f"expected true, false or blank (got {v!r})")


def _class(v: Any) -> str | None:
    if blank(v):
        return None
    s = str(v).strip()
    s = "node/accelerator" if s == "node-accelerator" else s
    if s not in CLASSES:
        raise ValueError(f"expected one of {', '.join(CLASSES)} (got {s!r})")
    return s


def _detected(row: Row) -> bool | None:
    """True when an integration or the API opened it, False when a person did; None when the export is silent."""
    entry = row.get("first_trigger_log_entry")
    if isinstance(entry, dict):
        for kind in (obj(entry.get("agent")).get("type"), obj(entry.get("channel")).get("type")):
            if kind in AUTOMATIC:
                return True
            if kind in MANUAL:
                return False
    return None


def _effort(row: Row, created: dt.datetime, resolved: dt.datetime | None) -> Effort:
    seconds = cell(row, "user_defined_effort_seconds", to_float, required=False)
    if seconds is None:
        seconds = cell(row, "engaged_seconds", to_float, required=False)
    ack = cell(row, "seconds_to_first_ack", to_float, required=False, default=0.0)
    if seconds is None or resolved is None:
        return {}
    return {"seconds": seconds, "from": created + dt.timedelta(seconds=ack), "to": resolved}


def _recovery(row: Row, created: dt.datetime, resolved: dt.datetime | None) -> tuple[float | None, list[str]]:
    """Minutes to recover (seconds_to_resolve, else resolved − created) and what the record says against itself:
    a resolution before the trigger (left blank: never favourable), or seconds_to_resolve that disagree with the
    two times by more than a minute (seconds_to_resolve kept, as PagerDuty computes it)."""
    seconds = cell(row, "seconds_to_resolve", to_float, required=False)
    span = (resolved - created).total_seconds() if resolved is not None else None
    if resolved is not None and resolved < created:
        return None, [f"resolved_at {iso(resolved)} before created_at {iso(created)}: minutes_to_recover left blank"]
    warn = []
    if seconds is not None and span is not None and abs(seconds - span) > 60:
        warn.append(f"seconds_to_resolve {seconds:g} disagrees with resolved_at − created_at ({span:g} s): "
                    "seconds_to_resolve used")
    if seconds is not None and seconds < 0:
        return None, [f"seconds_to_resolve {seconds:g} is negative: minutes_to_recover left blank"]
    return (seconds / 60 if seconds is not None else span / 60 if span is not None else None), warn


def pagerduty_incident(row: Row) -> Incident:
    created = cell(row, "created_at" if "created_at" in row else "created_on", to_time)
    resolved_col = next((c for c in ("resolved_at", "resolved_on") if not blank(row.get(c))), None)
    resolved = cell(row, resolved_col, to_time) if resolved_col else None
    minutes, warnings = _recovery(row, created, resolved)
    svc = row.get("service")
    service = row.get("service_name") or (svc.get("summary") if isinstance(svc, dict) else svc) or ""
    detected = _detected(row)
    return Incident(id=str(row.get("id") or row.get("incident_number") or ""),
                    number=str(row.get("incident_number") or ""), title=str(row.get("title") or row.get("description")
                                                                             or ""),
                    service=str(service or ""), tags=tuple(t for t in (str(row.get("incident_type_name") or ""),) if t),
                    started_at=created, minutes_to_recover=None if minutes is None else round(minutes, 1),
                    values={"detected_automatically": detected}, from_record={"detected_automatically"}
                    if detected is not None else set(), effort=_effort(row, created, resolved), warnings=warnings)


def _service_names(row: Row, names: dict[str, str]) -> str:
    """Opsgenie's impacted services by name where the export carries them (objects with a name, or the
    document's `services` list), else as the ids it gives."""
    out = []
    services = row.get("impactedServices") or ()
    for x in services if isinstance(services, (list, tuple, dict, str)) else ():
        if isinstance(x, dict):
            out.append(str(x.get("name") or names.get(str(x.get("id"))) or x.get("id") or ""))
        else:
            out.append(names.get(str(x), str(x)))
    return ", ".join(out)


def opsgenie_incident(row: Row, p: IncidentParams, names: dict[str, str] | None = None) -> Incident:
    created = cell(row, "createdAt", to_time)
    start = cell(row, "impactStartDate", to_time, required=False) if p.clock == "impact" else None
    end = cell(row, "impactEndDate", to_time, required=False) if p.clock == "impact" else None
    if p.clock != "impact":
        end = cell(row, "resolvedAt", to_time, required=False)
    started = start or created
    minutes = (end - started).total_seconds() / 60 if end is not None else None
    warnings = []
    if minutes is not None and minutes < 0:
        warnings.append(f"ends {iso(end)} before it starts {iso(started)}: minutes_to_recover left "  # type: ignore[arg-type]
                        "blank")
        minutes = None
    extra = cell(row, "extraProperties", mapping, required=False, default={})
    given = row.get("tags")
    tags = given if isinstance(given, list) else [t.strip() for t in str(given or "").split(",") if t.strip()]
    values: Answers = {}
    for q in FIVE_QUESTIONS:  # a team that records the answers in extraProperties under the kit's own names
        try:
            values[q] = _bool(extra.get(q))
        except ValueError as exc:
            raise RowError(f"extraProperties.{q}", str(exc)) from None
    return Incident(id=str(row.get("id") or row.get("tinyId") or ""), number=str(row.get("tinyId") or ""),
                    title=str(row.get("message") or ""), service=_service_names(row, names or {}), warnings=warnings,
                    tags=tuple(str(t) for t in tags or ()), started_at=started,
                    minutes_to_recover=None if minutes is None else round(minutes, 1), values=values,
                    from_record={q for q, v in values.items() if v is not None}, effort={})


def _names_in_document(path: str | Path) -> dict[str, str]:
    """Opsgenie service id → name from a JSON export that carries its services (`services`: [{id, name}])."""

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (ValueError, OSError):
        return {}
    services = doc.get("services") if isinstance(doc, dict) else None
    return {str(s["id"]): str(s["name"]) for s in services or () if isinstance(s, dict) and s.get("id")
            and s.get("name")}


def read_export(kind: str, path: str | Path, p: IncidentParams) -> list[Incident]:
    what = {"pagerduty": "a PagerDuty incidents export (REST or Analytics; JSON or CSV; one incident too)",
            "opsgenie": "an Opsgenie incidents export (JSON or CSV)"}[kind]
    rows = read_rows(path, what, ("incidents", "data", "results", "incident"))
    needed = ("created_at", "created_on") if kind == "pagerduty" else ("createdAt",)
    if rows and not any(k in r for r in rows[:50] for k in needed):
        keys = sorted({k for r in rows[:50] for k in r if k != "_line"})
        raise BadInputError(f"{looks_like(keys)}; expected {what} with {' or '.join(needed)}", source=str(path))
    names = _names_in_document(path) if kind == "opsgenie" and Path(path).suffix.lower() == ".json" else {}
    out = []
    for row in rows:
        try:
            inc = pagerduty_incident(row) if kind == "pagerduty" else opsgenie_incident(row, p, names)
        except RowError as exc:
            raise row_error(path, row, exc) from None
        if not inc.id:
            raise row_error(path, row, RowError("id", "blank; expected the incident's id"))
        out.append(inc)
    return out


def read_postmortems(path: str | Path) -> dict[str, Answers]:
    """id → {category, answers…} from the team's postmortems (columns id and any of category and the five)."""
    rows = read_rows(path, "a postmortems CSV (id, category, detected_automatically, previous_version_restored, "
                           "in_flight_resumed_or_cancelled, api_failover_without_contract_change, fields_preserved)")
    out: dict[str, Answers] = {}
    for row in rows:
        unknown = [k for k in row if k not in ("_line", "id", "category", *FIVE_QUESTIONS)]
        if unknown:
            raise BadInputError(f"unknown column {unknown[0]!r}; expected id, category, {', '.join(FIVE_QUESTIONS)}",
                                source=str(path))
        try:
            key = cell(row, "id", str).strip()
            values: Answers = {"category": cell(row, "category", _class, required=False)}
            values |= {q: cell(row, q, _bool, required=False) for q in FIVE_QUESTIONS if q in row}
        except RowError as exc:
            raise row_error(path, row, exc) from None
        if key in out:
            raise row_error(path, row, RowError("id", f"{key!r} appears twice; expected one row per incident"))
        out[key] = values
    return out


def resolve(incidents: list[Incident], p: IncidentParams, window: ReviewWindow) -> tuple[list[Incident], list[str]]:
    """Keep the window's incidents (and the named services'), fill classes and answers from the postmortems or
    the stated class map; notes for the header."""
    posts = read_postmortems(p.postmortems) if p.postmortems else {}
    kept, outside, other = [], 0, 0
    for inc in incidents:
        if p.services and inc.service not in p.services:
            other += 1
            continue
        if not window.holds(inc.started_at):
            outside += 1
            continue
        stated = next((p.classes[k] for k in (inc.service, *inc.tags) if k in p.classes), None)
        post = posts.get(inc.id) or posts.get(inc.number) or {}
        inc.values["category"] = post.get("category") or stated
        for q in FIVE_QUESTIONS:
            if post.get(q) is not None:
                inc.values[q] = post[q]
            inc.values.setdefault(q, None)
        kept.append(inc)
    seen = {k for inc in kept for k in (inc.id, inc.number)}
    notes = [f"{len(incidents)} incident(s) read; {outside} started outside the window; {other} of other services"]
    if not kept:
        services = sorted({inc.service for inc in incidents})
        raise BadInputError(f"nothing kept: {notes[0]} (services in the export: {', '.join(services[:6]) or 'none'}"
                            f"); expected at least one incident of {', '.join(p.services) or 'any service'} in the "
                            "window (a window without incidents is an incidents.csv with its header only, written "
                            "by hand)", source="k3 import")
    notes += [f"warning: {inc.id}: {w}" for inc in kept for w in inc.warnings]
    stray = sorted(k for k in posts if k not in seen)
    if stray:
        notes.append(f"postmortem rows for no incident kept here: {', '.join(stray)}")
    return kept, notes


def to_fill(inc: Incident) -> str | None:
    missing = [k for k in ("category", *FIVE_QUESTIONS) if inc.values.get(k) is None]
    if inc.minutes_to_recover is None:
        missing.append("minutes_to_recover (not resolved in the export)")
    if not missing:
        return None
    label = f"{inc.id}" + (f" (#{inc.number})" if inc.number and inc.number != inc.id else "")
    return f"{label} {iso(inc.started_at)} {inc.service or '-'} {inc.title[:60]!r}: blank {', '.join(missing)}"


def _cell(v: Any) -> str:
    return "" if v is None else ("true" if v is True else "false" if v is False else str(v))


def render(incidents: list[Incident], prov: Provenance) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(INCIDENT_COLUMNS)
    for inc in sorted(incidents, key=lambda i: (i.started_at, i.id)):
        w.writerow([inc.id, iso(inc.started_at), _cell(inc.values.get("category")),
                    *[_cell(inc.values.get(q)) for q in FIVE_QUESTIONS],
                    "" if inc.minutes_to_recover is None else f"{inc.minutes_to_recover:g}"])
    return "\n".join(prov.lines()) + "\n" + buf.getvalue()


def hand_filled_conflicts(out: Path, incidents: list[Incident]) -> list[str]:
    """Cells an earlier incidents file holds that this import would blank or change: work typed in by hand."""
    if not out.exists():
        return []
    try:
        old = {r.id: r for r in read_incidents(out)}
    except BadInputError:
        return []
    lost = []
    for inc in incidents:
        rec = old.get(inc.id)
        for key in ("category", *FIVE_QUESTIONS):
            before = getattr(rec, key, None) if rec is not None else None
            if before is not None and inc.values.get(key) != before:
                lost.append(f"{inc.id}.{key}={_cell(before)}")
    return lost


def write_incidents(out: str | Path, incidents: list[Incident], prov: Provenance, force: bool = False) -> None:
    path = Path(out)
    lost = hand_filled_conflicts(path, incidents)
    if lost and not force:
        raise BadInputError(f"holds answers this import would blank or change ({', '.join(lost[:4])}"
                            f"{', …' if len(lost) > 4 else ''}); expected them in the postmortems file "
                            "(--postmortems FILE) so each import keeps them, or --force", source=str(path))
    write_text(path, render(incidents, prov))
    read_incidents(path)  # what the review will read: refused here rather than there
