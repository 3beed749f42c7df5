"""The batch layer both batches stand on: one run-folder opening, one record stamp, one demo adoption, one plan
list for the batch and the re-rendered report, and no import running back up from the report to a batch."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from k3lib.core.errors import BadInputError
from k3lib.core.evidence import EvidenceRecord
from k3lib.core.plan import ACCEPTANCE, ACCEPTANCE_SUMMARY, REVIEW, REVIEW_SUMMARY, acceptance_plan, review_plan
from k3lib.core.session import open_run_folder, write_record
from k3lib.core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
K3LIB = ROOT / "k3lib"


def test_a_folder_that_is_not_a_run_is_refused_an_empty_one_becomes_one(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(BadInputError) as ei:
        open_run_folder(other)
    assert "not a k3kit run folder" in ei.value.one_line() and str(other) in ei.value.one_line()
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]  # nothing written into it
    store = open_run_folder(tmp_path / "new")
    assert store.path("manifest.json").is_file()
    store.write_json("params.json", {"x": 1})
    again = open_run_folder(str(tmp_path / "new"))  # a run folder is reopened, not recreated
    assert again.root == store.root and again.read_json("params.json") == {"x": 1}


def test_a_record_is_stamped_once_and_keeps_what_it_already_says(tmp_path):
    store = RunStore.create_at(tmp_path / "run")
    rec = EvidenceRecord(axis="probe", title="probe", status="pass", summary="ok")
    t0 = time.monotonic()
    stamped = write_record(store, rec, started_at="2026-12-01T09:00:00Z", t0=t0, target="http://127.0.0.1:9/v1")
    assert stamped.started_at == "2026-12-01T09:00:00Z" and stamped.finished_at and stamped.duration_s >= 0
    assert stamped.target == "http://127.0.0.1:9/v1"
    assert store.read_json("evidence/probe.json")["target"] == "http://127.0.0.1:9/v1"
    assert store.verify() == []
    own = rec.model_copy(update={"target": "history.prom", "started_at": "2026-11-01T00:00:00Z"})
    kept = write_record(store, own, started_at="2026-12-01T09:00:00Z", t0=t0, target="http://127.0.0.1:9/v1")
    assert kept.target == "history.prom" and kept.started_at == "2026-11-01T00:00:00Z"


def test_both_sessions_write_their_record_through_the_same_stamp():
    """AxisContext.record and ReviewContext.record are one implementation, not two copies."""
    for rel in ("core/session.py", "renewal/notebook.py"):
        tree = ast.parse((K3LIB / rel).read_text())
        record = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "record")
        calls = {n.func.id for n in ast.walk(record) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert "write_record" in calls, rel
        assert not any(isinstance(n, ast.Attribute) and n.attr == "model_copy" for n in ast.walk(record)), rel


def test_demo_inputs_are_generated_into_the_run_and_hashed(tmp_path):
    from k3lib.batch.renewal import DEMO_PARAMS
    from k3lib.renewal.params import load_review_params
    from k3lib.renewal.notebook import with_demo_inputs

    params = load_review_params([str(DEMO_PARAMS)], ["review.demo=steady", "review.inputs=null",
                                                     "review.series=null"])
    store = RunStore.create_at(tmp_path / "run")
    ready = with_demo_inputs(params, store)
    inputs = sorted(p.name for p in store.path("inputs").iterdir())
    assert inputs and all(f"inputs/{name}" in store.manifest()["files"] for name in inputs)
    assert ready.review.inputs is not None and Path(ready.review.series.history_file).parent == store.path("inputs")
    assert with_demo_inputs(ready, store) is ready  # inputs named: nothing generated again
    assert store.verify() == []


def test_the_report_re_renders_from_the_same_plans_the_batches_run():
    assert acceptance_plan().notebooks == [nb for nb, _ in ACCEPTANCE] + [ACCEPTANCE_SUMMARY]
    assert review_plan().notebooks == [nb for nb, _ in REVIEW] + [REVIEW_SUMMARY]
    assert review_plan().axes == dict(REVIEW) and acceptance_plan().kind == "acceptance"


def _imports(rel: str) -> set[str]:
    """Every k3lib module a file imports, function-local imports included (relative names resolved)."""
    path = K3LIB / rel
    package = ["k3lib", *Path(rel).parent.parts]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            out |= {name} | {f"{name}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


@pytest.mark.parametrize("rel", ["report/pages.py", "core/plan.py", "core/session.py", "renewal/notebook.py"])
def test_nothing_below_the_batches_imports_them(rel):
    """The report, the plans and the sessions sit under both batches: none imports a batch, even inside a function
    (batch.renewal ↔ report ↔ runner was a cycle)."""
    above = {"k3lib.batch.acceptance", "k3lib.batch.renewal", "k3lib.batch.execute", "k3lib.cli.main"}
    assert not _imports(rel) & above, rel


# the command line's adapters, the emulator's own server command, and the batch's progress lines (to their stream)
MAY_PRINT = {"cli", "emulator", "batch/progress.py"}


def test_library_modules_return_values_and_leave_printing_and_argparse_to_the_cli():
    offenders = []
    for path in sorted(K3LIB.rglob("*.py")):
        rel = path.relative_to(K3LIB).as_posix()
        if rel in MAY_PRINT or rel.split("/")[0] in MAY_PRINT:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{rel}:{node.lineno} print")
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{rel}:{node.lineno} imports argparse" for n in names if n == "argparse"]
    assert offenders == []
