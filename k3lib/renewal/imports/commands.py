"""One function per `k3 import` source: read the export, apply the parameters, write (or update) the review's
input file with its provenance header, and return the lines the command prints. Bad input is one BadInputError
line; the file is checked by the review's own reader once written."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from ...core.errors import BadInputError
from ...core.numbers import figure
from ..costsources import USAGE_SCOPED, CostSource, CurrencyConversion
from ..inputs import read_costs
from ..params import load_review_params
from .bills import read_bill
from .costlines import ITEMS, credits, selection_words, split, tidy
from .costlines import notes as cost_notes
from .costsfile import update_costs
from .hours import NOT_OURS, UNCLASSIFIED, hours_by_week, read_issues, read_worklogs, resolve_ids, update_hours
from .incidents import read_export, resolve, to_fill, write_incidents
from .oncall import off_hours_effort
from .params import ImportSection, ReviewWindowParams, UsageParams
from .provenance import Provenance, ReviewWindow
from .usage import notes as usage_notes
from .usage import read_usage


def window_of(section: ImportSection, review_file: str | None = None) -> ReviewWindow:
    """The window the parameters name, else the review parameters' series window."""
    w: ReviewWindowParams | None = section.window
    if w is None and review_file:
        series = load_review_params([review_file]).review.series
        if series is not None:
            w = ReviewWindowParams(start=series.start, end=series.end)
    if w is None:
        raise BadInputError("no window; expected --window START/END (e.g. 2026-07-24T00:00:00Z/2026-08-14T00:00:00Z), "
                            "imports.window, or --review FILE (its review.series window)", source="k3 import")
    return ReviewWindow(w.start, w.end)


def _currency(section: ImportSection, out: Path, billed: set[str]) -> str:
    if section.currency:
        return section.currency
    if out.exists() and (have := read_costs(out).currency):
        return have
    if len(billed) == 1:
        return next(iter(billed))
    raise BadInputError(f"lines in {', '.join(sorted(billed)) or 'no currency'} and no review currency; expected "
                        "--currency EUR (with --rate for every other currency)", source="k3 import")


def _used(conversions: tuple[CurrencyConversion, ...], currencies: set[str]) -> tuple[CurrencyConversion, ...]:
    return tuple(c for c in conversions if c.from_currency in currencies)


def import_bill(kind: str, source: str | Path, out: str | Path, section: ImportSection, window: ReviewWindow) -> list[str]:
    """`k3 import focus|cur|gcp|invoice`: the capacity, storage, network and monitoring items of costs.yaml; the
    credits, refunds and adjustments the window's selected lines carry are listed apart (header and `credits` of
    the import's `# k3-import:` line), never netted into an item."""
    p = section.costs
    groups, fmt, rows, not_selected = read_bill(kind, source, p, window)
    target = _currency(section, Path(out), {key[0] for key in groups})
    s = split(groups, fmt, p, window, target, section.conversions, rows, not_selected)
    mapped, blank, notes = cost_notes(s, p)
    conv = _used(section.conversions, set(s.currencies) - {target})
    notes += [f"converted {c.from_currency} → {target} at {c.rate:g} ({c.date.isoformat()}"
              f"{', ' + c.source if c.source else ''})" for c in conv]
    if not s.items:
        raise BadInputError(f"nothing mapped: {'; '.join(notes[:1] + notes[2:5])}; expected at least one selected "
                            "line in the window that maps to capacity, storage, network or monitoring (check the "
                            "selection, the window and --service)", source=str(source))
    listed = credits(s)
    prov = Provenance.of(kind, source, window, selection=selection_words(p), mapped=mapped, blank=blank,
                         notes=notes, owns=sorted(s.items), extra={"credits": listed})
    items = {k: tidy(v) for k, v in s.items.items()}
    entry = CostSource(importer=kind, file=prov.source, sha256=prov.sha256,  # type: ignore[arg-type]
                       items=items, window=window.label(), selection=prov.selection)  # type: ignore[arg-type]
    costs = update_costs(out, entry, prov, target, conv, listed)
    shown = [_cost_line(item, getattr(costs, item), target, item in s.items) for item in ITEMS]
    return [f"wrote {out}", *shown, *[f"  {n}" for n in notes]]


def _cost_line(item: str, value: object, currency: str, imported: bool) -> str:
    """`network: 1,234 EUR (this import)`; an item no import has given yet is said to be not set, not `None USD`."""

    if value is None:
        return f"{item}: not set yet (no import gave it; {currency} once one does)"
    return f"{item}: {figure(value)} {currency}" + (" (this import)" if imported else " (unchanged)")


def import_incidents(kind: str, source: str | Path, out: str | Path, section: ImportSection, window: ReviewWindow,
                     hours_out: str | Path | None = None, force: bool = False) -> list[str]:
    """`k3 import pagerduty|opsgenie`: the incidents file; with `hours_out`, PagerDuty's off-hours effort."""
    p = section.incidents
    incidents, notes = resolve(read_export(kind, source, p), p, window)
    fill = [line for inc in incidents if (line := to_fill(inc))]
    clock = ("created_at → resolved_at (trigger → resolve; seconds_to_resolve when given)" if kind == "pagerduty"
             else "impactStartDate → impactEndDate (impact)" if p.clock == "impact" else "createdAt → resolvedAt")
    derived = sum(inc.values.get("detected_automatically") is not None for inc in incidents)
    prov = Provenance.of(kind, source, window, selection=f"services {', '.join(p.services) or 'all'}",
                         mapped=[f"id, started_at, minutes_to_recover on the clock {clock}",
                                 f"detected_automatically derived for {derived} of {len(incidents)} incident(s)",
                                 "category and the drill's answers from " + (p.postmortems or "no postmortems file")
                                 + (f" and the stated classes {dict(p.classes)}" if p.classes else "")],
                         blank=[f"to fill: {line}" for line in fill], notes=notes, owns=["incidents"])
    write_incidents(out, incidents, prov, force=force)
    shown = [f"wrote {out}: {len(incidents)} incident(s), {len(fill)} with blanks to fill (listed below and in "
             "its header; a blank is never counted as favourable)", *[f"  {line}" for line in fill],
             *[f"  {n}" for n in notes]]
    if hours_out is not None:
        shown += _off_hours(kind, source, hours_out, incidents, section, window, force)
    return shown


def _off_hours(kind: str, source: str | Path, hours_out: str | Path, incidents: list, section: ImportSection,
               window: ReviewWindow, force: bool) -> list[str]:
    p = section.incidents
    efforts = [{**inc.effort, "id": inc.id} for inc in incidents if inc.effort]
    if not efforts:
        raise BadInputError("no engaged_seconds or user_defined_effort_seconds with a resolution time: the off-hours "
                            "effort needs PagerDuty's Analytics raw incidents export (drop --hours)", source=str(source))
    by_week, notes = off_hours_effort(efforts, p, window)
    rows = {(week, "out-of-hours"): h for week, h in by_week.items()}
    prov = Provenance.of(kind, source, window, mapped=[
        "out-of-hours: user_defined_effort_seconds (else engaged_seconds) spread over first acknowledgement → "
        f"resolution; the part outside {p.business_hours[0]}:00–{p.business_hours[1]}:00 Monday–Friday "
        f"({p.timezone}) counted"], notes=notes)
    update_hours(hours_out, rows, {"out-of-hours"}, prov, force=force)
    return [f"wrote {hours_out}: out-of-hours " + ", ".join(f"{w} {h:.2f} h" for (w, _), h in sorted(rows.items()))]


def import_worklogs(source: str | Path, out: str | Path, section: ImportSection, window: ReviewWindow,
                    force: bool = False) -> list[str]:
    """`k3 import jira`: hours per ISO week and category."""
    p = section.hours
    maps = {**p.projects, **p.labels, **p.components, **p.issues}
    if not maps:
        raise BadInputError("no mapping to the nine categories; expected imports.hours.labels, components, issues or "
                            "projects (see parameters/imports.example.yaml)", source="k3 import jira")
    worklogs = read_worklogs(source, p)
    if p.issues_export:
        worklogs = resolve_ids(worklogs, read_issues(p.issues_export))
    rows, notes = hours_by_week(worklogs, p, window)
    if not any(c != UNCLASSIFIED for _, c in rows):
        raise BadInputError(f"nothing mapped: {'; '.join(notes[:4])}; expected at least one worklog in the window "
                            "that maps to a category", source=str(source))
    owns: set[str] = (set(maps.values()) - {NOT_OURS}) | ({UNCLASSIFIED} if any(c == UNCLASSIFIED for _, c in rows)
                                                         else set())
    mapping_words = "; ".join(f"{what} {dict(m)}" for what, m in (("issues", p.issues), ("components", p.components),
                                                                   ("labels", p.labels), ("projects", p.projects)) if m)
    prov = Provenance.of("jira", source, window, mapped=[f"worklog start → ISO week ({p.timezone}); {mapping_words}"],
                         blank=[f"{c}: no worklog in the window" for c in sorted(owns - {c for _, c in rows})],
                         notes=notes)
    update_hours(out, rows, owns, prov, force=force)
    total = sum(rows.values())
    return [f"wrote {out}: {total:.2f} h in {len(rows)} week/category row(s)", *[f"  {n}" for n in notes]]


def import_usage(source: str | Path, out: str | Path, section: ImportSection, window: ReviewWindow) -> list[str]:
    """`k3 import usage`: api_bill_same_tasks of costs.yaml."""
    p = section.usage
    bill = read_usage(source, p, window)
    target = section.currency or (read_costs(out).currency if Path(out).exists() else None) or bill.currency
    rate = 1.0
    conv: tuple[CurrencyConversion, ...] = ()
    if bill.currency != target:
        found = [c for c in section.conversions if c.from_currency == bill.currency]
        if not found:
            raise BadInputError(f"prices in {bill.currency} and the review in {target}; expected --rate "
                                f"{bill.currency}=RATE@DATE", source="k3 import usage")
        rate, conv = found[0].rate, (found[0],)
    amount = tidy(bill.cost * rate)  # unrounded: a 0.000195 USD bill is not 0
    mapped, notes = usage_notes(bill, p)
    notes += [f"converted {c.from_currency} → {target} at {c.rate:g} ({c.date.isoformat()})" for c in conv]
    prov = Provenance.of("usage", source, window, selection=usage_selection(p), mapped=mapped,
                         notes=notes, owns=["api_bill_same_tasks"])
    entry = CostSource(importer="usage", file=prov.source, sha256=prov.sha256,
                       items={"api_bill_same_tasks": amount}, window=window.label(), selection=prov.selection)
    update_costs(out, entry, prov, target, conv)
    return [f"wrote {out}: api_bill_same_tasks {amount} {target}", *[f"  {n}" for n in notes]]


def usage_selection(p: UsageParams) -> str:
    """The usage import's selection in words: scoped to a task log's API-path tasks (USAGE_SCOPED), or not."""
    if p.tasks:
        return f"{USAGE_SCOPED} {p.tasks} (task field {p.task_field})"
    return f"every line of the window, no task log (task field {p.task_field or '-'})"


def parse_window(text: str, flag: str = "--window") -> ReviewWindowParams:
    start, sep, end = text.partition("/")
    if not sep:
        raise BadInputError(f"expected START/END (got {text!r})", source=flag)
    try:
        return ReviewWindowParams(start=dt.datetime.fromisoformat(start.replace("Z", "+00:00")),
                            end=dt.datetime.fromisoformat(end.replace("Z", "+00:00")))
    except ValueError as exc:
        raise BadInputError(f"expected ISO 8601 times, e.g. 2026-07-24T00:00:00Z/2026-08-14T00:00:00Z ({exc})",
                            source=flag) from None
