"""The printed copy for the archive: the index and the full sheet as one PDF, printed by headless Chromium with the
network off, its sha256 recorded in `report.json`; and the check `k3 verify` makes of it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from ..core.errors import BadInputError
from ..core.plan import run_kind
from ..core.store import RunStore, atomic_write_bytes, sha256_file, utc_now
from ..verdict.shapes import ChecklistRow, DecisionDoc
from .markup import _badge, _table, esc
from .pages import REPORT_JSON, _refuse_if_signed
from .shapes import PdfEntry


def full_sheet_block(checklist: Sequence[ChecklistRow]) -> str:
    """The sheet with every column, for the printed copy (the index shows one line per item)."""
    cols = ("id", "title", "status", "test", "configuration", "observed", "evidence", "reviewer")
    rows = [[_badge(item.get(c)) if c == "status" else esc("" if item.get(c) is None else str(item.get(c)))
             for c in cols] for item in checklist]
    return ("<section style='break-before: page'><h2>The acceptance sheet</h2>"
            + _table(cols, rows, "k3-sheet") + "</section>")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        raise BadInputError("no headless Chromium to print with; install it (apt-get install chromium)",
                            source="--pdf")
    return exe


def print_pdf(store: RunStore, target: str | Path, *, timeout_s: float = 180.0) -> PdfEntry:
    """The index and the full sheet with its figures → one PDF printed by headless Chromium (network off: the page
    loads only the report folder's files). Its sha256 goes into `report.json`, which the manifest lists."""

    _refuse_if_signed(store, "recording a PDF in report.json")
    target = Path(target)
    if target.suffix.lower() != ".pdf":
        raise BadInputError("expected a file name ending in .pdf", source=str(target))
    index = store.path("report/index.html")
    if not index.is_file():
        raise BadInputError("no report/index.html: run `k3 report RUN` first", source=str(store.root))
    decision: DecisionDoc = store.read_json("decision.json") or DecisionDoc()
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
    entry: PdfEntry = {"file": inside or str(target.resolve()), "in_run": inside is not None,
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
