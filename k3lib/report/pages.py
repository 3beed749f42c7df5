"""The rendered report: each executed notebook as offline HTML, and an index that argues the decision.

Every page of a report folder loads one `plotly.min.js` and one `k3report.css` beside it (no CDN, no copy per
page), shows code only on request, and holds no object repr nor an absolute path of the machine: paths are shown
relative to the run folder (or to the kit). The index reads the evidence through `k3lib.verdict.accepted` and the sheet.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypeVar

from ..core.store import RunStore

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..core.evidence import CapacityStep

TEMPLATES = Path(__file__).resolve().parent / "templates"
KIT_ROOT = Path(__file__).resolve().parents[2]
PLOTLY_JS = "plotly.min.js"
STYLESHEET = "k3report.css"
REPORT_JSON = "report.json"

# Reprs that say nothing to a reviewer: dataclass-style `Name(field=…)`, `<x.Y object at 0x…>`, paths.
_REPR = re.compile(r"^\s*(<[\w.]+ object at 0x[0-9a-f]+>|(Posix|Windows)?Path\(|[A-Z]\w*\(\w+=)", re.S)
_INLINE_PLOTLY = re.compile(r"<script[^>]*>\s*window\.PlotlyConfig\s*=\s*\{[^<]*</script>\s*|"
                            r"<script[^>]*>\s*/\*\*\s*\*\s*plotly\.js v[\s\S]*?</script>")
esc = html.escape


# -- clean pages ---------------------------------------------------------------------------------------------------

def path_rewrites(run_root: Path) -> list[tuple[str, str]]:
    """Absolute prefixes → what a reviewer sees: the run folder's files relative to it, the kit's relative to the
    kit, the interpreter's under `<python>`. Longest first, so the run folder (often inside the kit) wins."""
    pairs: dict[str, str] = {}
    for root, shown in ((run_root, "."), (KIT_ROOT, "<kit>"), (Path(sys.prefix), "<python>"),
                        (Path(sys.base_prefix), "<python>"), (Path.home(), "~")):
        for form in {str(root), str(Path(root).resolve())}:
            if len(form) > 1:
                pairs.setdefault(form, shown)
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def clean_text(text: str, rewrites: Sequence[tuple[str, str]]) -> str:
    for prefix, shown in rewrites:
        if shown == ".":
            text = text.replace(prefix + "/", "").replace(prefix, ".")
        else:
            text = text.replace(prefix, shown)
    return text


def is_bare_repr(output: dict[str, Any]) -> bool:
    """An execute_result with only a text repr of an internal object (`AxisContext(…)`, `PosixPath(…)`)."""
    data = output.get("data") or {}
    if output.get("output_type") != "execute_result" or set(data) != {"text/plain"}:
        return False
    text = data["text/plain"]
    return bool(_REPR.match(text if isinstance(text, str) else "".join(text)))


def strip_inline_plotly(markup: str) -> str:
    """plotly.js inlined in a figure's HTML (older runs, or a notebook run outside the kit) → dropped; the page
    loads the report folder's copy."""
    return _INLINE_PLOTLY.sub("", markup)


def clean_notebook(nb: Any, run_root: Path) -> Any:
    """In place: bare reprs dropped, inline plotly.js dropped, absolute paths made relative, in code and outputs."""
    rewrites = path_rewrites(run_root)

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            return clean_text(value, rewrites)
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    for cell in nb.cells:
        cell.source = fix(cell.source)
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if is_bare_repr(out):
                continue
            if "text" in out:
                out["text"] = fix(out["text"])
            if "traceback" in out:
                out["traceback"] = fix(out["traceback"])
            if "evalue" in out:
                out["evalue"] = fix(out["evalue"])
            for mime in list((out.get("data") or {})):
                value = out["data"][mime]
                if mime == "text/html":
                    value = strip_inline_plotly(value if isinstance(value, str) else "".join(value))
                if isinstance(value, (str, list)):
                    out["data"][mime] = fix(value)
            kept.append(out)
        cell.outputs = kept
    return nb


# -- shared assets -------------------------------------------------------------------------------------------------

def _lab_static(name: str) -> str:
    from jupyter_core.paths import jupyter_path

    for folder in jupyter_path("nbconvert", "templates", "lab", "static"):
        path = Path(folder) / name
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return ""


def stylesheet() -> str:
    """JupyterLab's notebook styles (light theme) once for the folder, then the report's own."""
    return "\n".join([_lab_static("index.css"), _lab_static("theme-light.css"),
                      (TEMPLATES / "k3offline" / "static" / STYLESHEET).read_text(encoding="utf-8")])


def ensure_assets(store: RunStore) -> None:
    """`report/plotly.min.js` and `report/k3report.css`, written once per report folder (rewritten if changed)."""
    from plotly.offline import get_plotlyjs

    files = store.manifest()["files"]
    for rel, text in ((f"report/{PLOTLY_JS}", None), (f"report/{STYLESHEET}", stylesheet())):
        if text is None:
            if rel in files and store.path(rel).is_file():
                continue
            text = get_plotlyjs()
        elif rel in files and store.path(rel).is_file() and store.path(rel).read_text(encoding="utf-8") == text:
            continue
        store.write_text(rel, text)


def _exporter() -> Any:
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    c = Config()
    c.TemplateExporter.extra_template_basedirs = [str(TEMPLATES)]
    c.HTMLExporter.template_name = "k3offline"
    c.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    c.HTMLExporter.embed_images = True
    return HTMLExporter(config=c)


def render_notebook(store: RunStore, nb_rel: str) -> str:
    """notebooks/X.ipynb → report/X.html, written atomically. Returns the report path relative to the run."""
    import nbformat

    ensure_assets(store)
    nb = clean_notebook(nbformat.read(str(store.path(nb_rel)), as_version=4), store.root)
    body, _ = _exporter().from_notebook_node(nb, resources={"metadata": {"name": Path(nb_rel).stem}})
    rel = f"report/{Path(nb_rel).stem}.html"
    store.write_text(rel, body)
    return rel


# -- the index -----------------------------------------------------------------------------------------------------

def page_head(title: str, *, plotly: bool = True) -> str:
    js = (f"<script>window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script><script src='{PLOTLY_JS}'></script>"
          if plotly else "")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<link rel='stylesheet' href='{STYLESHEET}'>{js}</head><body class='k3-index'>")


def _badge(word: Any) -> str:
    from .views import badge

    return badge(str(word))


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        value = f"{value:.3g}"
    return f"{value}{unit}"


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


def decision_block(decision: dict[str, Any] | None, *, cap_label: str = "Traffic cap") -> str:
    if not decision:
        return "<section class='k3-decision'><h2>Decision: none (the summary did not complete)</h2></section>"
    out = [f"<section class='k3-decision'><h2>Decision: {_badge(decision.get('decision'))}</h2><ul>"]
    out += [f"<li>{esc(str(r))}</li>" for r in decision.get("reasons", [])]
    out.append("</ul>")
    if decision.get("condition"):
        out.append(f"<p><b>Condition:</b> {esc(str(decision['condition']))}</p>")
    if "traffic_cap" in decision:
        out.append(f"<p><b>{cap_label}:</b> {esc(_cap_text(decision.get('traffic_cap')))}</p>")
    if decision.get("reexamine_on"):
        out.append(f"<p><b>Re-examine on:</b> {esc(str(decision['reexamine_on']))}</p>")
    from .views import loosened_table

    out.append(loosened_table(decision.get("loosened_thresholds") or ()))
    out.append("</section>")
    return "".join(out)


_M = TypeVar("_M", bound="BaseModel")


def _typed(run: Any, axis: str, model: type[_M]) -> _M | None:
    """An axis' data as its typed model (k3lib.core.evidence.DATA_MODELS: declared fields only, so a key the axis does
    not write cannot be read by mistake); None when the run has no such record."""
    rec = run.records.get(axis)
    data = rec.typed() if rec is not None else None
    return data if isinstance(data, model) else None


def identity_rows(run: Any) -> list[tuple[str, str, str]]:
    """(item, value, where it was read) of the deployment, from the evidence through `k3lib.verdict.accepted`."""
    from ..verdict import accepted as acc
    from ..core.evidence import EnvironmentData, ProbeData

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


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """Cells are given as markup already (escape what comes from evidence before passing it)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{cls}'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _one_line(text: Any, limit: int = 160) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[:limit - 1] + "…"


def cell_anchor(store: RunStore, page: str, needles: Sequence[str]) -> str:
    """`page#cell-id=…` of the first code cell of the page's notebook whose output names one of `needles`."""
    import nbformat

    nb_path = store.path(f"notebooks/{Path(page).stem}.ipynb")
    if not needles or not nb_path.is_file():
        return page
    try:
        nb = nbformat.read(str(nb_path), as_version=4)
    except Exception:  # noqa: BLE001 - an unreadable notebook: link the page only
        return page
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.get("id"):
            continue
        text = json.dumps(cell.get("outputs", []))
        if any(n in text for n in needles):
            return f"{page}#cell-id={cell.id}"
    return page


def sheet_block(store: RunStore, checklist: Sequence[dict[str, Any]]) -> str:
    rows = []
    for item in checklist:
        page = Path(str(item.get("notebook") or "")).name
        link = ""
        if page and store.path(f"report/{page}").is_file():
            href = cell_anchor(store, page, [r for r in item.get("rules") or [] if r])
            link = f"<a href='{esc(href)}'>{esc(Path(page).stem)}</a>"
        evidence = f"<code>{esc(str(item['evidence']))}</code>" if item.get("evidence") else ""
        rows.append([esc(str(item.get("id", ""))), esc(str(item.get("title", ""))), _badge(item.get("status")),
                     esc(_one_line(item.get("observed"))), " ".join(x for x in (link, evidence) if x)])
    counts: dict[str, int] = {}
    for item in checklist:
        counts[str(item.get("status"))] = counts.get(str(item.get("status")), 0) + 1
    tally = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return (f"<section><h2>The sheet at a glance ({len(checklist)} items: {esc(tally)})</h2>"
            + _table(("id", "check", "status", "observed", "evidence"), rows, "k3-sheet") + "</section>")


# -- headline figures (small plots) -------------------------------------------------------------------------------

def _small(fig: Any, title: str) -> Any:
    fig.update_layout(title=dict(text=title, font=dict(size=12)), height=250, width=325,
                      margin=dict(t=40, b=40, l=50, r=10), legend=dict(orientation="h", y=-0.25, font=dict(size=10)),
                      template="plotly_white")
    return fig


def _steps(run: Any) -> list[CapacityStep]:
    from ..core.evidence import CapacityData

    cap = _typed(run, "capacity", CapacityData)
    return list(cap.steps) if cap is not None else []


def fig_ttft_kv(run: Any) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    steps = _steps(run)
    if not steps:
        return None
    x = [s.concurrency for s in steps]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=x, y=[s.ttft_p50_ms for s in steps], mode="lines+markers", name="TTFT p50 (ms)"))
    fig.add_trace(go.Scatter(x=x, y=[s.ttft_p95_ms for s in steps], mode="lines+markers", name="TTFT p95 (ms)"))
    fig.add_trace(go.Bar(x=x, y=[None if s.kv_usage_max is None else s.kv_usage_max * 100 for s in steps],
                         name="KV usage max (%)", opacity=0.35), secondary_y=True)
    planned = (run.params.get("contract") or {}).get("planned_concurrency")
    if planned:
        fig.add_vline(x=planned, line_dash="dot", annotation_text="planned", annotation_font_size=10)
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(title_text="ms", secondary_y=False)
    fig.update_yaxes(title_text="KV %", range=[0, 100], dtick=25, showgrid=False, secondary_y=True)
    return _small(fig, "TTFT and KV usage per concurrency step")


def fig_memory_phases(run: Any, root: Path) -> Any:
    import plotly.graph_objects as go

    from ..axes.capacity.analysis import MIB, gpu_keys, gpu_label
    from ..core.evidence import CapacityData

    cap = _typed(run, "capacity", CapacityData)
    phases = list(cap.phases or []) if cap is not None else []
    try:
        samples = json.loads((root / "evidence/capacity/gpu.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        samples = []
    if not phases or not isinstance(samples, list) or not samples:
        return None
    fig = go.Figure()
    names = [p.phase for p in phases]
    for key in gpu_keys(samples):
        peaks = []
        for p in phases:
            lo, hi = p.start_wall or 0, p.end_wall or float("inf")
            vals = [r["fb_used_bytes"] / MIB for r in samples if (str(r.get("host")), r.get("gpu")) == key
                    and r.get("fb_used_bytes") is not None and lo <= r.get("t_wall", -1) <= hi]
            peaks.append(round(max(vals)) if vals else None)
        fig.add_trace(go.Bar(x=names, y=peaks, name=gpu_label(key)))
    fig.update_yaxes(title_text="MiB (peak)")
    return _small(fig, "Memory per GPU through the phases")


def fig_cold_warm(run: Any) -> Any:
    import plotly.graph_objects as go

    from ..core.evidence import PrefixCacheData

    rec = _typed(run, "prefix_cache", PrefixCacheData)
    pairs = list(rec.pairs) if rec is not None else []
    if not pairs:
        return None
    x = [f"s{p.session}" for p in pairs]
    fig = go.Figure([go.Bar(x=x, y=[p.cold_ttft_ms for p in pairs], name="cold TTFT (ms)"),
                     go.Bar(x=x, y=[p.warm_ttft_ms for p in pairs], name="warm TTFT (ms)")])
    gain = rec.ttft_gain_pct if rec is not None else None
    fig.update_yaxes(title_text="ms")
    return _small(fig, "Cold vs warm TTFT per session" + (f" (gain {gain}%)" if gain is not None else ""))


def fig_tool_rate(run: Any) -> Any:
    import plotly.graph_objects as go

    from ..verdict import accepted as acc
    from ..core.evidence import AgentData, AgentRate

    rec = _typed(run, "agent", AgentData)
    rates = [r for r in rec.rates if r.total] if rec is not None else []
    if not rates:
        return None
    levels = list(dict.fromkeys(r.level for r in rates))

    def pct(rows: list[AgentRate]) -> float | None:
        return min(100 * r.passed / r.total for r in rows) if rows else None

    valid = [pct([r for r in rates if r.level == lv and r.check == acc.AGENT_VALIDITY_CHECK]) for lv in levels]
    lowest = [pct([r for r in rates if r.level == lv]) for lv in levels]
    fig = go.Figure([go.Scatter(x=[str(lv) for lv in levels], y=valid, mode="lines+markers",
                                name="arguments valid (%)", line=dict(width=3)),
                     go.Scatter(x=[str(lv) for lv in levels], y=lowest, mode="lines+markers",
                                name="lowest of all checks (%)", line=dict(dash="dot"))])
    fig.update_xaxes(title_text="concurrency", type="category")
    fig.update_yaxes(title_text="% passed", range=[0, 105])
    return _small(fig, "Tool-contract rate per concurrency")


def headline_numbers(run: Any) -> list[tuple[str, str, str]]:
    """(figure, value, source): the levels a re-validation compares, as `k3lib.verdict.accepted` derives them."""
    from ..verdict import accepted as acc

    out = []
    for label, func, unit, scale in (("queue time p95 at planned concurrency", acc.queue_time_p95_s, " s", 1),
                                     ("KV usage at planned concurrency", acc.kv_usage_at_planned, " %", 100),
                                     ("prefix-cache hit rate (warm)", acc.prefix_hit_rate, " %", 100),
                                     ("tool-call validity", acc.tool_call_validity, " %", 100)):
        lv = func(run)
        if lv.value is None:
            out.append((label, "", f"not in the evidence: {lv.reason or ''}"))
        else:
            out.append((label, _fmt(float(lv.value) * scale, unit), lv.source or ""))
    from ..core.evidence import CapacityData, PrefixCacheData

    cap = _typed(run, "capacity", CapacityData)
    if cap is not None:
        sat = cap.saturation_point
        out.append(("saturation point (concurrency)", _fmt(sat) if sat is not None else "not reached in the steps",
                    "evidence/capacity.json: data.saturation_point"))
        found = cap.step_at((run.params.get("contract") or {}).get("planned_concurrency"))
        if found:
            out.append(("TTFT p95 at planned concurrency", _fmt(found[1].ttft_p95_ms, " ms"),
                        "evidence/capacity.json: data.steps"))
    pc = _typed(run, "prefix_cache", PrefixCacheData)
    if pc is not None and pc.ttft_gain_pct is not None:
        out.append(("prefix-cache TTFT gain", _fmt(pc.ttft_gain_pct, " %"),
                    "evidence/prefix_cache.json: data.ttft_gain_pct"))
    return out


def figures_block(run: Any) -> str:
    figs = []
    for build in (fig_ttft_kv, lambda r: fig_memory_phases(r, r.root), fig_cold_warm, fig_tool_rate):
        try:
            fig = build(run)
        except (KeyError, TypeError, ValueError) as exc:  # evidence of another shape: said, never guessed
            figs.append(f"<div class='k3-fig k3-missing'>figure not drawn: {esc(type(exc).__name__)}</div>")
            continue
        if fig is not None:
            figs.append("<div class='k3-fig'>" + fig.to_html(full_html=False, include_plotlyjs=False,
                                                                include_mathjax=False,
                                                                config={"displaylogo": False,
                                                                        "staticPlot": True}) + "</div>")
    rows = [[esc(a), esc(b), f"<small>{esc(c)}</small>"] for a, b, c in headline_numbers(run)]
    return ("<section><h2>Headline figures</h2><div class='k3-figs'>" + "".join(figs) + "</div>"
            + _table(("figure", "value", "source"), rows, "k3-numbers") + "</section>")


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


def acceptance_index(store: RunStore, title: str, decision: dict[str, Any] | None,
                     pages: Sequence[tuple[str, str, str]]) -> str:
    from ..verdict.accepted import read_run

    run = read_run(store.root)
    identity = _table(("item", "value", "read from"),
                      [[esc(a), esc(b), f"<small>{esc(c)}</small>"] for a, b, c in identity_rows(run)], "k3-identity")
    checklist = (decision or {}).get("checklist") or []
    top = (f"<header><h1>{esc(title)}</h1><p>Run <code>{esc(store.run_id)}</code></p></header>"
           f"<div class='k3-top'>{decision_block(decision)}<section><h2>Deployment</h2>{identity}</section></div>")
    return "".join([page_head(title), top, sheet_block(store, checklist), figures_block(run),
                    integrity_block(store), baseline_block(store), pages_block(pages), "</body></html>"])


def renewal_index(store: RunStore, title: str, decision: dict[str, Any] | None,
                  pages: Sequence[tuple[str, str, str]]) -> str:
    from ..core.evidence import read_records

    records = read_records(store)
    rows = [[esc(r.axis), esc(r.title), _badge(r.status), esc(_one_line(r.summary, 200)),
             f"<code>evidence/{esc(r.axis)}.json</code>"] for r in records.values()]
    analyses = ("<section><h2>The analyses</h2>"
                + _table(("axis", "analysis", "verdict", "summary", "evidence"), rows, "k3-sheet") + "</section>")
    return "".join([page_head(title, plotly=False),
                    f"<header><h1>{esc(title)}</h1><p>Run <code>{esc(store.run_id)}</code></p></header>",
                    decision_block(decision), analyses, cost_block(records), integrity_block(store),
                    pages_block(pages), "</body></html>"])


def cost_block(records: dict[str, Any]) -> str:
    """The cost sheet as the cost axis recorded it (k3lib.renewal.results.CostResult, read typed): an item nobody
    priced stays blank (never a zero)."""
    from ..core.errors import ArtifactError
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


def write_index(store: RunStore, title: str, decision: dict[str, Any] | None,
                pages: Sequence[tuple[str, str, str]], *, kind: str = "acceptance") -> str:
    """report/index.html (and the folder's shared assets). Returns its path relative to the run."""
    ensure_assets(store)
    build = renewal_index if kind == "renewal" else acceptance_index
    store.write_text("report/index.html", clean_text(build(store, title, decision, pages), path_rewrites(store.root)))
    return "report/index.html"


def index_html(title: str, decision: dict[str, Any] | None, pages: list[tuple[str, str, str]],
               run_id: str) -> str:
    """A minimal index without the run's evidence (kept for callers that have no store)."""
    return "".join([page_head(title, plotly=False), f"<h1>{esc(title)}</h1><p>Run <code>{esc(run_id)}</code></p>",
                    decision_block(decision), pages_block(pages), "</body></html>"])


# -- re-rendering a finished run, and the PDF for the archive ---------------------------------------------------------

def render_pages(store: RunStore, notebooks: Sequence[str], axis_of: dict[str, str], records: dict[str, Any],
                 failed: Iterable[str] = ()) -> list[tuple[str, str, str]]:
    """Every executed notebook to offline HTML: (label, page, status) rows for the index. A page's status is its
    axis record's, else fail for a notebook in `failed` (it did not complete), else pass."""
    failed = set(failed)
    pages = []
    for nb in notebooks:
        if store.path(f"notebooks/{nb}").is_file():
            rel = render_notebook(store, f"notebooks/{nb}")
            rec = records.get(axis_of.get(nb, ""))
            pages.append((nb, Path(rel).name, rec.status if rec else ("fail" if nb in failed else "pass")))
    return pages


def run_kind(store: RunStore) -> str:
    from ..core.plan import REVIEW_SUMMARY

    return "renewal" if store.path(f"notebooks/{REVIEW_SUMMARY}").is_file() else "acceptance"


def _refuse_if_signed(store: RunStore, what: str) -> None:
    from ..core.errors import BadInputError

    if store.path("signature.json").exists():
        raise BadInputError(f"the run is signed: {what} would change its manifest after signing; do it before "
                            "`k3 sign` (or re-sign with --force afterwards)", source=str(store.root / "signature.json"))


def rerender(store: RunStore) -> str:
    """Every executed notebook of the run → its page again, then the index (a run of an older kit gets the
    shared plotly.js, clean pages and the arguing index). Never on a signed run."""
    from ..core.plan import acceptance_plan, review_plan
    from ..core.evidence import read_records

    _refuse_if_signed(store, "re-rendering the report")
    plan = review_plan() if run_kind(store) == "renewal" else acceptance_plan()
    pages = render_pages(store, plan.notebooks, plan.axes, read_records(store))
    decision = store.read_json("decision.json")
    if plan.kind == "renewal" and isinstance(decision, dict):
        decision = {**decision, "reasons": [f"condition: {decision.get('condition')}", *decision.get("reasons", [])]}
        decision.pop("condition", None)
    return write_index(store, plan.title, decision, pages, kind=plan.kind)


def full_sheet_block(checklist: Sequence[dict[str, Any]]) -> str:
    """The sheet with every column, for the printed copy (the index shows one line per item)."""
    cols = ("id", "title", "status", "test", "configuration", "observed", "evidence", "reviewer")
    rows = [[_badge(item.get(c)) if c == "status" else esc("" if item.get(c) is None else str(item.get(c)))
             for c in cols] for item in checklist]
    return ("<section style='break-before: page'><h2>The acceptance sheet</h2>"
            + _table(cols, rows, "k3-sheet") + "</section>")


def chromium() -> str:
    import shutil

    from ..core.errors import BadInputError

    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        raise BadInputError("no headless Chromium to print with; install it (apt-get install chromium)",
                            source="--pdf")
    return exe


def print_pdf(store: RunStore, target: str | Path, *, timeout_s: float = 180.0) -> dict[str, Any]:
    """The index and the full sheet with its figures → one PDF printed by headless Chromium (network off: the page
    loads only the report folder's files). Its sha256 goes into `report.json`, which the manifest lists."""
    import hashlib
    import subprocess
    import tempfile

    from ..core.errors import BadInputError
    from ..core.store import atomic_write_bytes, sha256_file, utc_now

    _refuse_if_signed(store, "recording a PDF in report.json")
    target = Path(target)
    if target.suffix.lower() != ".pdf":
        raise BadInputError("expected a file name ending in .pdf", source=str(target))
    index = store.path("report/index.html")
    if not index.is_file():
        raise BadInputError("no report/index.html: run `k3 report RUN` first", source=str(store.root))
    decision = store.read_json("decision.json") or {}
    report_dir = store.path("report").resolve()
    page = index.read_text(encoding="utf-8")
    # the printed copy loads the report folder's own assets; relative links would resolve in the temp folder
    base = f"<base href='{report_dir.as_uri()}/'>"
    page = page.replace("<head>", "<head>" + base, 1).replace("</body></html>", "")
    if decision.get("checklist") and run_kind(store) == "acceptance":
        page += full_sheet_block(decision["checklist"])
    page += "</body></html>"
    exe = chromium()
    with tempfile.TemporaryDirectory(prefix="k3-pdf-") as tmp:
        src, out = Path(tmp) / "print.html", Path(tmp) / "report.pdf"
        src.write_text(page, encoding="utf-8")
        cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",  # nothing leaves the machine
               f"--user-data-dir={Path(tmp) / 'profile'}", "--no-pdf-header-footer", "--print-to-pdf-no-header",
               "--virtual-time-budget=10000", f"--print-to-pdf={out}", src.as_uri()]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise BadInputError(f"Chromium did not print within {timeout_s:.0f} s", source=exe) from None
        if not out.is_file() or not out.read_bytes().startswith(b"%PDF"):
            said = (proc.stderr or proc.stdout).strip().splitlines()
            raise BadInputError(f"Chromium printed no PDF (exit {proc.returncode}): "
                                f"{said[-1] if said else 'no output'}", source=exe)
        data = out.read_bytes()
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    inside = _inside(store, target)
    if inside is not None:
        store.write_bytes(inside, data)
    else:
        atomic_write_bytes(target.resolve(), data)
    entry = {"file": inside or str(target.resolve()), "in_run": inside is not None,
             "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "printed_at": utc_now(),
             "printed_by": version or Path(exe).name, "of": ["report/index.html", "decision.json: checklist"],
             "decision": decision.get("decision"),
             "manifest_sha256_before": sha256_file(store.path("manifest.json"))}
    record = store.read_json(REPORT_JSON) or {}
    pdfs = [p for p in record.get("pdf", []) if isinstance(p, dict) and p.get("file") != entry["file"]]
    store.write_json(REPORT_JSON, {**record, "pdf": [*pdfs, entry]})
    return entry


def _inside(store: RunStore, target: Path) -> str | None:
    try:
        return target.resolve().relative_to(store.root.resolve()).as_posix()
    except ValueError:
        return None


def pdf_problems(store: RunStore) -> tuple[list[str], list[str]]:
    """(changed, notes) for `k3 verify`: each PDF recorded in report.json against its sha256. One inside the run
    is in the manifest too; one archived elsewhere is checked where it was written, or said not found."""
    from ..core.store import sha256_file

    record = store.read_json(REPORT_JSON) if store.path(REPORT_JSON).is_file() else None
    changed: list[str] = []
    notes: list[str] = []
    for entry in (record or {}).get("pdf", []) if isinstance(record, dict) else []:
        if not isinstance(entry, dict) or not entry.get("file"):
            changed.append(f"{REPORT_JSON}: a PDF entry without a file")
            continue
        path = store.path(entry["file"]) if entry.get("in_run") else Path(entry["file"])
        if not path.is_file():
            (changed if entry.get("in_run") else notes).append(
                f"{entry['file']}: PDF recorded in {REPORT_JSON} not found" + ("" if entry.get("in_run") else
                                                                               " here (archived elsewhere?)"))
        elif sha256_file(path) != entry.get("sha256"):
            changed.append(f"{entry['file']}: PDF changed (sha256 differs from {REPORT_JSON})")
        else:
            notes.append(f"{entry['file']}: PDF matches {REPORT_JSON}")
    return changed, notes
