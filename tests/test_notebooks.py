"""Every notebook: its parameters cell against the parameter model, and a real papermill execution."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from k3lib.core.layering import parse_set
from k3lib.core.params import load_params
from k3lib.renewal.params import is_review_file, load_review_params
from k3lib.core.session import NOTEBOOK_PARAMETERS
from k3lib.core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))
IDS = [str(p.relative_to(ROOT / "notebooks")) for p in NOTEBOOKS]


def _parameters_cell(path: Path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    return nb, cells[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_parameters_cell_matches_the_parameter_model(path):
    info = pm.inspect_notebook(str(path))
    assert tuple(info) == NOTEBOOK_PARAMETERS
    nb, cell = _parameters_cell(path)
    values = {}
    for stmt in ast.parse(cell.source).body:
        assert isinstance(stmt, ast.Assign), f"{path.name}: the parameters cell holds assignments only"
        values[stmt.targets[0].id] = ast.literal_eval(stmt.value)  # literals only: raises otherwise
    params_path = ROOT / values["params_file"]
    if is_review_file(params_path):  # a renewal notebook: the review's own parameter model
        assert load_review_params([params_path], [*values["overrides"]]) is not None
    else:
        assert load_params([params_path], [*values["overrides"]]).target is not None
    for expr in values["overrides"]:
        parse_set(expr)
    assert values["interactive"] is False and values["run_dir"] == ""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebooks_are_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_code_cell_after_parameters_calls_k3lib(path):
    nb, pcell = _parameters_cell(path)
    code = [c for c in nb.cells if c.cell_type == "code" and c is not pcell]
    assert code
    assert "k3lib." in code[0].source
    for cell in code:
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            assert not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.For, ast.While, ast.With, ast.Try)), \
                f"notebooks stay thin, logic belongs in k3lib: {cell.source!r}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                assert [a.name for a in node.names] == ["k3lib"], cell.source
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        assert 1 <= len(calls) <= 2, f"one k3lib call per cell: {cell.source!r}"


def test_probe_notebook_alone_under_papermill_against_the_emulator(tmp_path, emulator):
    """Plain papermill, the way a user runs one notebook: evidence lands in the given run folder."""
    run = tmp_path / "run"
    out = tmp_path / "probe.ipynb"
    pm.execute_notebook(
        str(ROOT / "notebooks/00_probe.ipynb"), str(out), kernel_name="python3", progress_bar=False, cwd=str(ROOT),
        parameters={"params_file": "parameters/emulator.yaml", "run_dir": str(run),
                    "overrides": [f"target.base_url={emulator.url}"]})
    record = json.loads((run / "evidence/probe.json").read_text())
    assert record["axis"] == "probe" and record["status"] == "pass", record["findings"]
    assert {f["rule"] for f in record["findings"]} >= {"probe.health", "probe.version", "probe.models",
                                                       "probe.metrics", "probe.context_limit"}
    assert record["data"]["model"]
    assert RunStore(run).verify() == []
    assert (run / "params.json").exists()
    # the record's view, registered as a display formatter when the session opened (the record has no _repr_html_)
    shown = [o["data"]["text/html"] for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"
             for o in c.get("outputs", ()) if o.get("output_type") == "execute_result" and "text/html" in o["data"]]
    assert any("Evidence: <code>evidence/probe.json</code>" in "".join(h) for h in shown), shown
