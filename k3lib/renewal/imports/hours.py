"""The review's hours file from imports: Jira worklogs (the "all fields" CSV's `Log Work` columns, a worklog report
with a work date and hours, the REST API's worklog lists keyed by `issueId`, or issues whose JSON carries
`fields.worklog.worklogs`) and Tempo's worklog export (CSV, or the REST API's v4 JSON, whose issue is an id),
clipped to the window, put in ISO weeks and mapped to the nine categories by issue, component, label or project.
A worklog that names its issue by id only is resolved to the key, labels and components through an issues export
(`--issues FILE`: Jira's search JSON or its CSV), or mapped by the id itself (`imports.hours.issues`); unmapped
work is listed, never guessed, and an import that maps nothing is refused. Each import owns the categories its
map names, so two sources never count one hour twice."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...core.errors import BadInputError
from ..inputs import HOURS_COLUMNS, read_hours
from .params import HoursParams
from .provenance import Provenance, ReviewWindow, blocks, iso_week, read_header, write_text
from .tables import Row, RowError, blank, looks_like, obj, read_rows, row_error, to_float, to_time

KEY_COLUMNS = ("Issue key", "Issue Key", "Key", "Issue", "issue_key", "issueKey")
DATE_COLUMNS = ("Work date", "Work Date", "Worklog Started", "Started", "started", "Date", "date", "startDate")
HOUR_COLUMNS = ("Hours", "hours", "Time Spent (h)", "Logged Hours")
SECOND_COLUMNS = ("timeSpentSeconds", "Time Spent (s)", "Time Spent Seconds", "Seconds")
LABEL_COLUMNS = ("Labels", "Issue Labels", "labels")
COMPONENT_COLUMNS = ("Component/s", "Components", "Component", "components")


UNDATED = dt.datetime.min.replace(tzinfo=dt.timezone.utc)  # a `Time Spent` total with no dated worklog


@dataclasses.dataclass(frozen=True)
class Worklog:
    issue: str
    start: dt.datetime
    hours: float
    labels: tuple[str, ...]
    components: tuple[str, ...]
    issue_id: str = ""


@dataclasses.dataclass(frozen=True)
class IssueInfo:
    key: str
    labels: tuple[str, ...]
    components: tuple[str, ...]


def _first(row: Row, names: tuple[str, ...]) -> tuple[str | None, Any]:
    for n in names:
        if n in row and not blank(row[n]) and row[n] != []:
            return n, row[n]
    if "issue" in row and isinstance(row["issue"], dict) and names is KEY_COLUMNS:
        return "issue.key", row["issue"].get("key")
    return None, None


def _issue_id(row: Row) -> str:
    v = row.get("issueId", row.get("Issue id", row.get("issue_id")))
    issue = row.get("issue")
    if blank(v) and isinstance(issue, dict):
        v = issue.get("id")
    return "" if blank(v) else str(v)


def _names(v: Any) -> tuple[str, ...]:
    """Labels or components as Jira's JSON gives them: strings, or objects with a name."""
    if isinstance(v, list):
        return tuple(str(x.get("name") if isinstance(x, dict) else x).strip() for x in v
                     if str(x.get("name") if isinstance(x, dict) else x).strip())
    return _list(v)


def _issue_rows(row: Row) -> list[Row]:
    """An issue whose JSON carries its worklogs (`fields.worklog.worklogs`): one worklog row each, with the
    issue's key, id, labels and components."""
    fields = obj(row.get("fields"))
    logs = obj(fields.get("worklog")).get("worklogs")
    if not isinstance(logs, list):
        return [row]
    return [{**w, "Issue key": row.get("key"), "issueId": row.get("id") or w.get("issueId"),
             "Labels": list(_names(fields.get("labels"))), "Components": list(_names(fields.get("components"))),
             "_line": row.get("_line")} for w in logs if isinstance(w, dict)]


def read_issues(path: str | Path) -> dict[str, IssueInfo]:
    """issue id → key, labels and components, from an issues export: Jira's search JSON (`issues[]` with `id`,
    `key`, `fields.labels`, `fields.components`) or its CSV (`Issue id`, `Issue key`, `Labels`, `Component/s`)."""
    rows = read_rows(path, "a Jira issues export (the search API's JSON, or the CSV with Issue id and Issue key)",
                     ("issues",))
    out: dict[str, IssueInfo] = {}
    for row in rows:
        fields = obj(row.get("fields")) or row
        key = row.get("key", row.get("Issue key", row.get("Issue Key")))
        iid = row.get("id", row.get("Issue id"))
        if blank(key) or blank(iid):
            raise BadInputError(f"{looks_like([k for k in row if k != '_line'])}; expected an issues export whose "
                                "every issue has an id and a key", source=str(path))
        labels = tuple(x for c in ("labels", *LABEL_COLUMNS) if c in fields for x in _names(fields[c]))
        comps = tuple(x for c in ("components", *COMPONENT_COLUMNS) if c in fields for x in _names(fields[c]))
        out[str(iid)] = IssueInfo(str(key), labels, comps)
    return out


def resolve_ids(worklogs: list[Worklog], issues: dict[str, IssueInfo]) -> list[Worklog]:
    """Worklogs that name their issue by id only, given the issue's key, labels and components."""
    out = []
    for w in worklogs:
        info = issues.get(w.issue_id) if not w.issue and w.issue_id else None
        out.append(dataclasses.replace(w, issue=info.key, labels=w.labels + info.labels,
                                       components=w.components + info.components) if info else w)
    return out


def _list(v: Any) -> tuple[str, ...]:
    if isinstance(v, list):
        return tuple(str(x).strip() for x in v if str(x).strip())
    if blank(v):
        return ()
    return tuple(x.strip() for x in str(v).replace(";", ",").split(",") if x.strip())


def _start(row: Row, p: HoursParams) -> dt.datetime:
    col, v = _first(row, DATE_COLUMNS)
    if col is None:
        raise RowError(DATE_COLUMNS[0], "blank; expected the work date")
    if col == "startDate" and not blank(row.get("startTime")):
        v = f"{v}T{row['startTime']}"
    try:
        return to_time(v, p.timezone, p.date_formats)
    except ValueError as exc:
        raise RowError(col, str(exc)) from None


def _hours(row: Row) -> float:
    col, v = _first(row, HOUR_COLUMNS)
    scale = 1.0
    if col is None:
        col, v = _first(row, SECOND_COLUMNS)
        scale = 1 / 3600
    if col is None:
        raise RowError(HOUR_COLUMNS[0], "blank; expected the hours (or timeSpentSeconds) of the worklog")
    try:
        return to_float(v) * scale
    except ValueError as exc:
        raise RowError(col, str(exc)) from None


def _log_work(row: Row, cell: str, p: HoursParams) -> tuple[dt.datetime, float]:
    """Jira's `Log Work` cell: comment;date;author;seconds (the comment may hold `;`, so read from the right)."""
    parts = cell.rsplit(";", 3)
    if len(parts) != 4:
        raise RowError("Log Work", f"expected comment;date;author;seconds (got {cell[:60]!r})")
    try:
        return to_time(parts[1].strip(), p.timezone, p.date_formats), to_float(parts[3]) / 3600
    except ValueError as exc:
        raise RowError("Log Work", str(exc)) from None


def read_worklogs(path: str | Path, p: HoursParams) -> list[Worklog]:
    rows = read_rows(path, "a Jira or Tempo worklog export (CSV or JSON)", ("results", "worklogs", "issues"))
    rows = [r for row in rows for r in _issue_rows(row)]
    known = (*KEY_COLUMNS, *DATE_COLUMNS, *HOUR_COLUMNS, *SECOND_COLUMNS, "Log Work", "Time Spent", "issueId", "issue")
    if rows and not any(k in r for r in rows[:200] for k in known):
        keys = sorted({k for r in rows[:50] for k in r if k != "_line"})
        raise BadInputError(f"{looks_like(keys)}; expected Jira worklogs (the CSV's Log Work columns, the REST "
                            "API's worklogs, issues with fields.worklog) or Tempo's worklogs", source=str(path))
    out: list[Worklog] = []
    for row in rows:
        try:
            out += _row_worklogs(row, p)
        except RowError as exc:
            raise row_error(path, row, exc) from None
    if rows and not out and any(not blank(r.get("Time Spent")) for r in rows):
        raise BadInputError("only `Time Spent` (an issue's total, undated): expected dated worklogs — Jira's CSV "
                            "with its Log Work columns, or Tempo's worklog export", source=str(path))
    logged = {w.issue for w in out}
    for r in rows:  # an issue with a total but no dated worklog: counted nowhere, and said so
        key = _first(r, KEY_COLUMNS)[1]
        if not blank(r.get("Time Spent")) and key not in logged:
            out.append(Worklog(str(key or ""), UNDATED, to_float(r["Time Spent"]) / 3600, (), ()))
    return out


def _row_worklogs(row: Row, p: HoursParams) -> list[Worklog]:
    _, key = _first(row, KEY_COLUMNS)
    labels = tuple(x for c in LABEL_COLUMNS if c in row for x in _names(row[c]))
    components = tuple(x for c in COMPONENT_COLUMNS if c in row for x in _names(row[c]))
    iid = _issue_id(row)
    if "Log Work" in row:
        cells = row["Log Work"] if isinstance(row["Log Work"], list) else _list_cells(row["Log Work"])
        return [Worklog(str(key or ""), *_log_work(row, str(c), p), labels, components, iid) for c in cells]
    if _first(row, DATE_COLUMNS)[0] is None and _first(row, HOUR_COLUMNS + SECOND_COLUMNS)[0] is None:
        return []
    return [Worklog(str(key or ""), _start(row, p), _hours(row), labels, components, iid)]


def _list_cells(v: Any) -> list[str]:
    return [] if blank(v) else [str(v)]


def category_of(w: Worklog, p: HoursParams) -> tuple[str | None, str]:
    """(category, why): issue beats component beats label beats project; two different answers at one level are
    ambiguous and left unmapped."""
    if w.issue in p.issues:
        return p.issues[w.issue], f"issue {w.issue}"
    if w.issue_id and w.issue_id in p.issues:
        return p.issues[w.issue_id], f"issue id {w.issue_id}"
    if not w.issue and w.issue_id:
        return None, (f"issue id {w.issue_id} not resolved to a key: expected --issues FILE (an issues export) or "
                      "imports.hours.issues keyed by the id")
    for what, names, table in (("component", w.components, p.components), ("label", w.labels, p.labels)):
        found = {table[n] for n in names if n in table}
        if len(found) > 1:
            return None, f"{what}s map to {', '.join(sorted(found))}"
        if found:
            return found.pop(), what
    project = w.issue.split("-")[0] if "-" in w.issue else ""
    if project in p.projects:
        return p.projects[project], f"project {project}"
    return None, "no mapping for its issue, components or labels"


UNCLASSIFIED = "unclassified"  # the category of hours whose issue maps to none of the nine
NOT_OURS = "none"  # a mapping's word that the work is not the deployment's


def hours_by_week(worklogs: list[Worklog], p: HoursParams, window: ReviewWindow
                  ) -> tuple[dict[tuple[str, str], float], list[str]]:
    """(week, category) → hours, and the notes: what was outside the window and each unmapped issue (its hours
    counted under `unclassified`: effort nobody mapped is still effort)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    unmapped: dict[str, list[Any]] = {}
    excluded: dict[str, list[Any]] = {}  # mapped to `none` by the operator: listed, not counted
    outside = 0
    undated = [w for w in worklogs if w.start == UNDATED]
    for w in worklogs:
        if w.start == UNDATED:
            continue
        if not window.holds(w.start):
            outside += 1
            continue
        cat, why = category_of(w, p)
        if cat == NOT_OURS:
            name = w.issue or f"issue id {w.issue_id}"
            excluded.setdefault(name, [0.0, why])[0] += w.hours
            continue
        if cat is None:
            name = w.issue or (f"issue id {w.issue_id}" if w.issue_id else "(no issue key)")
            entry = unmapped.setdefault(name, [0.0, why, w.labels, w.components])
            entry[0] += w.hours
            out[(iso_week(w.start, p.timezone), UNCLASSIFIED)] += w.hours  # counted as effort, never dropped
            continue
        out[(iso_week(w.start, p.timezone), cat)] += w.hours
    notes = [f"{len(worklogs) - len(undated)} worklog(s) read; {outside} outside the window; "
             f"{len(unmapped)} issue(s) unmapped"]
    notes += [f"undated (a Time Spent total without worklogs, not counted): {w.issue} {w.hours:.2f} h" for w in undated]
    notes += [f"unmapped, counted as {UNCLASSIFIED}: {issue} {h:.2f} h ({why}; labels {', '.join(lab) or '-'}; components "
              f"{', '.join(comp) or '-'})" for issue, (h, why, lab, comp) in sorted(unmapped.items())]
    notes += [f"not the deployment's work (mapped to none), not counted: {issue} {h:.2f} h ({why})"
              for issue, (h, why) in sorted(excluded.items())]
    return dict(out), notes


def owned_by_others(path: Path, importer: str, source: str) -> dict[str, str]:
    """category → the other import that owns it in an existing hours file."""
    _, metas = read_header(path)
    return {c: f"{m.get('importer')} ({m.get('source')})" for m in metas
            if (m.get("importer"), m.get("source")) != (importer, source) for c in m.get("owns", [])}


def update_hours(out: str | Path, rows: dict[tuple[str, str], float], owns: set[str], prov: Provenance,
                 force: bool = False) -> None:
    """Replace this source's categories in the hours file, keep the other sources' and the hand-set rows."""
    path = Path(out)
    others = owned_by_others(path, prov.importer, prov.source)
    clash = sorted(c for c in owns if c in others)
    if clash:
        raise BadInputError(f"category {clash[0]} already comes from {others[clash[0]]}; expected each category from "
                            "one source (two would count the same hours twice): drop it from this import's map",
                            source=str(path))
    kept: dict[tuple[str, str], float] = {}
    if path.exists():
        hand = [r for r in read_hours(path) if r.category in owns and r.category not in others]
        mine = {c for m in read_header(path)[1] if (m.get("importer"), m.get("source")) == (prov.importer,
                                                                                            prov.source)
                for c in m.get("owns", [])}
        hand = [r for r in hand if r.category not in mine]
        if hand and not force:
            raise BadInputError(f"holds {hand[0].category} hours set by hand (week {hand[0].week}); expected this "
                                "import's categories to come from it alone (--force replaces them)", source=str(path))
        for r in read_hours(path):
            if r.category not in owns and r.category not in mine:
                kept[(r.week, r.category)] = kept.get((r.week, r.category), 0.0) + r.hours
    merged = {**kept, **rows}
    prov.owns = sorted(owns)
    lines, _ = read_header(path)
    header = [line for b in blocks(lines) if b and b[0].startswith("# Imported by")
              and not any(prov.source in x and f'"importer": "{prov.importer}"' in x for x in b) for line in b]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HOURS_COLUMNS)
    for (week, cat), h in sorted(merged.items()):
        w.writerow([week, cat, f"{h:.2f}"])
    write_text(path, "\n".join(header + prov.lines()) + "\n" + buf.getvalue())
    read_hours(path)
