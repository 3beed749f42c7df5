"""Typed renewal evidence: each axis' result is a frozen model validated when its record is written and when it is
read back; the JSON Schemas in schemas/renewal/ are the models'; another kit version's record is refused."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import k3lib.renewal as renewal
from k3lib.opening import review
from k3lib.core.errors import ArtifactError
from k3lib.renewal.decision import AXES
from k3lib.renewal.results import RESULTS, SCHEMA_DIR, read_record_data, record_data, schema_id, schemas, typed
from k3lib.core.session import read_records

ROOT = Path(__file__).resolve().parents[1]
DEMO = "parameters/renewal-demo.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    ctx = review.open_review("load", DEMO, [], str(tmp_path_factory.mktemp("run") / "r"))
    axes = ctx.axes()
    for axis in AXES:
        ctx.axis = axis
        review.record_axis(ctx, axes[axis])
    return ctx, axes


def test_the_schemas_in_the_repository_are_the_models():
    assert SCHEMA_DIR == ROOT / "schemas" / "renewal"
    for axis, schema in schemas().items():
        stored = json.loads((SCHEMA_DIR / f"{axis}.schema.json").read_text(encoding="utf-8"))
        assert stored == schema, f"schemas/renewal/{axis}.schema.json is stale: run k3 schemas"
    assert set(RESULTS) == set(AXES)


def test_records_hold_typed_results_that_meet_their_schema(run):
    ctx, axes = run
    records = read_records(ctx.store)
    for axis in AXES:
        data = records[axis].data
        assert data["schema"] == schema_id(axis)
        jsonschema.validate(data["result"], json.loads((SCHEMA_DIR / f"{axis}.schema.json").read_text()))
        back = read_record_data(axis, data, f"evidence/{axis}.json")
        assert back == typed(axis, axes[axis]) and back.model_config["frozen"]


@pytest.mark.parametrize("axis, tamper, needle", [
    pytest.param("cost", lambda d: {"result": d["result"]}, "written by another kit version (result schema none",
                 id="record-of-an-older-kit"),
    pytest.param("load", lambda d: {**d, "schema": "k3kit/renewal/load/1"}, "result schema k3kit/renewal/load/1",
                 id="older-schema-id"),
    pytest.param("production", lambda d: {**d, "result": {k: v for k, v in d["result"].items() if k != "losses"}},
                 "losses: Field required", id="a-field-missing"),
    pytest.param("comparison", lambda d: {**d, "result": {**d["result"], "api_equal": True}},
                 "api_equal: Extra inputs are not permitted", id="a-guessed-key"),
])
def test_a_record_that_does_not_fit_is_refused_with_one_line(run, tmp_path, axis, tamper, needle):
    ctx, _ = run
    records = read_records(ctx.store)
    bad = records[axis].model_copy(update={"data": tamper(records[axis].data)})
    with pytest.raises(ArtifactError) as ei:
        renewal.decide_review(ctx.params, ctx.store, {**records, axis: bad})
    line = ei.value.one_line()
    assert f"evidence/{axis}.json" in line and needle in line, line
    assert "\n" not in line


def test_an_analysis_that_breaks_its_model_is_refused_when_written():
    with pytest.raises(ArtifactError) as ei:
        record_data("operations", {"total_h": 1.0})
    assert "not this kit's operations result" in ei.value.one_line()
