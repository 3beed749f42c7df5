"""The operations axis against the emulator: the rollback drill must show the previous release served, a no-op
command leaves C16 open and the decision short of production."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT
from k3lib.verdict.decision import decide
from k3lib.emulator import EmulatorConfig, start_emulator
from k3lib.core.evidence import OperationsData, parse_record
from k3lib.axes.operations import operations_record, run_operations
from k3lib.opening.axis import open_axis
from k3lib.verdict.sheet import ITEMS, item_status, sheet_rows

C16 = next(i for i in ITEMS if i.id == "C16")


@pytest.fixture(scope="module")
def emulator_url():
    handle = start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05), host="127.0.0.1", port=0)
    try:
        yield handle.url
    finally:
        handle.stop()


def _operations(tmp_path, url, *overrides):
    ctx = open_axis("operations", str(ROOT / "parameters" / "emulator.yaml"),
                    [f"target.base_url={url}", *overrides], str(tmp_path / "run"))
    return ctx.record(operations_record(run_operations(ctx), ctx))


def test_the_demo_drill_rolls_back_to_the_previous_release_and_forward_again(tmp_path, emulator_url):
    record = _operations(tmp_path, emulator_url)
    status, found = item_status(C16, {"operations": record})
    assert status == "pass", [f.message for f in found]
    data = parse_record(json.loads((tmp_path / "run" / "evidence" / "operations.json").read_text()),
                        "evidence/operations.json").typed()
    assert isinstance(data, OperationsData) and data.drill is not None and data.drill.forward is not None
    drill = data.drill
    assert drill.before.vllm_version == "0.33.0" and drill.after.vllm_version == "0.32.1"
    assert drill.before.digest != drill.after.digest
    assert drill.forward.served.vllm_version == "0.33.0"


def test_a_no_op_drill_leaves_c16_open_and_the_decision_is_not_production(tmp_path, emulator_url):
    record = _operations(tmp_path, emulator_url, 'axes.operations.rollback_drill=["true"]',
                         "axes.operations.rollback_to=null", "axes.operations.roll_forward=null")
    status, found = item_status(C16, {"operations": record})
    assert status == "open" and "changed nothing" in found[0].message
    rows = sheet_rows({"operations": record})
    decision = decide({"operations": record}, ["operations"], checklist=[r for r in rows if r["id"] in ("C15", "C16")])
    assert decision.decision != "production"
    assert any("C16" in r and "still open" in r for r in decision.reasons)
