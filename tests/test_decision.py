"""Decision rules: strongest first, missing evidence never a pass."""

from __future__ import annotations

import datetime as dt

import pytest

from k3lib.decision import EXIT_CODES, decide
from k3lib.evidence import EvidenceRecord, Finding, axis_status


def rec(axis: str, *statuses: str, error: str | None = None) -> EvidenceRecord:
    findings = [Finding(rule=f"{axis}.r{i}", status=s, message=f"{axis} finding {i} is {s}")
                for i, s in enumerate(statuses)]
    return EvidenceRecord(axis=axis, title=axis, status=axis_status(findings), findings=findings, error=error)


CASES = [
    pytest.param({"probe": rec("probe", "pass", "pass")}, ["probe"], "production", id="all-pass"),
    pytest.param({}, ["probe"], "limited-observation", id="missing-evidence"),
    pytest.param({"probe": rec("probe", "pass", "fail")}, ["probe"], "environment-rebuild", id="probe-fails"),
    pytest.param({"probe": rec("probe", "pass", "not-observable")}, ["probe"], "limited-observation",
                 id="not-observable-is-not-a-pass"),
    pytest.param({"probe": rec("probe", "pass"), "other": rec("other", "fail")}, ["probe", "other"],
                 "limited-observation", id="unknown-axis-fail-is-non-critical"),
    pytest.param({"probe": rec("probe", "fail"), "x": rec("x", "fail")}, ["probe", "x"],
                 "environment-rebuild", id="strongest-wins"),
]


@pytest.mark.parametrize("records, planned, expected", CASES)
def test_decide(records, planned, expected):
    d = decide(records, planned, today=dt.date(2026, 11, 30))
    assert d.decision == expected
    assert d.exit_code == EXIT_CODES[expected]
    assert [i["id"] for i in d.checklist] == planned
    assert d.reasons
    if expected == "limited-observation":
        assert d.reexamine_on == "2026-12-14"
        assert d.traffic_cap is not None
    else:
        assert d.reexamine_on is None


def test_decision_json_shape():
    d = decide({"probe": rec("probe", "pass")}, ["probe"]).to_dict()
    assert set(d) == {"decision", "reasons", "checklist", "traffic_cap", "reexamine_on", "build"}
    assert set(d["checklist"][0]) >= {"id", "title", "status", "evidence"}
    assert d["build"] == "official"
