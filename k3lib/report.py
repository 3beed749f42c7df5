"""The rendered report: each executed notebook as self-contained HTML, and an index with the decision on top.

Pages open offline (plotly.js inline, no CDN, no widget loader) and show code only on request.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from .store import RunStore

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render_notebook(store: RunStore, nb_rel: str) -> str:
    """notebooks/X.ipynb → report/X.html, written atomically. Returns the report path relative to the run."""
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    c = Config()
    c.TemplateExporter.extra_template_basedirs = [str(TEMPLATES)]
    c.HTMLExporter.template_name = "k3offline"
    c.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    c.HTMLExporter.embed_images = True
    body, _ = HTMLExporter(config=c).from_filename(str(store.path(nb_rel)))
    rel = f"report/{Path(nb_rel).stem}.html"
    store.write_text(rel, body)
    return rel


def index_html(title: str, decision: dict[str, Any] | None, pages: list[tuple[str, str, str]],
               run_id: str) -> str:
    """pages: (label, relative href, status). Everything interpolated is escaped."""
    from .summary import badge

    esc = html.escape
    head = ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{esc(title)}</title><style>body{{font:15px system-ui,sans-serif;max-width:60em;margin:2em auto;"
            "padding:0 1em}td,th{padding:4px 10px;border-bottom:1px solid #d0d7de;text-align:left}"
            "table{border-collapse:collapse}</style></head><body>")
    parts = [head, f"<h1>{esc(title)}</h1><p>Run <code>{esc(run_id)}</code></p>"]
    if decision:
        parts.append(f"<h2>Decision: {badge(str(decision.get('decision')))}</h2><ul>")
        parts += [f"<li>{esc(str(r))}</li>" for r in decision.get("reasons", [])]
        parts.append("</ul>")
        if decision.get("reexamine_on"):
            parts.append(f"<p>Re-examine on {esc(str(decision['reexamine_on']))}; traffic cap "
                         f"{esc(str(decision.get('traffic_cap')))}</p>")
    else:
        parts.append("<h2>Decision: none (the summary did not complete)</h2>")
    parts.append("<h2>Notebooks</h2><table><tr><th>notebook</th><th>status</th></tr>")
    parts += [f"<tr><td><a href='{esc(href)}'>{esc(label)}</a></td><td>{badge(status)}</td></tr>"
              for label, href, status in pages]
    parts.append("</table><p>Evidence: <code>evidence/*.json</code>, hashes in <code>manifest.json</code>.</p>"
                 "</body></html>")
    return "".join(parts)
