"""The index of a report folder, the page that argues the decision: the decision and its reasons, the deployment
as the evidence shows it, the sheet at a glance, the headline figures, the integrity check and the pages.

It reads the evidence through `k3lib.verdict.accepted` and the sheet.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

from ..core.errors import ArtifactError
from ..core.evidence import EnvironmentData, EvidenceRecord, ProbeData, read_records
from ..core.plan import acceptance_plan, review_plan, run_kind
from ..core.store import RunStore
from ..verdict import accepted as acc
from ..verdict.accepted import read_run
from ..verdict.decision import is_demo
from ..verdict.shapes import ChecklistRow, DecisionDoc
from .headline import figures_block, headline_numbers
from .markup import _badge, _fmt, _one_line, _table, _typed, esc, page_head
from .missing import missing_html
from .pages import _refuse_if_signed, clean_text, ensure_assets, path_rewrites, read_notebook, render_pages
from .views import loosened_table

log = logging.getLogger(__name__)


def _cap_text(cap: Any) -> str:
    if not cap:
        return "none: the decision sets no traffic cap"
    if not isinstance(cap, dict):
        return str(cap)
    parts = []
    if cap.get("max_concurrency") is not None:
        parts.append(f"at most {cap['max_concurrency']} concurrent requests")
    if cap.get("agents_max_concurrency") is not None:
        parts.append(f"agents at most {cap['agents_max_concurrency']} concurrent")
    if cap.get("agents_blocked"):
        parts.append("agents with tool calls blocked")
    basis = f" ({cap['basis']})" if cap.get("basis") else ""
    return ", ".join(parts) + basis if parts else json.dumps(cap)


def decision_block(decision: DecisionDoc | None, *, cap_label: str = "Traffic cap") -> str:
    if not decision:
        return "<section class='k3-decision'><h2>Decision: none (the summary did not complete)</h2></section>"

    demo = is_demo(decision.get("target_kind"))
    out = [f"<section class='k3-decision'><h2>Decision: {_badge(decision.get('decision'))}"
           + (" <span class='k3-demo'>(demo)</span>" if demo else "") + "</h2>"]
    if demo:
        out.append(f"<p class='k3-demo'><b>Demo:</b> the target is the kit's emulator "
                   f"({esc(str(decision.get('target_kind')))}): a demonstration of the kit, not an acceptance of a "
                   "deployment; <code>k3 sign</code> refuses it.</p>")
    reasons = [f"<li>{esc(str(r))}</li>" for r in decision.get("reasons", [])]
    grouped = missing_html(decision) if decision.get("checklist") is not None else ""
    if grouped:
        # the list a reviewer acts on, one line per item; every reason as the rules gave it, one click away
        out.append(grouped)
        out.append(f"<details><summary>Every reason as the rules gave it ({len(reasons)})</summary><ul>"
                   + "".join(reasons) + "</ul></details>")
    else:
        out.append("<ul>" + "".join(reasons) + "</ul>")
    if decision.get("condition"):
        out.append(f"<p><b>Condition:</b> {esc(str(decision['condition']))}</p>")
    if "traffic_cap" in decision:
        out.append(f"<p><b>{cap_label}:</b> {esc(_cap_text(decision.get('traffic_cap')))}</p>")
    if decision.get("reexamine_on"):
        out.append(f"<p><b>Re-examine on:</b> {esc(str(decision['reexamine_on']))}</p>")

    out.append(loosened_table(decision.get("loosened_thresholds") or ()))
    out.append("</section>")
    return "".join(out)


def identity_rows(run: Any) -> list[tuple[str, str, str]]:
    """(item, value, where it was read) of the deployment, from the evidence through `k3lib.verdict.accepted`."""

    env = _typed(run, "environment", EnvironmentData)
    observed = env.observed if env is not None else None
    probe = _typed(run, "probe", ProbeData)
    params = run.params or {}
    recipe = params.get("recipe") or {}

    def level(func: Any) -> tuple[str, str]:
        lv = func(run)
        if lv.value is None:
            return "", f"not in the evidence: {lv.reason}" if lv.reason else "not in the evidence"
        value = lv.value
        if isinstance(value, dict):
            value = " ".join(f"{k.replace('_parallel_size', '').upper()}={v}" for k, v in sorted(value.items()))
        return str(value), lv.source or ""

    def seen(field: str) -> tuple[str, str]:
        value = getattr(observed, field) if observed is not None else None
        return (str(value), f"evidence/environment.json: data.observed.{field}") if value else \
            ("", "not in the evidence")

    image, image_src = seen("image")
    if not image and recipe.get("image"):
        image, image_src = str(recipe["image"]), "params.json: recipe.image"
    digest, digest_src = level(acc.image_digest)
    cuda, cuda_src = seen("cuda_build")
    model = (probe.model if probe is not None else None) or (params.get("target") or {}).get("model") or ""
    return [
        ("image", image, image_src),
        ("image digest", digest or "not recorded (pin one in recipe.image_digest)", digest_src),
        ("vLLM", *level(acc.vllm_version)),
        ("CUDA build", cuda, cuda_src),
        ("host driver", *level(acc.driver_version)),
        ("GPUs", *level(acc.gpu_count)),
        ("topology", *level(acc.parallelism)),
        ("model", str(model), "evidence/probe.json" if model else "not in the evidence"),
        ("server context limit", *level(acc.context_limit_tokens)),
        ("contract context / planned concurrency",
         f"{_fmt(acc.contract_context_tokens(run).value)} tokens / {_fmt(acc.planned_concurrency(run).value)}",
         "params.json: contract"),
        ("build", *level(acc.build)),
    ]


def cell_anchor(store: RunStore, page: str, needles: Sequence[str]) -> str:
    """`page#cell-id=…` of the first code cell of the page's notebook whose output names one of `needles`."""
    nb_path = store.path(f"notebooks/{Path(page).stem}.ipynb")
    if not needles or not nb_path.is_file():
        return page
    try:
        nb = read_notebook(store, f"notebooks/{nb_path.name}")
    except (OSError, ValueError) as exc:  # an unreadable notebook (its page row says so): link the page only
        log.warning("notebooks/%s cannot be read to link its cell: %s: %s", nb_path.name, type(exc).__name__, exc)
        return page
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.get("id"):
            continue
        text = json.dumps(cell.get("outputs", []))
        if any(n in text for n in needles):
            return f"{page}#cell-id={cell.id}"
    return page


def _observed_cell(text: str, short: int = 160) -> str:
    """What an item observed, whole: a long one opens on its first clause, the rest one click away (the printed
    copy carries the full sheet, every cell whole); never cut with "…"."""
    head, sep, rest = text.partition("; ")
    if len(text) <= short or not sep:
        return esc(text)
    return f"<details><summary>{esc(head)};</summary>{esc(rest)}</details>"


def sheet_block(store: RunStore, checklist: Sequence[ChecklistRow]) -> str:
    rows = []
    for item in checklist:
        page = Path(str(item.get("notebook") or "")).name
        link = ""
        if page and store.path(f"report/{page}").is_file():
            href = cell_anchor(store, page, [r for r in item.get("rules") or [] if r])
            link = f"<a href='{esc(href)}'>{esc(Path(page).stem)}</a>"
        evidence = f"<code>{esc(str(item['evidence']))}</code>" if item.get("evidence") else ""
        rows.append([esc(str(item.get("id", ""))), esc(str(item.get("title", ""))), _badge(item.get("status")),
                     _observed_cell(_one_line(item.get("observed"))), " ".join(x for x in (link, evidence) if x)])
    counts: dict[str, int] = {}
    for item in checklist:
        counts[str(item.get("status"))] = counts.get(str(item.get("status")), 0) + 1
    tally = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return (f"<section><h2>The sheet at a glance ({len(checklist)} items: {esc(tally)})</h2>"
            + _table(("id", "check", "status", "observed", "evidence"), rows, "k3-sheet") + "</section>")


def integrity_block(store: RunStore) -> str:
    """The hash check at the time of writing, and how the signature is checked (it closes the manifest later)."""
    problems = store.verify()
    files = len(store.manifest()["files"])
    sig = store.read_json("signature.json") if store.path("signature.json").is_file() else None
    lines = [f"<p><b>Manifest:</b> {files} files listed with their sha256; "
             + ("all matched when this page was written." if not problems else
                f"{len(problems)} did NOT match when this page was written: " + esc("; ".join(problems[:5])))
             + "</p>"]
    if sig:
        lines.append(f"<p><b>Signature:</b> signed by {esc(str(sig.get('reviewer')))} at "
                     f"{esc(str(sig.get('signed_at')))}, decision {esc(str(sig.get('decision')))}.</p>")
    else:
        lines.append("<p><b>Signature:</b> not signed when this page was written. Sign with "
                     "<code>k3 sign RUN --reviewer NAME [--key FILE]</code>; the signature sits beside "
                     "<code>manifest.json</code> (<code>signature.json</code>, <code>manifest.json.sig</code>).</p>")
    lines.append("<p>Check at any time with <code>k3 verify RUN [--allowed-signers FILE]</code>: every file against "
                 "its hash, the signature against the manifest, the archived PDF against <code>report.json</code>."
                 "</p>")
    return "<section><h2>Signature and integrity</h2>" + "".join(lines) + "</section>"


def baseline_block(store: RunStore) -> str:
    data = store.read_json("baseline.json")
    if not isinstance(data, dict):
        return ""
    items = [f"<li>{esc(kind.upper())} {esc(str(f.get('message')))}</li>"
             for kind in ("reopen", "unverified", "drift") for f in data.get(kind) or [] if isinstance(f, dict)]
    return (f"<section><h2>Against the accepted baseline {esc(str(data.get('baseline')))}</h2>"
            f"<p><b>{esc(str(data.get('headline')))}</b></p><ul>{''.join(items)}</ul></section>")


def pages_block(pages: Sequence[tuple[str, str, str]]) -> str:
    rows = [[f"<a href='{esc(href)}'>{esc(label)}</a>", _badge(status)] for label, href, status in pages]
    return ("<section><h2>Notebooks (the evidence pages)</h2>" + _table(("notebook", "status"), rows)
            + "<p>Evidence: <code>evidence/*.json</code>, hashes in <code>manifest.json</code>.</p></section>")


def acceptance_index(store: RunStore, title: str, decision: DecisionDoc | None,
                     pages: Sequence[tuple[str, str, str]]) -> str:
    run = read_run(store.root)
    identity = _table(("item", "value", "read from"),
                      [[esc(a), esc(b), f"<small>{esc(c)}</small>"] for a, b, c in identity_rows(run)], "k3-identity")
    checklist = (decision or {}).get("checklist") or []
    numbers = _table(("figure", "value", "source"),
                     [[esc(a), esc(b), f"<small>{esc(c)}</small>"] for a, b, c in headline_numbers(run)], "k3-numbers")
    # above the fold: the decision with what stands between the run and production, beside the headline figures
    # and the deployment they were measured on; the plotted figures and the sheet follow
    top = (f"<header><h1>{esc(title)}</h1><p>Run <code>{esc(store.run_id)}</code></p></header>"
           f"<div class='k3-top'>{decision_block(decision)}<div><section><h2>Headline figures</h2>{numbers}</section>"
           f"<section><h2>Deployment</h2>{identity}</section></div></div>")
    return "".join([page_head(title), top, figures_block(run, numbers=False), sheet_block(store, checklist),
                    integrity_block(store), baseline_block(store), pages_block(pages), "</body></html>"])


def renewal_index(store: RunStore, title: str, decision: DecisionDoc | None,
                  pages: Sequence[tuple[str, str, str]]) -> str:
    records = read_records(store)
    rows = [[esc(r.axis), esc(r.title), _badge(r.status), esc(_one_line(r.summary)),
             f"<code>evidence/{esc(r.axis)}.json</code>"] for r in records.values()]
    analyses = ("<section><h2>The analyses</h2>"
                + _table(("axis", "analysis", "verdict", "summary", "evidence"), rows, "k3-sheet") + "</section>")
    return "".join([page_head(title, plotly=False),
                    f"<header><h1>{esc(title)}</h1><p>Run <code>{esc(store.run_id)}</code></p></header>",
                    decision_block(decision), analyses, cost_block(records), integrity_block(store),
                    pages_block(pages), "</body></html>"])


def cost_block(records: dict[str, EvidenceRecord]) -> str:
    """The cost sheet as the cost axis recorded it (k3lib.renewal.results.CostResult, read typed): an item nobody
    priced stays blank (never a zero). The renewal's records load here, on a review's index only: an acceptance
    run's batch never loads them (nor, through them, jsonschema's format parsers)."""
    from ..renewal.results import CostResult, read_record_data

    rec = records.get("cost")
    result = None
    reason = "no cost evidence recorded" if rec is None else rec.summary or "no cost sheet in the evidence"
    if rec is not None and not rec.error and rec.data:
        try:
            typed = read_record_data("cost", rec.data, "evidence/cost.json")
            result = typed if isinstance(typed, CostResult) else None
        except ArtifactError as exc:  # another kit version's record: said in one line, never guessed at
            reason = exc.one_line()
    if result is None:
        return "<section><h2>Cost sheet</h2><p>" + esc(reason) + "</p></section>"
    cur = esc(result.currency or "")

    def money(value: Any) -> str:
        return "" if value is None else f"{value:,.2f} {cur}" if isinstance(value, (int, float)) else esc(str(value))

    own, api = result.self_hosted, result.api
    rows = [[esc(i.item), money(i.amount)] for i in own.items]
    rows += [[esc(b), ""] for b in own.blank_items]
    rows += [[f"<b>{esc(label)}</b>", money(value)] for label, value in (
        ("known subtotal", own.known_subtotal), ("total (blank while an item is blank)", own.total),
        ("per accepted task", own.per_accepted_task))]
    rows += [[esc(label), money(value)] for label, value in (
        ("API bill for the same tasks", api.bill_same_tasks), ("API per accepted task", api.per_accepted_task))]
    note = f"<p>{esc(rec.summary)}</p>" if rec is not None and rec.summary else ""
    status = rec.status if rec is not None else None
    return ("<section><h2>Cost sheet</h2>" + note + _table(("item", "amount"), rows, "k3-cost")
            + f"<p>Evidence: <code>evidence/cost.json</code> ({_badge(status)})</p></section>")


def write_index(store: RunStore, title: str, decision: DecisionDoc | None,
                pages: Sequence[tuple[str, str, str]], *, kind: str = "acceptance") -> str:
    """report/index.html (and the folder's shared assets). Returns its path relative to the run."""
    ensure_assets(store)
    build = renewal_index if kind == "renewal" else acceptance_index
    store.write_text("report/index.html", clean_text(build(store, title, decision, pages), path_rewrites(store.root)))
    return "report/index.html"


# -- re-rendering a finished run ----------------------------------------------------------------------------------

def rerender(store: RunStore) -> str:
    """Every executed notebook of the run → its page again, then the index (a run of an older kit gets the
    shared plotly.js, clean pages and the arguing index). Never on a signed run."""

    _refuse_if_signed(store, "re-rendering the report")
    plan = review_plan() if run_kind(store) == "renewal" else acceptance_plan()
    pages = render_pages(store, plan.notebooks, plan.axes, read_records(store))
    decision = store.read_json("decision.json")
    if plan.kind == "renewal" and isinstance(decision, dict):
        decision = {**decision, "reasons": [f"condition: {decision.get('condition')}", *decision.get("reasons", [])]}
        decision.pop("condition", None)
    return write_index(store, plan.title, decision, pages, kind=plan.kind)
