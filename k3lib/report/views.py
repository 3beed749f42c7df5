"""How the data model looks in a notebook: HTML renderers, registered as IPython display formatters.

The data model (`AcceptanceDecision`, `EvidenceRecord`, `CapacityResult`) carries no `_repr_html_` and never imports this
module; the session openers the notebooks call first (`k3lib.open_axis`, `k3lib.open_summary`,
`k3lib.review.open_review`, …) call `install()`, which registers each renderer below for its type with the running
IPython shell. Outside IPython (scripts, the CLI, tests) `install()` only sets the plotly renderer.
"""

from __future__ import annotations

import html
import sys
from pathlib import Path
from typing import Any, Callable

from ..core import plotting
from ..core.evidence import EvidenceRecord
from ..verdict.decision import AcceptanceDecision

_BADGE = {"pass": "#1a7f37", "fail": "#cf222e", "warn": "#9a6700", "not-run": "#57606a",
          "production": "#1a7f37", "limited-observation": "#9a6700", "capacity-extension": "#bc4c00",
          "environment-rebuild": "#cf222e"}


def badge(word: str) -> str:
    colour = _BADGE.get(word, "#57606a")
    return (f'<span style="background:{colour};color:#fff;border-radius:4px;padding:1px 8px;'
            f'font-weight:600">{html.escape(word)}</span>')


def decision_html(decision: AcceptanceDecision) -> str:
    """The decision on top with its reasons. Every string from the target is escaped (it may carry markup)."""
    parts = [f'<h2 style="margin:0.2em 0">Decision: {badge(decision.decision)}</h2>', "<ul>"]
    parts += [f"<li>{html.escape(r)}</li>" for r in decision.reasons]
    parts.append("</ul>")
    if decision.traffic_cap:
        parts.append(f"<p>Traffic cap: {html.escape(str(decision.traffic_cap))}</p>")
    if decision.reexamine_on:
        parts.append(f"<p>Re-examine on: {html.escape(decision.reexamine_on)}</p>")
    parts.append(f"<p>Build: {html.escape(decision.build)}</p>")
    parts.append(loosened_table(decision.loosened_thresholds))
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


def loosened_table(loosened: Any) -> str:
    """The settings the run judged at looser than their floors — the kit's default for a judgement threshold, what
    the contract sets for a size, a length or a level — and who accepted each (k3lib.core.thresholds)."""
    if not loosened:
        return ""
    rows = []
    for t in loosened:
        who = (f"accepted by {t.get('accepted_by')} on {t.get('accepted_on')}: {t.get('why')}"
               if t.get("accepted_by") and t.get("why") else "not accepted by anyone: forbids production")
        floor = f"{t.get('default')} ({t['floor_basis']})" if t.get("floor_basis") else f"{t.get('default')} (default)"
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            t.get("path"), t.get("value"), floor, t.get("bounds"), t.get("basis"), who)) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("setting", "value", "floor", "bounds", "basis", "acceptance"))
    return (f"<details class='k3-loosened'><summary>Thresholds looser than the defaults or their contract floors "
            f"({len(rows)})</summary><table class='k3-loosened'><tr>{head}</tr>{''.join(rows)}</table></details>")


def record_html(record: EvidenceRecord) -> str:
    left = 'style="text-align:left"'
    rows = "".join(f"<tr><td>{html.escape(f.rule)}</td><td>{badge(f.status)}</td><td {left}>{html.escape(f.message)}</td></tr>"
                   for f in record.findings)
    return (f"<h3>{html.escape(record.title)}: {badge(record.status)}</h3><p>{html.escape(record.summary)}</p>"
            f"<table><thead><tr><th>rule</th><th>status</th><th>finding</th></tr></thead><tbody>{rows}</tbody></table>"
            f"<p>Evidence: <code>evidence/{html.escape(record.axis)}.json</code></p>")


def _capacity_html(result: Any) -> str:
    from ..axes.capacity.figures import summary_html  # the capacity package loads its whole runner (and jsonschema)

    return summary_html(result)


# (module, class name) → renderer. Registered by name: a type whose module is not imported yet costs nothing.
RENDERERS: dict[tuple[str, str], Callable[[Any], str]] = {
    ("k3lib.verdict.decision", "AcceptanceDecision"): decision_html,
    ("k3lib.core.evidence", "EvidenceRecord"): record_html,
    ("k3lib.axes.capacity.result", "CapacityResult"): _capacity_html,
}


def register(shell: Any) -> None:
    """Register every renderer with `shell`'s text/html formatter (IPython's `for_type_by_name`)."""
    formatter = shell.display_formatter.formatters["text/html"]
    for (module, name), render in RENDERERS.items():
        formatter.for_type_by_name(module, name, render)


def install() -> None:
    """A notebook's display set-up, done by every session opener: plotly's offline renderer and, inside IPython,
    the HTML views above."""

    plotting.use_offline_renderer()
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        register(shell)
