"""Typed evidence: each acceptance axis' data checked on write and on read back, its JSON Schema in schemas/, and a
record from another kit version refused in one line."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from conftest import ROOT
from k3lib.core.errors import EvidenceError
from k3lib.core.evidence import DATA_MODELS, SCHEMA_VERSION, CapacityData, EvidenceRecord, json_schemas, parse_record


def test_the_schemas_in_the_repository_are_the_ones_the_models_give():
    for name, schema in json_schemas().items():
        path = ROOT / "schemas" / name
        assert path.is_file(), f"{name} missing: run k3 schemas"
        assert json.loads(path.read_text(encoding="utf-8")) == schema, f"{name} is stale: run k3 schemas"
    assert set(DATA_MODELS) == {"capacity", "environment", "probe", "prefix_cache", "agent", "operations"}


def test_a_record_from_another_kit_version_is_refused_in_one_line():
    old = {"schema_version": 1, "axis": "capacity", "title": "x", "status": "pass",
           "data": {"saturation": {"max_ok_concurrency": 3}}}
    with pytest.raises(EvidenceError) as exc:
        parse_record(old, "evidence/capacity.json")
    message = str(exc.value)
    assert "\n" not in message and "evidence schema 1" in message and f"reads {SCHEMA_VERSION}" in message
    # a record of an earlier schema (2: extra keys let through) is refused the same way, not by a field error
    with pytest.raises(EvidenceError, match=rf"evidence schema 2, this kit reads {SCHEMA_VERSION}\): re-run the axis"):
        parse_record({**old, "schema_version": 2}, "evidence/capacity.json")
    # 3: the environment axis' rules were compat.*, which the decision table no longer names (read as-is, a failing
    # compat.* finding would fall to the table's catch-all and decide less than environment-rebuild)
    env = {"schema_version": 3, "axis": "environment", "title": "x", "status": "fail",
           "findings": [{"rule": "compat.cuda_build", "status": "fail", "message": "CUDA 11 build"}]}
    with pytest.raises(EvidenceError, match=rf"evidence schema 3, this kit reads {SCHEMA_VERSION}\): re-run the axis"):
        parse_record(env, "evidence/environment.json")
    # ... while a schema-3 record of another axis means what it meant, and is read
    probe = {"schema_version": 3, "axis": "probe", "title": "x", "status": "pass",
             "findings": [{"rule": "probe.health", "status": "pass", "message": "200"}]}
    assert parse_record(probe, "evidence/probe.json").by_rule("probe.health").status == "pass"


@pytest.mark.parametrize("axis, data", [
    pytest.param("capacity", {"traffic_cap": {"max_concurrency": "four", "basis": "x"}}, id="cap-not-a-number"),
    pytest.param("capacity", {"implied_decision": "go-live-anyway"}, id="unknown-decision"),
    pytest.param("agent", {"rates": [{"level": 1, "check": "arguments_valid", "passed": "all", "total": 3}]},
                 id="rate-not-a-count"),
    pytest.param("environment", {"build": "nightly"}, id="unknown-build"),
    pytest.param("capacity", {"saturation": {"max_ok_concurrency": 3}}, id="undeclared-key"),
    pytest.param("capacity", {"steps": [{"concurrency": 4, "max_ok": True}]}, id="undeclared-step-key"),
    pytest.param("operations", {"drill": {"command": "true"}}, id="drill-without-its-outcome"),
])
def test_mistyped_data_is_refused_when_written_and_when_read_back(axis, data):
    with pytest.raises(ValidationError):
        EvidenceRecord(axis=axis, title=axis, status="pass", data=data)
    with pytest.raises(EvidenceError, match=f"evidence/{axis}.json: not an evidence record"):
        parse_record({"axis": axis, "title": axis, "status": "pass", "data": data}, f"evidence/{axis}.json")


def test_typed_data_is_frozen_and_read_by_field():
    rec = EvidenceRecord(axis="capacity", title="c", status="pass",
                         data={"traffic_cap": {"max_concurrency": 4, "saturation_point": 5, "basis": "b"},
                               "steps": [{"concurrency": 4}]})
    typed = rec.typed()
    assert isinstance(typed, CapacityData) and typed.traffic_cap.max_concurrency == 4
    with pytest.raises(ValidationError):
        typed.traffic_cap.max_concurrency = 9


def test_typed_data_is_validated_once_per_data_and_again_for_new_data():
    rec = EvidenceRecord(axis="capacity", title="c", status="pass", data={"saturation_point": 5})
    assert rec.typed() is rec.typed(), "the record's data is validated once, not on every read"
    copied = rec.model_copy(update={"data": {"saturation_point": 7}})
    assert copied.typed().saturation_point == 7 and rec.typed().saturation_point == 5
    rec.data = {"saturation_point": 9}
    assert rec.typed().saturation_point == 9
    assert parse_record(rec.model_dump(mode="json"), "x.json") == rec


def test_the_prefix_pairs_model_declares_what_the_axis_writes_and_the_report_reads_it_typed(tmp_path):
    from k3lib.core.evidence import PrefixCacheData, PrefixPair
    from k3lib.axes.prefix_cache import prefix_cache_record
    from test_prefix_cache_verdict import result

    rec = prefix_cache_record(result())
    typed = rec.typed()
    assert isinstance(typed, PrefixCacheData) and typed.pairs and isinstance(typed.pairs[0], PrefixPair)
    assert set(rec.data["pairs"][0]) == set(PrefixPair.model_fields), "the axis' pair keys and the model's fields"
    assert (typed.pairs[0].cold_ttft_ms, typed.pairs[0].warm_ttft_ms) == (15.0, 5.0)


@pytest.mark.parametrize("module", ["report/pages", "verdict/sheet", "golive/alerts", "golive/rollback", "golive/kit",
                                    "verdict/baseline", "verdict/accepted", "verdict/decision", "report/history",
                                    "verdict/assemble"])
def test_the_readers_of_axis_evidence_read_typed_fields_never_raw_data_keys(module):
    """`rec.typed()` gives the axis' model (declared fields only, checked by mypy); a raw `data.get("…")` or
    `data["…"]` would read a key no model declares and find nothing, silently."""
    import re

    source = (ROOT / "k3lib" / f"{module}.py").read_text(encoding="utf-8")
    assert not re.findall(r"\.data(?:\.get\(|\[)", source), f"k3lib/{module}.py reads an axis record's raw data"
