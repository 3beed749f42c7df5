"""The review session helper, evidence records, the decision from records, the notebooks' calls and the batch."""

from __future__ import annotations

import ast
import html
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import k3lib.renewal as renewal
from k3lib.opening import review
from k3lib.core.errors import BadInputError
from k3lib.cli.run import review_main
from k3lib.batch.renewal import REVIEW, REVIEW_SUMMARY
from k3lib.renewal.demo import PREVIOUS_VERSION
from k3lib.renewal.decision import AXES
from k3lib.core.session import read_records
from k3lib.core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
DEMO = "parameters/renewal-demo.yaml"


@pytest.mark.parametrize("module", [renewal, review], ids=["renewal", "review"])
def test_all_is_sorted_and_complete(module):
    assert module.__all__ == sorted(module.__all__)
    assert all(hasattr(module, n) for n in module.__all__)


@pytest.mark.parametrize("nb", [nb for nb, _ in REVIEW] + [REVIEW_SUMMARY])
def test_notebook_calls_exist(nb):
    """Every `k3lib.review.X` a review notebook calls is exported; the axis it opens is the batch's axis."""
    book = nbformat.read(ROOT / "notebooks" / nb, as_version=4)
    called = set()
    for cell in book.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and getattr(node.value.value, "id", None) == "k3lib" and node.value.attr == "review":
                called.add(node.attr)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "open_review":
                assert node.args[0].value == dict(REVIEW)[nb]
    assert called and called <= set(review.__all__)
    assert DEMO in book.cells[1].source or any(DEMO in c.source for c in book.cells)


@pytest.fixture(scope="module")
def steady_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    ctx = review.open_review("load", DEMO, [], str(run / "r"))
    return ctx


def test_open_review_materialises_the_demo_into_the_run(steady_run):
    ctx = steady_run
    assert ctx.params.review.demo == "steady" and ctx.params.review.inputs is not None
    assert Path(ctx.params.review.inputs.tasks).parent == ctx.store.path("inputs")
    assert ctx.params.review.rules.max_ops_hours_per_week == 20  # the rules written in the file are kept
    assert ctx.params.run.label == "renewal-demo"
    saved = json.loads(ctx.store.path("params.json").read_text())
    assert saved["review"]["inputs"]["tasks"] == ctx.params.review.inputs.tasks
    assert ctx.store.verify() == [] and "inputs/history.om" in ctx.store.manifest()["files"]
    # params.json reopens the same run without regenerating
    again = review.open_review("cost", str(ctx.store.path("params.json")), [], str(ctx.store.root))
    assert again.params.review.inputs == ctx.params.review.inputs


def test_the_run_reads_back_what_its_entry_point_resolved(steady_run):
    """What the batch runs after the review's entry point (the axes before the notebooks, the decision when the
    summary took none) reads the run's params.json as each notebook does: the very parameters `resolve_run`
    resolved; opening the run again regenerates nothing and leaves params.json as written."""
    from k3lib.renewal.review import inputs_sha256, resolve_run, run_params

    ctx = steady_run
    read = run_params(ctx.store)
    assert read == ctx.params and inputs_sha256(read) == inputs_sha256(ctx.params)
    before = ctx.store.path("params.json").read_bytes()
    assert resolve_run(read, ctx.store) == read
    assert ctx.store.path("params.json").read_bytes() == before


def test_records_then_decision_from_records_only(steady_run):
    ctx = steady_run
    axes = ctx.axes()
    for axis in AXES:
        ctx.axis = axis
        rec = review.record_axis(ctx, axes[axis])
        assert rec.findings and rec.status in ("pass", "warn", "fail")
    records = read_records(ctx.store)
    assert set(records) == set(AXES)
    decision = renewal.decide_review(ctx.params, ctx.store, records)
    assert decision.decision == "renew"
    direct = renewal.decide_from_axes(ctx.params, axes)
    assert decision.reasons == direct.reasons
    saved = json.loads(ctx.store.path("decision.json").read_text())
    assert saved["decision"] == "renew" and saved["condition"] and "routing" not in saved
    assert ctx.store.verify() == []


def test_a_failed_axis_counts_as_no_evidence(steady_run):
    ctx = steady_run
    from k3lib.core.evidence import EvidenceRecord

    ctx.store.write_json("evidence/stability.json", EvidenceRecord(
        axis="stability", title="x", status="fail", error="cell 3: boom").model_dump(mode="json"))
    decision = renewal.decide_review(ctx.params, ctx.store, read_records(ctx.store))
    assert decision.decision != "renew"
    assert any("no evidence for: stability" in r for r in decision.reasons)


@pytest.mark.parametrize("files, sets, demo, needle", [
    pytest.param([], [], "bursty", "unknown demo scenario", id="unknown-scenario"),
    pytest.param([], [], None, "no parameters file", id="nothing-given"),
    pytest.param([DEMO], ["review.rules.min_acceptance_rate=2"], None, "review.rules.min_acceptance_rate",
                 id="bad-rule"),
    pytest.param(["parameters/nope.yaml"], [], None, "file not found", id="missing-file"),
])
def test_review_main_bad_input(files, sets, demo, needle, tmp_path):
    with pytest.raises(BadInputError) as ei:
        review_main([str(ROOT / f) for f in files], sets, str(tmp_path), demo)
    assert needle in ei.value.one_line()


def test_the_kernel_sees_renewal():
    """The notebooks call k3lib.renewal after `import k3lib`."""
    code = "import k3lib, sys; sys.exit(0 if hasattr(k3lib, 'renewal') else 1)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


@pytest.mark.slow
def test_review_batch_on_a_demo(tmp_path, capsys):
    rc = review_main([], ["review.rules.min_sample_tasks=20"], str(tmp_path), "idle-heavy")
    out = capsys.readouterr().out
    assert rc == 3 and "decision: reduce" in out and "condition: restore the previous capacity" in out
    # a rule loosened toward renew is in the terminal output: the reasons and the condition name it
    assert ("decided on loosened rules or scopes (set past the reference review's toward renew, or other than it): "
            "rules.min_sample_tasks 20 (built-in 30") in out
    assert "rules.min_sample_tasks 20 (built-in 30), not accepted" in out  # the condition names it too
    run = Path(out.strip().splitlines()[-1].removeprefix("run: "))
    store = RunStore.open(run)
    assert store.verify() == []
    assert (run / "report" / "index.html").exists() and (run / "report" / "19_renewal.html").exists()
    records = read_records(store)
    assert set(records) >= set(AXES) and all(not r.error for r in records.values())
    drill = records["stability"].data["result"]["drill"]
    # a demo's deployment is the embedded emulator its series describe: its drill answers for it (issue 44: a real
    # review without a deployment URL is not drilled at all — tests/test_attacks_renewal_premises.py)
    assert drill["summary"] == "5/5 questions answered yes"
    assert drill["deployment"]["is_deployment"] is True and drill["in_flight_at_kill"] is True
    assert {a["answer"] for a in drill["answers"].values()} == {"yes"}
    # the demo's restore is a rollback: the previous release is served again, shown from GET /version
    assert drill["versions"] == {"before": "0.33.0", "after_restore": PREVIOUS_VERSION,
                                 "expected_previous": PREVIOUS_VERSION}
    assert "rule: reduce.idle-or-irregular" in out
    index = (run / "report" / "index.html").read_text()
    assert "rule: reduce.idle-or-irregular" in index and "from built-in default" not in index
    # every fixed element and threshold from the demo file; the report names kit files, not machine paths
    assert "27 from <kit>/parameters/renewal-demo.yaml, 1 from --set" in html.unescape(index)
    assert "loosened toward renew: rules.min_sample_tasks 20 (built-in 30)" in html.unescape(index)
    # the summary notebook shows the decision through the view registered when its session opened
    page = (run / "report" / "19_renewal.html").read_text()
    assert "<b>Rule:</b> <code>reduce.idle-or-irregular</code>" in page and "Decision: " in page
    assert "rests on the task log only" in html.unescape(page)  # no live run: an open item, shown


@pytest.mark.slow
def test_a_review_with_a_bad_task_log_stops_before_any_notebook(tmp_path, capsys):
    """A bad input is one line naming it, exit 2, before a run folder or a notebook (issue 36: a bad tasks CSV used to
    run every notebook for 83 s and decide exit-to-api)."""
    from k3lib.cli.main import main
    from k3lib.renewal.demo import generate

    paths = generate("steady", tmp_path / "inputs")
    with open(paths["tasks"], "a", encoding="utf-8") as f:
        f.write("T-broken,2026-08-01\n")  # a row with too few cells: the task reader raises BadInputError
    rc = main(["review", "-p", str(paths["params"]), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and str(paths["tasks"]) in lines[0] and "cells, expected" in lines[0]
    assert "decision: " not in out and not (tmp_path / "out").exists()


@pytest.mark.parametrize("path, expected", [
    pytest.param(DEMO, True, id="review-file"),
    pytest.param("parameters/emulator.yaml", False, id="acceptance-file"),
    pytest.param("parameters/nope.yaml", False, id="missing"),
])
def test_is_review_file(path, expected):
    from k3lib.renewal.params import is_review_file

    assert is_review_file(ROOT / path) is expected


def test_the_decision_model_never_imports_its_views():
    """The data model (decision, records, results, rules, review) imports no presentation module, not even inside a
    function: the HTML view is registered as an IPython display formatter when a review session opens."""
    presentation = {"figures", "notebook", "plotting", "report", "summary", "sheet"}
    for name in ("decision", "findings", "live", "records", "results", "rules", "review", "analysis", "params"):
        tree = ast.parse((ROOT / "k3lib" / "renewal" / f"{name}.py").read_text(encoding="utf-8"))
        imported = {(node.module or "").rsplit(".", 1)[-1] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom)}
        assert not imported & presentation, (name, imported & presentation)
    assert not hasattr(renewal.RenewalDecision, "_repr_html_")


def test_a_review_session_shows_the_decision_as_html():
    """In IPython (a kernel, JupyterLab, papermill) the decision displays as HTML once a review session is open."""
    code = (
        "import tempfile\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "import k3lib.renewal as r\n"
        "from k3lib.renewal.findings import RenewalFinding\n"
        "why = RenewalFinding('decision.rule', True, {'decision': 'reduce', 'when': 'test'})\n"
        "d = r.RenewalDecision('reduce', (why,), (), 'restore the previous capacity')\n"
        "assert 'text/html' not in shell.display_formatter.format(d)[0]\n"
        f"from k3lib.opening.review import open_review_summary\n"
        f"open_review_summary({DEMO!r}, [], tempfile.mkdtemp() + '/run')\n"
        "html = shell.display_formatter.format(d)[0]['text/html']\n"
        "assert 'Decision:' in html and 'restore the previous capacity' in html and '<li>reduce: test</li>' in html\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
