"""The report's pages: each executed notebook as offline HTML, cleaned for a reviewer, and the folder's shared assets.

Every page of a report folder loads one `plotly.min.js` and one `k3report.css` beside it (no CDN, no copy per
page), shows code only on request, and holds no object repr nor an absolute path of the machine: paths are shown
relative to the run folder (or to the kit). The index that argues the decision is `k3lib.report.index`; the PDF for
the archive, `k3lib.report.pdf`.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from traitlets.config import Config

from ..core.errors import BadInputError
from ..core.evidence import EvidenceRecord
from ..core.store import RunStore
from .shapes import CellOutput

TEMPLATES = Path(__file__).resolve().parent / "templates"
KIT_ROOT = Path(__file__).resolve().parents[2]
PLOTLY_JS = "plotly.min.js"
STYLESHEET = "k3report.css"
REPORT_JSON = "report.json"
UNREADABLE = "unreadable"  # a page's status when its executed notebook cannot be read

log = logging.getLogger(__name__)

# Reprs that say nothing to a reviewer: dataclass-style `Name(field=…)`, `<x.Y object at 0x…>`, paths.
_REPR = re.compile(r"^\s*(<[\w.]+ object at 0x[0-9a-f]+>|(Posix|Windows)?Path\(|[A-Z]\w*\(\w+=)", re.S)
_INLINE_PLOTLY = re.compile(r"<script[^>]*>\s*window\.PlotlyConfig\s*=\s*\{[^<]*</script>\s*|"
                            r"<script[^>]*>\s*/\*\*\s*\*\s*plotly\.js v[\s\S]*?</script>")


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


def is_bare_repr(output: CellOutput) -> bool:
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

    c = Config()
    c.TemplateExporter.extra_template_basedirs = [str(TEMPLATES)]
    c.HTMLExporter.template_name = "k3offline"
    c.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    c.HTMLExporter.embed_images = True
    return HTMLExporter(config=c)


def read_notebook(store: RunStore, nb_rel: str) -> Any:
    """An executed notebook of the run. Raises OSError or ValueError (not JSON, not a notebook, not UTF-8)."""
    import nbformat

    return nbformat.read(str(store.path(nb_rel)), as_version=4)


def render_notebook(store: RunStore, nb_rel: str, nb: Any = None) -> str:
    """notebooks/X.ipynb (or `nb`, read from it) → report/X.html, written atomically. Returns the report path
    relative to the run."""
    ensure_assets(store)
    nb = clean_notebook(read_notebook(store, nb_rel) if nb is None else nb, store.root)
    body, _ = _exporter().from_notebook_node(nb, resources={"metadata": {"name": Path(nb_rel).stem}})
    rel = f"report/{Path(nb_rel).stem}.html"
    store.write_text(rel, body)
    return rel


# -- every page of a run, and what kind of run it is --------------------------------------------------------------

def render_pages(store: RunStore, notebooks: Sequence[str], axis_of: dict[str, str], records: dict[str, EvidenceRecord],
                 failed: Iterable[str] = ()) -> list[tuple[str, str, str]]:
    """Every executed notebook to offline HTML: (label, page, status) rows for the index. A page's status is its
    axis record's, else fail for a notebook in `failed` (it did not complete), else pass; a notebook that cannot be
    read is named with why, status `unreadable`, linked to its file."""
    failed = set(failed)
    pages = []
    for nb in notebooks:
        if store.path(f"notebooks/{nb}").is_file():
            try:
                node = read_notebook(store, f"notebooks/{nb}")
            except (OSError, ValueError) as exc:  # not JSON, not a notebook, not UTF-8: named, never skipped
                reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
                log.warning("notebooks/%s cannot be read for the report: %s", nb, reason)
                pages.append((f"{nb} ({reason})", f"../notebooks/{nb}", UNREADABLE))
                continue
            rel = render_notebook(store, f"notebooks/{nb}", node)
            rec = records.get(axis_of.get(nb, ""))
            pages.append((nb, Path(rel).name, rec.status if rec else ("fail" if nb in failed else "pass")))
    return pages


def _refuse_if_signed(store: RunStore, what: str) -> None:
    if store.path("signature.json").exists():
        raise BadInputError(f"the run is signed: {what} would change its manifest after signing; do it before "
                            "`k3 sign` (or re-sign with --force afterwards)", source=str(store.root / "signature.json"))
