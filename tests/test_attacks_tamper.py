"""Tamper-evident runs and the recipe of the served model (issue 34): evidence edited after the run — written back
through the kit's own store, its hash, decision and manifest recomputed around it — is named by `k3 verify` and
refused by `k3 sign`, because each axis is judged again from its raw data; `--resume` checks the folder against its
manifest before trusting it; the requirements of the model the target serves apply whatever the recipe is called."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import ROOT

from k3lib.cli.main import main
from k3lib.core.errors import BadInputError, EvidenceError
from k3lib.core.evidence import read_records
from k3lib.core.params import load_params, load_params_json
from k3lib.core.recipes import served_recipe, skeleton
from k3lib.core.store import RunStore
from k3lib.report.signing import sign_run, verify_run
from k3lib.verdict.assemble import compute_decision

EMULATOR = str(ROOT / "parameters" / "emulator.yaml")


def _copy(healthy_run, tmp_path) -> RunStore:
    code, store = healthy_run
    assert code == 0
    dest = tmp_path / store.root.name
    shutil.copytree(store.root, dest)
    return RunStore.open(dest)


def _redecide(store: RunStore) -> None:
    """What an attacker with the kit's store does after an edit: decide again from the records, rewrite decision.json
    (the store rewrites the manifest)."""
    params = load_params_json(store.path("params.json"))
    store.write_json("decision.json", compute_decision(params, read_records(store)).model_dump())


def _jsonl(store: RunStore, rel: str, edit) -> None:
    lines = [json.loads(line) for line in store.path(rel).read_text().splitlines()]
    store.write_text(rel, "".join(json.dumps(edit(r)) + "\n" for r in lines))


def _refused_at_c4(rec: dict) -> dict:
    if rec.get("phase") == "concurrency" and rec.get("step") == "c4":
        return {**rec, "ok": False, "http_status": 429, "error_kind": "APIError", "prompt_tokens": None,
                "completion_tokens": None}
    return rec


def _changed(store: RunStore) -> list[str]:
    result = verify_run(store.root)
    assert not result.ok and result.exit_code == 1
    return list(result.changed)


def test_attack_a_load_step_refused_by_a_gateway_while_its_findings_say_it_held(healthy_run, tmp_path):
    """The raw requests of the planned step say 429; the stored findings say every step held."""
    store = _copy(healthy_run, tmp_path)
    _jsonl(store, "evidence/capacity/requests.jsonl", _refused_at_c4)
    _redecide(store)
    assert store.verify() == [] and store.read_json("decision.json")["decision"] == "production"
    changed = _changed(store)
    assert "evidence/capacity.json: capacity.incomplete_load is pass but its raw data gives fail" in changed
    assert "evidence/capacity.json: capacity.saturation is pass but its raw data gives fail" in changed
    with pytest.raises(EvidenceError, match="capacity.incomplete_load is pass but its raw data gives fail"):
        sign_run(store.root, "Alice Martin")
    assert main(["verify", str(store.root)]) == 1


def test_attack_a_failing_finding_flipped_to_pass(healthy_run, tmp_path):
    """The raw data says the step failed; the finding is flipped back to pass, decision and manifest recomputed."""
    store = _copy(healthy_run, tmp_path)
    _jsonl(store, "evidence/capacity/requests.jsonl", _refused_at_c4)
    params = load_params_json(store.path("params.json"))
    from k3lib.axes.capacity.judge import capacity_record
    from k3lib.axes.capacity.rejudge import rejudge_capacity

    honest = capacity_record(rejudge_capacity(store, params), type("Ctx", (), {"params": params})())
    assert honest.by_rule("capacity.incomplete_load").status == "fail"  # what the run would have written
    flipped = honest.model_copy(update={"findings": [f.model_copy(update={"status": "pass"}) if f.status == "fail"
                                                     else f for f in honest.findings], "status": "pass"})
    store.write_json("evidence/capacity.json", flipped.model_dump(mode="json"))
    _redecide(store)
    assert store.verify() == []
    changed = _changed(store)
    assert any(line.startswith("evidence/capacity.json: capacity.incomplete_load is pass but its raw data gives "
                               "fail") for line in changed)


def test_attack_a_collect_env_of_a_cuda_12_build_behind_a_passing_chain(healthy_run, tmp_path):
    store = _copy(healthy_run, tmp_path)
    rel = "evidence/environment/collect_env.txt"
    store.write_text(rel, store.path(rel).read_text().replace("CUDA used to build PyTorch   : 13.0",
                                                               "CUDA used to build PyTorch   : 12.9"))
    _redecide(store)
    assert any(line.startswith("evidence/environment.json: environment.cuda_build is pass but its raw data gives fail")
               for line in _changed(store))


def test_attack_a_served_context_limit_below_the_contract_behind_a_passing_probe(healthy_run, tmp_path):
    store = _copy(healthy_run, tmp_path)
    rel = "evidence/probe/models.txt"
    store.write_text(rel, store.path(rel).read_text().replace('"max_model_len":4096', '"max_model_len":2048')
                     .replace('"max_model_len": 4096', '"max_model_len": 2048'))
    _redecide(store)
    assert "evidence/probe.json: probe.context_limit is pass but its raw data gives fail" in _changed(store)


def test_attack_an_agent_check_flipped_in_its_steps(healthy_run, tmp_path):
    store = _copy(healthy_run, tmp_path)
    state = {"done": False}

    def fail_one(rec: dict) -> dict:
        for check in rec.get("checks") or ():
            if not state["done"] and check.get("check") == "arguments_valid" and check.get("passed"):
                check["passed"], state["done"] = False, True
        return rec

    _jsonl(store, "evidence/agent/requests.jsonl", fail_one)
    assert state["done"]
    _redecide(store)
    assert any(line.startswith("evidence/agent.json: agent.arguments_valid is pass but its raw data gives fail")
               for line in _changed(store))


def test_an_honest_copy_is_judged_again_to_the_same_findings(healthy_run, tmp_path):
    store = _copy(healthy_run, tmp_path)
    assert verify_run(store.root).ok


# -- --resume trusts nothing the manifest does not vouch for -------------------------------------------------------


def test_attack_resume_an_edited_request(healthy_run, tmp_path, capsys):
    """request.json edited by hand (say a fault removed): one line, exit 2, the file named, nothing run."""
    store = _copy(healthy_run, tmp_path)
    request = store.read_json("request.json")
    request["target"]["emulator"]["faults"] = []
    request["run"]["label"] = "edited"
    store.path("request.json").write_text(json.dumps(request))
    before = store.manifest()
    capsys.readouterr()
    assert main(["validate", "--resume", str(store.root)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "request.json" in line and "sha256 differs" in line and "--resume" in line
    assert store.manifest() == before


def test_attack_resume_over_an_edited_finished_axis(healthy_run, tmp_path, capsys):
    store = _copy(healthy_run, tmp_path)
    rel = "evidence/agent/requests.jsonl"
    store.path(rel).write_text(store.path(rel).read_text() + "\n")
    capsys.readouterr()
    assert main(["validate", "--resume", str(store.root)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert rel in line


# -- the recipe follows the model served -----------------------------------------------------------------------------


def test_attack_a_cyrillic_recipe_name_keeps_the_kimi_k3_requirements(capsys):
    """`kіmi-k3` (Cyrillic і) with CUDA 12 and R570 is read as kimi-k3: refused when the parameters load."""
    assert skeleton("kіmi-k3") == "kimi-k3"
    with pytest.raises(BadInputError) as err:
        load_params([EMULATOR], ["recipe.name=kіmi-k3", "recipe.cuda_major=12"])
    assert err.value.field == "recipe.cuda_major"
    assert main(["validate", "-p", EMULATOR, "--set", "recipe.name=kіmi-k3", "--set", "recipe.driver_branch_min=570"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "recipe.driver_branch_min" in line and "R580" in line


def test_attack_a_release_candidate_below_the_kimi_k3_minimum():
    """0.27.0rc9 is below 0.27.1 (PEP 440): read as digits it looked like 0.27.9."""
    with pytest.raises(BadInputError, match="0.27.1 or newer"):
        load_params([EMULATOR], ["recipe.vllm_min=0.27.0rc9"])
    assert load_params([EMULATOR], ["recipe.vllm_min=0.29.0rc1"]).recipe.vllm_min == "0.29.0rc1"


@pytest.mark.parametrize("overrides, paths", [
    pytest.param(["recipe.name=generic", "recipe.cuda_major=12", "recipe.driver_branch_min=570"],
                 {"recipe.cuda_major", "recipe.driver_branch_min"}, id="another name, CUDA 12 and R570"),
    pytest.param(["recipe.name=my-k3", "recipe.vllm_min=0.20.0", "recipe.required_flags=[]"],
                 {"recipe.vllm_min", "recipe.required_flags"}, id="an older vLLM and no flags"),
    pytest.param(["recipe.name=kimi-k3-lite", "recipe.prefix_caching=false"], {"recipe.prefix_caching"},
                 id="prefix caching off"),
])
def test_attack_a_weaker_recipe_for_the_model_the_target_serves(healthy_run, overrides, paths):
    """The emulator serves moonshotai/Kimi-K3: its requirements apply whatever recipe.name says."""
    _, store = healthy_run
    params = load_params_json(store.path("params.json"))
    records = read_records(store)
    moved = load_params([], overrides, base=params.public_dict())
    d = compute_decision(moved, records)
    assert d.decision == "limited-observation"
    listed = {t["path"] for t in d.model_dump()["loosened_thresholds"] if not t["accepted_by"]}
    assert paths <= listed
    for path in paths:
        said = next(r for r in d.reasons if path in r)
        assert "the recipe of the model the target serves (moonshotai/Kimi-K3" in said or "kimi-k3" in said
    env = next(r for r in d.checklist if r["id"] == "C01")
    assert "loosened: recipe." in env["configuration"]


def test_the_served_model_picks_the_recipe():
    assert served_recipe(["kimi-k3", "moonshotai/Kimi-K3"])[0].name == "kimi-k3"
    assert served_recipe(["acme/Kimi-K3-Instruct-FP8"])[0].name == "kimi-k3"  # a variant keeps the requirements
    assert served_recipe(["kіmi-k3"])[0].name == "kimi-k3"  # a served name spelled with a Cyrillic і
    assert served_recipe(["tiny-llama", "models/vllm-tiny-llama"]) is None


def test_a_review_decision_edited_to_renew_is_named_by_verify_and_refused_by_sign(renewal_run, tmp_path):
    """The renewal side of the same attack: a review run's decision.json rewritten through the store (manifest
    recomputed) to a decision its evidence does not give. `k3 verify` decides the review again by the renewal rules
    (passed down to the verdict's check, which does not import the review) and names the field; the copy left alone
    verifies."""
    dest = tmp_path / renewal_run.root.name
    shutil.copytree(renewal_run.root, dest)
    store = RunStore.open(dest)
    assert verify_run(store.root).ok  # untouched: the evidence gives the stored decision
    stored = store.read_json("decision.json")
    assert stored["decision"] == "renew"
    store.write_json("decision.json", {**stored, "decision": "reduce", "rule": "reduce.edited-by-hand"})
    assert store.verify() == []  # the hashes hold: only deciding again shows it
    changed = _changed(store)
    assert any(line.startswith("decision.json: decision is") for line in changed), changed
    assert any("rule" in line for line in changed), changed
    with pytest.raises(EvidenceError, match="does not give"):
        sign_run(store.root, "Alice Martin", now=None)
