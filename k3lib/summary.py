"""What the summary notebook shows: the checklist from evidence records, and the decision written to disk."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from .decision import Decision, decide
from .evidence import EvidenceRecord
from .params import Params
from .plan import ACCEPTANCE_AXES
from .sheet import ITEMS, sheet_rows
from .store import RunStore

_BADGE = {"pass": "#1a7f37", "fail": "#cf222e", "warn": "#9a6700", "not-run": "#57606a",
          "production": "#1a7f37", "limited-observation": "#9a6700", "capacity-extension": "#bc4c00",
          "environment-rebuild": "#cf222e"}


def decide_run(params: Params, store: RunStore, records: dict[str, EvidenceRecord]) -> Decision:
    """Decide from the records alone (the sheet's items of the planned axes) and write `decision.json`."""
    planned = set(ACCEPTANCE_AXES)
    rows = [r for r in sheet_rows(records, params.public_dict(), params.run.reviewer)
            if next(i for i in ITEMS if i.id == r["id"]).axis in planned]
    decision = decide(records, ACCEPTANCE_AXES, build=params.recipe.build, checklist=rows or None)
    store.write_json("decision.json", decision.to_dict())
    return decision



def records_table(records: dict[str, EvidenceRecord]) -> Any:
    import pandas as pd

    rows = [{"axis": r.axis, "title": r.title, "status": r.status, "findings": len(r.findings),
             "failed": ", ".join(f.rule for f in r.failed()), "summary": r.summary,
             "evidence": f"evidence/{r.axis}.json"} for r in records.values()]
    return pd.DataFrame(rows, columns=["axis", "title", "status", "findings", "failed", "summary", "evidence"])


def findings_table(records: dict[str, EvidenceRecord]) -> Any:
    import pandas as pd

    rows = [{"axis": r.axis, "rule": f.rule, "status": f.status, "message": f.message}
            for r in records.values() for f in r.findings]
    return pd.DataFrame(rows, columns=["axis", "rule", "status", "message"])


def badge(word: str) -> str:
    colour = _BADGE.get(word, "#57606a")
    return (f'<span style="background:{colour};color:#fff;border-radius:4px;padding:1px 8px;'
            f'font-weight:600">{html.escape(word)}</span>')


def decision_html(decision: Decision) -> str:
    """The decision on top with its reasons. Every string from the target is escaped (it may carry markup)."""
    parts = [f'<h2 style="margin:0.2em 0">Decision: {badge(decision.decision)}</h2>', "<ul>"]
    parts += [f"<li>{html.escape(r)}</li>" for r in decision.reasons]
    parts.append("</ul>")
    if decision.traffic_cap:
        parts.append(f"<p>Traffic cap: {html.escape(str(decision.traffic_cap))}</p>")
    if decision.reexamine_on:
        parts.append(f"<p>Re-examine on: {html.escape(decision.reexamine_on)}</p>")
    parts.append(f"<p>Build: {html.escape(decision.build)}</p>")
    cols = ("id", "title", "status", "test", "configuration", "observed", "evidence", "reviewer")
    head = "".join(f"<th>{c}</th>" for c in ("id", "check", "status", "test", "configuration", "observed",
                                              "evidence", "reviewer"))
    body = []
    for item in decision.checklist:
        cells = []
        for c in cols:
            value = item.get(c)
            if c == "status":
                cells.append(f"<td>{badge(str(value))}</td>")
            elif c == "evidence" and value:
                page = item.get("notebook")
                link = f' (<a href="{html.escape(Path(page).name)}">notebook</a>)' if page else ""
                cells.append(f"<td><code>{html.escape(str(value))}</code>{link}</td>")
            else:
                cells.append(f'<td style="text-align:left">{html.escape("" if value is None else str(value))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    parts.append(f'<div style="overflow-x:auto"><table><thead><tr>{head}</tr></thead>'
                 f"<tbody>{''.join(body)}</tbody></table></div>")
    return "".join(parts)


def record_html(record: EvidenceRecord) -> str:
    left = 'style="text-align:left"'
    rows = "".join(f"<tr><td>{html.escape(f.rule)}</td><td>{badge(f.status)}</td><td {left}>{html.escape(f.message)}</td></tr>"
                   for f in record.findings)
    return (f"<h3>{html.escape(record.title)}: {badge(record.status)}</h3><p>{html.escape(record.summary)}</p>"
            f"<table><thead><tr><th>rule</th><th>status</th><th>finding</th></tr></thead><tbody>{rows}</tbody></table>"
            f"<p>Evidence: <code>evidence/{html.escape(record.axis)}.json</code></p>")
