"""The report a reviewer forwards: clean pages (no reprs, no machine paths), one plotly.js per folder, under 6 MB,
an index that argues the decision above the fold, and the PDF for the archive that `k3 verify` checks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import nbformat
import pytest

from chromium import CHROMIUM, needs_chromium
from k3lib.cli.main import main
from k3lib.report.pages import KIT_ROOT, PLOTLY_JS, clean_notebook, clean_text, is_bare_repr, path_rewrites, \
    strip_inline_plotly
from k3lib.core.store import RunStore

LEAKS = ("PosixPath(", "AxisContext(", "object at 0x")
REPORT_LIMIT_BYTES = 6 * 1024 * 1024


# -- pure parts ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, bare", [
    pytest.param("AxisContext(axis='capacity', run='/x', target=T)", True, id="dataclass"),
    pytest.param("PosixPath('/srv/outputs/run')", True, id="path"),
    pytest.param("<k3lib.x.Thing object at 0x7f00aa>", True, id="object"),
    pytest.param("42", False, id="number"),
    pytest.param("'production'", False, id="string"),
    pytest.param("Decision: production", False, id="sentence"),
])
def test_bare_reprs_are_recognised(text, bare):
    assert is_bare_repr({"output_type": "execute_result", "data": {"text/plain": text}}) is bare
    # an object that also has a rich view keeps its output
    assert not is_bare_repr({"output_type": "execute_result", "data": {"text/plain": text, "text/html": "<b>"}})


def test_paths_become_relative_to_the_run_then_the_kit(tmp_path):
    run = tmp_path / "outputs" / "20261201T000000Z-abc"
    rewrites = path_rewrites(run)
    text = f"run_dir = \"{run}\"\nparams = \"{run}/params.json\"\nsample = \"{KIT_ROOT}/k3lib/data/a.yaml\""
    cleaned = clean_text(text, rewrites)
    assert cleaned == 'run_dir = "."\nparams = "params.json"\nsample = "<kit>/k3lib/data/a.yaml"'
    assert str(tmp_path) not in cleaned and str(KIT_ROOT) not in cleaned


def test_inline_plotly_is_dropped_and_the_figure_kept():
    import plotly.graph_objects as go
    import plotly.io as pio

    markup = pio.to_html(go.Figure(go.Scatter(y=[1, 2])), full_html=False, include_plotlyjs=True)
    assert "plotly.js v" in markup and len(markup) > 1_000_000
    kept = strip_inline_plotly(markup)
    assert "plotly.js v" not in kept and "Plotly.newPlot" in kept and len(kept) < 50_000


def test_a_notebook_is_cleaned_in_code_and_outputs(tmp_path):
    run = tmp_path / "run"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f'run_dir = "{run}"', outputs=[
        nbformat.v4.new_output("execute_result", {"text/plain": f"AxisContext(axis='a', run='{run}')"}),
        nbformat.v4.new_output("stream", text=f"wrote {run}/evidence/a.json\n"),
        nbformat.v4.new_output("display_data", {"text/html": f"<p>{run}/report</p>", "text/plain": "x"})])])
    cleaned = json.dumps(clean_notebook(nb, run))
    assert "AxisContext(" not in cleaned and str(run) not in cleaned
    assert "wrote evidence/a.json" in cleaned and "<p>report</p>" in cleaned


# -- the demo's runs ----------------------------------------------------------------------------------------------

def _pages(store: RunStore):
    pages = sorted(store.path("report").glob("*.html"))
    assert store.path("report/index.html") in pages and len(pages) >= 7
    return pages


def _check_clean(store: RunStore) -> None:
    roots = {str(store.root), str(store.root.resolve()), str(KIT_ROOT)}
    for page in _pages(store):
        text = page.read_text(encoding="utf-8")
        found = [s for s in LEAKS if s in text] + [r for r in roots if r in text]
        assert not found, f"{page.name} shows {found}"
        assert "plotly.js v" not in text, f"{page.name} inlines its own plotly.js"
        assert f"src=\"{PLOTLY_JS}\"" in text or f"src='{PLOTLY_JS}'" in text or page.name == "index.html"


def test_acceptance_pages_are_clean_and_share_one_plotly(healthy_run):
    _, store = healthy_run
    _check_clean(store)
    files = [p for p in store.path("report").rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    assert size < REPORT_LIMIT_BYTES, f"acceptance report is {size} bytes"
    assert [p.name for p in files].count(PLOTLY_JS) == 1
    listed = store.manifest()["files"]
    assert f"report/{PLOTLY_JS}" in listed and "report/k3report.css" in listed and store.verify() == []
    # the views registered when a notebook opened its session: the summary page shows the decision's HTML view,
    # an axis page its evidence record's (neither is a bare repr the cleaner drops)
    assert "Decision: <span" in store.path("report/99_acceptance.html").read_text(encoding="utf-8")
    assert "Evidence: <code>evidence/probe.json</code>" in store.path("report/00_probe.html").read_text(
        encoding="utf-8")
    # nor do the executed notebooks carry plotly.js any more
    assert all("plotly.js v" not in p.read_text(encoding="utf-8") for p in store.path("notebooks").glob("*.ipynb"))


@pytest.mark.slow
def test_renewal_pages_are_clean_and_the_index_argues_the_renewal(renewal_run):
    _check_clean(renewal_run)
    index = renewal_run.path("report/index.html").read_text(encoding="utf-8")
    # the steady demo renews (known from the scenario), not whatever decision.json happens to hold
    assert ">renew<" in index and "condition:" in index
    for axis in ("load", "production", "comparison", "cost", "stability", "operations"):
        assert f"evidence/{axis}.json" in index
    assert "Cost sheet" in index and "per accepted task" in index


def test_the_index_argues_the_decision(healthy_run):
    _, store = healthy_run
    index = store.path("report/index.html").read_text(encoding="utf-8")
    decision = store.read_json("decision.json")
    assert ">production<" in index  # the healthy emulator run is production (test_batch), not read back from here
    assert decision["reasons"] and decision["checklist"]  # the loops below check something
    for reason in decision["reasons"]:
        assert re.sub(r"\s+", " ", reason.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                      .replace("'", "&#x27;").replace('"', "&quot;"))[:40] in re.sub(r"\s+", " ", index)
    vllm = (store.read_json("evidence/probe.json") or {})["data"]["vllm_version"]
    assert vllm in index and "host driver" in index and "topology" in index
    for item in decision["checklist"]:
        assert f"<td>{item['id']}</td>" in index
    assert len(re.findall(r"<td>C\d\d</td>", index)) == 16
    assert index.count("class=\"plotly-graph-div\"") >= 4, "headline figures"
    assert "not signed when this page was written" in index and "k3 verify" in index


def _fold_probe(store: RunStore, tmp_path):
    """Copy the report folder, add a script that writes where each block ends, and dump the DOM at 1400×2600."""
    folder = tmp_path / "report"
    shutil.copytree(store.path("report"), folder)
    index = folder / "index.html"
    probe = ("<script>window.addEventListener('load', () => setTimeout(() => {"
             "const b = s => Array.from(document.querySelectorAll(s)).map(e => e.getBoundingClientRect().bottom);"
             "const drawn = document.querySelectorAll('.k3-fig .main-svg').length;"
             "document.body.setAttribute('data-fold', JSON.stringify({decision: b('.k3-decision'), "
             "identity: b('.k3-identity'), sheet: b('.k3-sheet'), figs: b('.k3-fig'), drawn}));}, 500));</script>")
    index.write_text(index.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    proc = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--proxy-server=http://127.0.0.1:9", "--window-size=1400,2600",
                           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
                           f"--screenshot={tmp_path / 'index.png'}", "--dump-dom", index.as_uri()],
                          capture_output=True, text=True, timeout=180)
    found = re.search(r"data-fold=\"([^\"]+)\"", proc.stdout)
    assert found, "the probe script did not run"
    return json.loads(found.group(1).replace("&quot;", '"'))


@needs_chromium
def test_the_index_holds_decision_identity_sheet_and_plots_above_the_fold(healthy_run, tmp_path):
    _, store = healthy_run
    fold = _fold_probe(store, tmp_path)
    assert fold["decision"] and fold["identity"] and fold["sheet"] and len(fold["figs"]) >= 4
    for block in ("decision", "identity", "sheet", "figs"):
        assert max(fold[block]) <= 2600, f"{block} ends at {max(fold[block])} px, below the 2600 px fold"
    assert fold["drawn"] >= 4, "a headline figure did not draw"


# -- the PDF for the archive --------------------------------------------------------------------------------------

@needs_chromium
def test_pdf_is_printed_recorded_and_verified(healthy_run, tmp_path, capsys):
    _, original = healthy_run
    shutil.copytree(original.root, tmp_path / "run")
    store = RunStore(tmp_path / "run")
    outside = tmp_path / "archive" / "acceptance.pdf"
    assert main(["report", str(store.root), "--pdf", str(outside)]) == 0
    data = outside.read_bytes()
    assert data.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page\b", data)) >= 2
    record = store.read_json("report.json")
    (entry,) = record["pdf"]
    assert entry["in_run"] is False and entry["bytes"] == len(data)
    assert "report.json" in store.manifest()["files"]
    capsys.readouterr()
    assert main(["verify", str(store.root)]) == 0
    assert "PDF matches report.json" in capsys.readouterr().out

    inside = store.path("archive/acceptance.pdf")
    assert main(["report", str(store.root), "--pdf", str(inside)]) == 0
    assert "archive/acceptance.pdf" in store.manifest()["files"]
    assert len(store.read_json("report.json")["pdf"]) == 2

    outside.write_bytes(data[:-10] + b"tampered\n")
    capsys.readouterr()
    assert main(["verify", str(store.root)]) == 1
    assert "acceptance.pdf: PDF changed" in capsys.readouterr().out

    outside.write_bytes(data)
    assert main(["sign", str(store.root), "--reviewer", "R. Eviewer", "--demo"]) == 0  # the demo, signed as one
    capsys.readouterr()
    assert main(["report", str(store.root), "--pdf", str(tmp_path / "again.pdf")]) == 2
    err = capsys.readouterr().err
    assert "signed" in err and len(err.strip().splitlines()) == 1
    assert main(["verify", str(store.root)]) == 0


def test_pdf_refuses_a_bad_name_in_one_line(healthy_run, tmp_path, capsys):
    _, store = healthy_run
    assert main(["report", str(store.root), "--pdf", str(tmp_path / "report.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert "expected a file name ending in .pdf" in err and len(err.splitlines()) == 1
    assert main(["report", str(tmp_path / "nothing")]) == 2


def test_an_unreadable_notebook_is_named_in_the_index_not_skipped(tmp_path, caplog):
    """A run's executed notebook that cannot be read (a torn write, an edit) keeps its row in the index, with why,
    and leaves a warning in the log; the index is still written."""
    from k3lib.report.index import write_index
    from k3lib.report.pages import UNREADABLE, render_pages

    store = RunStore.create_at(tmp_path / "run")
    store.write_text("notebooks/03_capacity.ipynb", '{"cells": [')
    with caplog.at_level("WARNING", logger="k3lib"):
        rows = render_pages(store, ["03_capacity.ipynb"], {"03_capacity.ipynb": "capacity"}, {})
    ((label, href, status),) = rows
    assert status == UNREADABLE and label.startswith("03_capacity.ipynb (NotJSONError")
    assert href == "../notebooks/03_capacity.ipynb" and not store.path("report/03_capacity.html").exists()
    assert any("notebooks/03_capacity.ipynb" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    index = store.path(write_index(store, "acceptance", None, rows)).read_text()
    assert "03_capacity.ipynb (NotJSONError" in index and ">unreadable<" in index
