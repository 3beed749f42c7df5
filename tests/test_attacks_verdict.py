"""Attacks on the verdict, each of which once signed `production`: every one must now end elsewhere, with a reason
that names it (issue 30). The healthy emulator run (`healthy_run`, a real `k3 validate`) gives the records; the
attack changes what a user can change — a parameter, a recipe, decision.json — and the kit must say so."""

from __future__ import annotations

import datetime as dt

import pytest

from conftest import ROOT

from k3lib.core.attested import parse_attestation
from k3lib.cli.main import main
from k3lib.verdict.decision import decide
from k3lib.core.errors import BadInputError, EvidenceError
from k3lib.core.evidence import EvidenceRecord, Finding, OperationsData, axis_status, read_records
from k3lib.core.params import load_params, load_params_json
from k3lib.report.index import decision_block
from k3lib.verdict.sheet import ITEMS, item_status, sheet_rows
from k3lib.report.signing import sign_run, verify_run
from k3lib.verdict.assemble import compute_decision
from k3lib.core.thresholds import BY_PATH, THRESHOLDS, loosened

EMULATOR = str(ROOT / "parameters" / "emulator.yaml")


def _records(healthy_run):
    code, store = healthy_run
    assert code == 0, "the healthy emulator run is production: the attacks below start from it"
    return store, load_params_json(store.path("params.json")), read_records(store)


# -- 2. `info` never proves a sheet item ---------------------------------------------------------------------------


def test_attack_a_recipe_with_no_requirement_leaves_the_cuda_and_driver_items_open():
    """The recipe sets no CUDA major and no driver branch: the findings say so as `info`; C02 and C03 stay open."""
    findings = [Finding(rule="environment.cuda_build", status="info",
                        message="CUDA 12 build; the recipe sets no CUDA major"),
                Finding(rule="environment.driver_branch", status="info",
                        message="host driver 570.86 (R570); the recipe sets no branch")]
    env = EvidenceRecord(axis="environment", title="env", status=axis_status(findings), findings=findings)
    assert env.status == "pass"  # the axis alone would let it through
    rows = {r["id"]: r for r in sheet_rows({"environment": env})}
    assert rows["C02"]["status"] == "open" and rows["C03"]["status"] == "open"
    assert "proves nothing" in rows["C02"]["observed"]
    d = decide({"environment": env}, ["environment"], checklist=[rows["C02"], rows["C03"]])
    assert d.decision == "limited-observation"
    assert any(r.startswith("limited-observation: C02") and "nothing compared" in r for r in d.reasons)


def test_an_info_finding_beside_passing_ones_still_leaves_the_item_open():
    item = next(i for i in ITEMS if i.id == "C05")
    findings = [Finding(rule="environment.startup", status="pass", message="clean start"),
                Finding(rule="environment.flags", status="info", message="the recipe requires no server flag")]
    env = EvidenceRecord(axis="environment", title="env", status="pass", findings=findings)
    assert item_status(item, {"environment": env})[0] == "open"
    findings[1] = Finding(rule="environment.flags", status="pass", message="the required flags are set")
    env = EvidenceRecord(axis="environment", title="env", status="pass", findings=findings)
    assert item_status(item, {"environment": env})[0] == "pass"


@pytest.mark.parametrize("override, field", [
    ("recipe.cuda_major=null", "recipe.cuda_major"),
    ("recipe.cuda_major=12", "recipe.cuda_major"),
    ("recipe.driver_branch_min=null", "recipe.driver_branch_min"),
    ("recipe.driver_branch_min=570", "recipe.driver_branch_min"),
    ("recipe.vllm_min=0.20.0", "recipe.vllm_min"),
    ("recipe.required_flags=[]", "recipe.required_flags"),
    ("recipe.prefix_caching=false", "recipe.prefix_caching"),
    ("recipe.driver_branches_compatible=[570]", "recipe.driver_branches_compatible"),
])
def test_attack_the_kimi_k3_recipe_cannot_silently_lose_a_requirement(override, field, capsys):
    with pytest.raises(BadInputError) as err:
        load_params([EMULATOR], [override])
    assert err.value.field == field and "kimi-k3 recipe requires" in str(err.value)
    assert main(["validate", "-p", EMULATOR, "--set", override]) == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1 and field in line and "Traceback" not in line


def test_the_kimi_k3_recipe_may_be_tightened():
    params = load_params([EMULATOR], ["recipe.vllm_min=0.29.0", "recipe.driver_branch_min=590"])
    assert params.recipe.vllm_min == "0.29.0" and params.recipe.driver_branch_min == 590


# -- 4. thresholds: bounds from the seeds, looser than the default listed and attested -----------------------------


@pytest.mark.parametrize("override, field", [
    ("axes.agent.min_pass_rate=0", "axes.agent.min_pass_rate"),
    ("axes.capacity.waiting_tolerance=50", "axes.capacity.waiting_tolerance"),
    ("axes.capacity.memory_growth_min_mib=100000", "axes.capacity.memory_growth_min_mib"),
    ("axes.capacity.calibration_max_error_ms=5000", "axes.capacity.calibration_max_error_ms"),
    ("axes.prefix_cache.min_ttft_gain_pct=0.1", "axes.prefix_cache.min_ttft_gain_pct"),
])
def test_attack_a_threshold_outside_the_seeds_bounds_is_refused(override, field):
    with pytest.raises(BadInputError) as err:
        load_params([EMULATOR], [override])
    assert err.value.field == field and "outside the bounds" in str(err.value)
    assert err.value.source == f"--set {field}"


def test_every_threshold_has_bounds_that_hold_its_default():
    from k3lib.core.params import default_tree

    tree = default_tree()
    assert loosened(tree, tree) == []  # the defaults are looser than nothing
    for t in THRESHOLDS:
        node = tree
        for key in t.path.split("."):
            node = node[key]
        assert t.in_bounds(node), t.path
        assert t.basis.startswith("seed"), t.path


@pytest.mark.parametrize("override, path", [
    ("axes.agent.min_pass_rate=0.95", "axes.agent.min_pass_rate"),
    ("axes.capacity.waiting_tolerance=1.5", "axes.capacity.waiting_tolerance"),
    ("axes.capacity.memory_growth_min_mib=4096", "axes.capacity.memory_growth_min_mib"),
    ("axes.capacity.soak_duration_s=2", "axes.capacity.soak_duration_s"),
    ("axes.capacity.calibrate=false", "axes.capacity.calibrate"),
])
def test_attack_a_moved_threshold_forbids_production_and_is_named(healthy_run, override, path):
    """The healthy run's own records, judged with one threshold moved: not production, and the reason names it."""
    _, params, records = _records(healthy_run)
    assert compute_decision(params, records).decision == "production"
    moved = load_params([], [override], base=params.public_dict())
    d = compute_decision(moved, records)
    assert d.decision == "limited-observation"
    assert any(path in r and "no attestation names who accepted it" in r for r in d.reasons)
    assert [t["path"] for t in d.model_dump()["loosened_thresholds"] if not t["accepted_by"]] == [path]
    row = next(r for r in sheet_rows(records, moved.public_dict()) if r["id"] == next(
        i.id for i in ITEMS if i.axis == BY_PATH[path].axis))
    assert "loosened: " in row["configuration"] and f"{path} = " in row["configuration"]
    index = decision_block(d.model_dump())
    assert "Thresholds looser than the defaults" in index and path in index and "forbids production" in index


def test_an_attested_threshold_is_listed_with_who_accepted_it_and_why(healthy_run):
    """The demo's attestation accepts its demo-sized thresholds by name and value: production, each one listed."""
    _, params, records = _records(healthy_run)
    d = compute_decision(params, records)
    listed = d.model_dump()["loosened_thresholds"]
    assert listed and all(t["accepted_by"].startswith("k3kit demo operator") and t["why"] for t in listed)
    assert {t["path"] for t in listed} >= {"axes.capacity.soak_duration_s", "axes.capacity.calibration_max_error_ms"}
    (said,) = [r for r in d.reasons if r.startswith("loosened threshold(s), accepted by k3kit demo operator")]
    assert all(f"{t['path']} = " in said for t in listed)


def test_an_attestation_of_another_value_does_not_accept_the_threshold(healthy_run):
    _, params, records = _records(healthy_run)
    att = records["operations"].typed().attestation
    data = att.model_dump(mode="json")
    data["items"]["thresholds_accepted"] = [{"path": "axes.capacity.soak_duration_s", "value": 10, "why": "short"}]
    ops = records["operations"].model_copy(update={"data": OperationsData(
        attestation=parse_attestation(data, "att.yaml")).model_dump(mode="json")})
    d = compute_decision(params, {**records, "operations": ops})
    assert d.decision == "limited-observation"
    assert any("axes.capacity.soak_duration_s = 3" in r and "no attestation" in r for r in d.reasons)


def test_an_attestation_naming_an_unknown_threshold_is_bad_input():
    data = {"who": "Camille Durand, SRE", "when": "2026-11-28", "how": "review of the demo sizes",
            "link": "OPS-1", "items": {"thresholds_accepted": [{"path": "axes.capacity.nope", "value": 1,
                                                                "why": "x y"}]}}
    with pytest.raises(BadInputError, match="not a judgement threshold"):
        parse_attestation(data, "att.yaml")


# -- 5. `k3 verify` and `k3 sign` decide again from the evidence ---------------------------------------------------


def _copy_run(healthy_run, tmp_path):
    import shutil

    from k3lib.core.store import RunStore

    _, store = healthy_run
    dest = tmp_path / store.root.name
    shutil.copytree(store.root, dest)
    return RunStore.open(dest)


def test_attack_an_edited_decision_with_its_manifest_rewritten_fails_verify_and_sign(healthy_run, tmp_path):
    store = _copy_run(healthy_run, tmp_path)
    assert verify_run(store.root).ok
    decision = store.read_json("decision.json")
    # the attack: a run that was not production, made production through the kit's own store (manifest rewritten)
    capacity = store.read_json("evidence/capacity.json")
    capacity["findings"].append(Finding(rule="capacity.saturation", status="fail",
                                        message="the step at 4 did not hold").model_dump(mode="json"))
    capacity["status"] = "fail"
    store.write_json("evidence/capacity.json", capacity)
    assert not verify_run(store.root).ok  # decision.json (production) no longer follows from the evidence
    store.write_json("decision.json", {**decision, "decision": "production"})
    result = verify_run(store.root)
    assert not result.ok and result.exit_code == 1
    assert any(line.startswith('decision.json: decision is "production" but the evidence gives "capacity-extension"')
               for line in result.changed)
    with pytest.raises(EvidenceError, match="refusing to sign a decision its evidence does not give"):
        sign_run(store.root, "Alice Martin")


def test_an_edited_reason_alone_fails_verify(healthy_run, tmp_path):
    store = _copy_run(healthy_run, tmp_path)
    decision = store.read_json("decision.json")
    store.write_json("decision.json", {**decision, "reasons": ["every planned axis and every checklist item passed"]})
    result = verify_run(store.root)
    assert not result.ok and any(line.startswith("decision.json: reasons differs") for line in result.changed)


def test_a_run_decided_with_the_same_evidence_verifies_and_signs(healthy_run, tmp_path):
    """The healthy demo verifies; being a demo (its target the kit's emulator, issue 43), it signs only as one."""
    store = _copy_run(healthy_run, tmp_path)
    assert verify_run(store.root).ok
    with pytest.raises(BadInputError, match="is a demo: its target is the kit's emulator"):
        sign_run(store.root, "Alice Martin", now=dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc))
    record = sign_run(store.root, "Alice Martin", now=dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc), demo=True)
    assert record.decision == "production" and record.demo and verify_run(store.root).ok
