"""The contract drives the test (issue 34): every numeric setting of the acceptance is in the settings table
(`k3lib.core.thresholds`) with a floor from the contract or the seeds, or is named as shaping no judgement; a run set
below a floor is a loosened threshold, listed in the decision, the sheet and the index, and forbids `production`
unless attested. Each attack below shrinks the test under the contract and must end elsewhere, naming the setting."""

from __future__ import annotations

import pytest
from pydantic.fields import FieldInfo

from conftest import ROOT

from k3lib.core.attested import parse_attestation
from k3lib.core.errors import BadInputError
from k3lib.core.evidence import OperationsData, read_records
from k3lib.core.params import CapacityParams, ContractParams, LoadParams, RecipeParams, TargetParams, default_tree
from k3lib.core.params import Params, load_params, load_params_json
from k3lib.core.recipes import RECIPE_FIELDS
from k3lib.core.roles import Cosmetic, Judged
from k3lib.core.thresholds import BY_PATH, NOT_JUDGED, SETTINGS, loosened, numeric_paths, roles, unclassified
from k3lib.report.index import decision_block
from k3lib.verdict.assemble import compute_decision
from k3lib.verdict.sheet import ITEMS, sheet_rows

EMULATOR = str(ROOT / "parameters" / "emulator.yaml")


# -- a new knob cannot slip past -----------------------------------------------------------------------------------


RECIPE_REQUIREMENTS = [f"recipe.{f}" for f in RECIPE_FIELDS]


def test_every_leaf_of_every_type_declares_its_role():
    """Issue 43: bool, string, null, list, command and number alike — each leaf says on its field whether it loosens
    (and its floor's basis) or why it cannot."""
    assert unclassified(Params, RECIPE_REQUIREMENTS) == []
    declared = roles(Params)
    assert len(declared) > 120 and all(r is not None for r in declared.values())
    for path in ("recipe.sampling.thinking", "recipe.spec_decode_min_acceptance_length", "axes.environment.nvswitch",
                 "axes.capacity.roofline.weight_dtype", "axes.capacity.roofline.hbm_tb_s",
                 "axes.capacity.roofline.active_params_b"):
        assert isinstance(declared[path], Judged) and path in BY_PATH, path
    assert isinstance(declared["target.restart"], Cosmetic) and "effect" in declared["target.restart"].why
    # every row of the table is a judged leaf, its direction the one the field declares
    for t in SETTINGS:
        assert isinstance(declared.get(t.path), Judged) and declared[t.path].looser == t.looser, t.path
    assert all(isinstance(declared[p], Judged) and declared[p].basis == "recipe" for p in RECIPE_REQUIREMENTS)


def test_not_judged_keeps_only_cosmetic_fields():
    declared = roles(Params)
    assert [p for p in NOT_JUDGED if not isinstance(declared.get(p), Cosmetic)] == []


def test_every_numeric_axes_and_load_setting_is_classified():
    paths = numeric_paths(Params)
    assert "axes.capacity.prompt_tokens" in paths and "load.workers" in paths
    assert "axes.capacity.calibrate" not in paths  # a bool is a mode, not a number
    stale = [p for p in (*BY_PATH, *NOT_JUDGED) if p not in roles(Params)]
    assert stale == [], "rows naming a parameter that no longer exists"


@pytest.mark.parametrize("model, name, annotation, path", [
    pytest.param(CapacityParams, "burst_tokens", int, "axes.capacity.burst_tokens", id="an int size"),
    pytest.param(CapacityParams, "warmup_share", float | None, "axes.capacity.warmup_share", id="an optional float"),
    pytest.param(LoadParams, "streams", tuple[int, ...], "load.streams", id="a tuple of levels"),
    pytest.param(CapacityParams, "skip_soak", bool, "axes.capacity.skip_soak", id="a bool"),
    pytest.param(RecipeParams, "parser", str | None, "recipe.parser", id="a nullable string"),
    pytest.param(TargetParams, "warmup", str | list[str] | None, "target.warmup", id="a command"),
    pytest.param(ContractParams, "regions", tuple[str, ...], "contract.regions", id="a list of strings"),
])
def test_a_new_leaf_without_a_role_fails_the_walk(monkeypatch, model, name, annotation, path):
    """The deliberate knob, of any type: added to the model with no role — the walk names it; declared cosmetic
    (with its reason) it passes; declared judged, it needs a row of the table."""
    monkeypatch.setitem(model.model_fields, name, FieldInfo(annotation=annotation, default=None))
    assert unclassified(Params, RECIPE_REQUIREMENTS) == [path]
    judged = FieldInfo(annotation=annotation, default=None)
    judged.metadata = [Judged("other", "defaults")]
    monkeypatch.setitem(model.model_fields, name, judged)
    assert unclassified(Params, RECIPE_REQUIREMENTS) == [path]  # judged, but no floor anywhere
    cosmetic = FieldInfo(annotation=annotation, default=None)
    cosmetic.metadata = [Cosmetic("a test's knob")]
    monkeypatch.setitem(model.model_fields, name, cosmetic)
    assert unclassified(Params, RECIPE_REQUIREMENTS) == []


def test_a_new_string_setting_is_not_a_number():
    from k3lib.core.thresholds import _numeric

    assert not _numeric(str | None) and not _numeric(bool) and _numeric(tuple[int, ...]) and _numeric(float | None)


def test_the_kits_own_defaults_and_the_k3_profile_are_at_their_floors():
    tree = default_tree()
    assert loosened(tree, tree) == []
    k3 = load_params([str(ROOT / "parameters" / "kimi-k3.yaml")], ["target.base_url=http://127.0.0.1:8000"])
    assert loosened(k3.public_dict(), tree) == []
    assert loosened(k3.public_dict(), tree, served=K3_SERVED) == []  # and at the served K3 recipe's floors


# -- the floors follow the contract --------------------------------------------------------------------------------


def _loose(overrides: list[str]) -> dict[str, object]:
    params = load_params([EMULATOR], overrides)
    return {t.path: t for t in loosened(params.public_dict(), default_tree())}


@pytest.mark.parametrize("overrides, path, floor", [
    pytest.param(["axes.capacity.prompt_tokens=200", "axes.capacity.output_tokens=64"], "axes.capacity.prompt_tokens",
                 1536, id="kv-starved hidden by small requests (prompt)"),
    pytest.param(["axes.capacity.prompt_tokens=200", "axes.capacity.output_tokens=64"], "axes.capacity.output_tokens",
                 128, id="kv-starved hidden by small requests (output)"),
    pytest.param(["axes.capacity.context_lengths_tokens=[1000,2000]"], "axes.capacity.context_lengths_tokens",
                 4096 - 128, id="an OOM at 3,048 tokens hidden by short lengths"),
    pytest.param(["axes.capacity.long_context_output_tokens=3000"], "axes.capacity.context_lengths_tokens",
                 4096 - 128, id="derived lengths shrunk by a long answer"),
    pytest.param(["axes.agent.concurrency_levels=[1]"], "axes.agent.concurrency_levels", 4,
                 id="overlapping tool calls hidden at one level"),
    pytest.param(["axes.capacity.roofline.min_share=0.006"], "axes.capacity.roofline.min_share", 0.05,
                 id="the bandwidth floor moved"),
    pytest.param(["axes.capacity.sample_interval_s=1.0"], "axes.capacity.sample_interval_s", 0.35,
                 id="too few samples per step"),
    pytest.param(["axes.capacity.step_max_requests=6"], "axes.capacity.step_max_requests", 20,
                 id="a step of a handful of requests"),
    pytest.param(["axes.prefix_cache.prefix_tokens=[64,128]"], "axes.prefix_cache.prefix_tokens", 1536,
                 id="a cache that keeps short prefixes only"),
    pytest.param(["contract.typical_prompt_tokens=3000", "axes.capacity.prompt_tokens=1536"],
                 "axes.capacity.prompt_tokens", 3000, id="a demo size under a larger contract"),
    pytest.param(["contract.typical_prompt_tokens=3000"], "axes.prefix_cache.prefix_tokens", 3000,
                 id="the demo's prefixes under a larger contract"),
])
def test_a_setting_under_its_contract_floor_is_loosened(overrides, path, floor):
    loose = _loose(overrides)
    assert path in loose, sorted(loose)
    t = loose[path]
    assert t.default == pytest.approx(floor) and not t.accepted
    # a judgement threshold's floor is the kit's default; a size's, length's or level's is the contract's
    assert bool(t.floor_basis) == (BY_PATH[path].floor is not None)
    assert f"{path} = " in t.text() and "looser than " in t.text()


def test_a_larger_contract_raises_the_floor_of_a_size_left_unset():
    """Unset sizes follow the contract (the axis derives them): never loosened, whatever the contract."""
    params = load_params([EMULATOR], ["contract.typical_prompt_tokens=3000", "axes.capacity.prompt_tokens=null"])
    assert "axes.capacity.prompt_tokens" not in {t.path for t in loosened(params.public_dict(), default_tree())}
    from k3lib.axes.capacity.shape import plan_capacity

    assert plan_capacity(params).prompt_tokens == 3000


def test_tightening_is_never_listed():
    loose = _loose(["axes.capacity.prompt_tokens=2000", "axes.agent.concurrency_levels=[1,4,8]",
                    "axes.capacity.context_lengths_tokens=[1000,4000]", "axes.capacity.sample_interval_s=0.1"])
    assert not {"axes.capacity.prompt_tokens", "axes.agent.concurrency_levels", "axes.capacity.context_lengths_tokens",
                "axes.capacity.sample_interval_s"} & set(loose)


def test_a_typical_size_beyond_the_context_is_bad_input():
    with pytest.raises(BadInputError, match="typical_prompt_tokens"):
        load_params([EMULATOR], ["contract.typical_prompt_tokens=5000"])


# -- listed in the decision, the sheet and the index; production only when attested --------------------------------


def _records(healthy_run):
    code, store = healthy_run
    assert code == 0
    return load_params_json(store.path("params.json")), read_records(store)


@pytest.mark.parametrize("overrides, path", [
    pytest.param(["target.emulator.faults=[kv-starved]", "axes.capacity.prompt_tokens=200",
                  "axes.capacity.output_tokens=64"], "axes.capacity.prompt_tokens", id="kv-starved small requests"),
    pytest.param(["axes.capacity.context_lengths_tokens=[1000,2000]"], "axes.capacity.context_lengths_tokens",
                 id="short lengths"),
    pytest.param(["axes.agent.concurrency_levels=[1]"], "axes.agent.concurrency_levels", id="one agent level"),
    pytest.param(["axes.capacity.roofline.min_share=0.006"], "axes.capacity.roofline.min_share", id="roofline floor"),
])
def test_attack_a_shrunk_test_is_not_production_and_names_the_setting(healthy_run, overrides, path):
    """Whatever the axes found, a run set below its contract floor is listed and forbids production."""
    params, records = _records(healthy_run)
    moved = load_params([], overrides, base=params.public_dict())
    d = compute_decision(moved, records)
    assert d.decision == "limited-observation"
    (reason,) = [r for r in d.reasons if path in r]
    assert "loosened threshold" in reason and "no attestation names who accepted it" in reason
    axis = BY_PATH[path].axis
    row = next(r for r in sheet_rows(records, moved.public_dict()) if r["id"] == next(
        i.id for i in ITEMS if i.axis == axis))
    assert f"{path} = " in row["configuration"]
    index = decision_block(d.model_dump())
    assert path in index and "forbids production" in index and "floor" in index


def test_an_attestation_accepts_a_level_list_by_its_value(healthy_run):
    params, records = _records(healthy_run)
    moved = load_params([], ["axes.agent.concurrency_levels=[1]"], base=params.public_dict())
    att = records["operations"].typed().attestation.model_dump(mode="json")

    def with_entry(value):
        att["items"]["thresholds_accepted"] = [
            *[t for t in att["items"]["thresholds_accepted"] if t["path"] != "axes.agent.concurrency_levels"],
            {"path": "axes.agent.concurrency_levels", "value": value, "why": "agents run one at a time here"}]
        ops = records["operations"].model_copy(update={"data": OperationsData(
            attestation=parse_attestation(att, "att.yaml")).model_dump(mode="json")})
        return compute_decision(moved, {**records, "operations": ops})

    assert with_entry([1, 2]).decision == "limited-observation"  # another list: not what the run was set to
    d = with_entry([1])
    assert d.decision == "production"
    (said,) = [r for r in d.reasons if r.startswith("loosened threshold(s), accepted by")]
    assert "axes.agent.concurrency_levels = [1]" in said


def test_the_contract_defaults_here_are_the_models():
    """thresholds.py cannot import the model (the model imports it): its fallbacks must be the model's defaults."""
    from k3lib.core import floors as thresholds
    from k3lib.core.params import ContractParams

    fields = ContractParams.model_fields
    assert thresholds._CONTEXT_DEFAULT == fields["max_context_tokens"].default
    assert thresholds._OUTPUT_DEFAULT == fields["max_output_tokens"].default


# -- every type: the served model's recipe and the kit's modes (issue 43) ------------------------------------------


def _k3_served() -> dict[str, object]:
    from k3lib.core.recipes import KNOWN_RECIPES

    return {"recipe": dict(KNOWN_RECIPES["kimi-k3"].judged), "recipe_name": "kimi-k3",
            "recipe_model": "moonshotai/Kimi-K3", "gpu": "NVIDIA H200", "hbm_tb_s": 4.8}


K3_SERVED = _k3_served()


@pytest.mark.parametrize("overrides, path", [
    pytest.param(["recipe.sampling.thinking=false"], "recipe.sampling.thinking", id="attack 3: thinking off"),
    pytest.param(["recipe.sampling.thinking=null"], "recipe.sampling.thinking", id="thinking unset"),
    pytest.param(["recipe.sampling.temperature=0.2"], "recipe.sampling.temperature", id="a cooler sampling"),
    pytest.param(["recipe.spec_decode_min_acceptance_length=null"], "recipe.spec_decode_min_acceptance_length",
                 id="attack 6: no DSpark floor"),
    pytest.param(["axes.capacity.roofline.weight_dtype=null"], "axes.capacity.roofline.weight_dtype",
                 id="attack 7: no dtype"),
    pytest.param(["axes.capacity.roofline.weight_dtype=bf16"], "axes.capacity.roofline.weight_dtype",
                 id="wider weights"),
    pytest.param(["axes.capacity.roofline.active_params_b=null"], "axes.capacity.roofline.active_params_b",
                 id="no active parameters"),
    pytest.param(["axes.capacity.roofline.hbm_tb_s=0.5"], "axes.capacity.roofline.hbm_tb_s",
                 id="a bandwidth below the GPU's"),
    pytest.param(["axes.capacity.roofline.gpu=L40S"], "axes.capacity.roofline.gpu", id="another GPU named"),
    pytest.param(["axes.environment.nvswitch=false"], "axes.environment.nvswitch", id="NVSwitch said absent"),
    pytest.param(["axes.agent.history=drop-reasoning"], "axes.agent.history", id="a history mode"),
    pytest.param(["axes.prefix_cache.isolation=salt"], "axes.prefix_cache.isolation", id="an isolation mode"),
    pytest.param(["axes.agent.sample=/tmp/easy.yaml"], "axes.agent.sample", id="another agent sample"),
])
def test_attack_a_non_numeric_or_null_setting_is_loosened(overrides, path):
    """Each leaf the third review named (and its kin) set looser than its reference is listed: the served K3 recipe
    for the sampling, the DSpark floor and the bytes per token; the kit's table for the bandwidth; the kit's modes."""
    base = load_params([str(ROOT / "parameters" / "kimi-k3.yaml")], ["target.base_url=http://127.0.0.1:8000"])
    moved = load_params([], overrides, base=base.public_dict())
    loose = {t.path: t for t in loosened(moved.public_dict(), default_tree(), served=K3_SERVED)}
    assert path in loose, sorted(loose)
    assert not loose[path].accepted and f"{path} = " in loose[path].text()


def test_tightening_a_non_numeric_setting_is_never_listed():
    base = load_params([str(ROOT / "parameters" / "kimi-k3.yaml")], ["target.base_url=http://127.0.0.1:8000"])
    moved = load_params([], ["axes.environment.nvswitch=true", "axes.capacity.roofline.weight_dtype=int4",
                             "axes.capacity.roofline.hbm_tb_s=8", "axes.capacity.roofline.active_params_b=40",
                             "recipe.spec_decode_min_acceptance_length=2.5"], base=base.public_dict())
    assert loosened(moved.public_dict(), default_tree(), served=K3_SERVED) == []


def test_without_a_known_served_recipe_its_floors_judge_nothing():
    """A generic model: the recipe basis gives no floor (the kit's defaults are null)."""
    moved = load_params([], ["recipe.sampling.thinking=false", "axes.capacity.roofline.weight_dtype=null"],
                        base=default_tree())
    assert loosened(moved.public_dict(), default_tree(), served={"gpu": "NVIDIA H200", "hbm_tb_s": 4.8}) == []


def test_attack_thinking_off_is_not_production_until_accepted(healthy_run):
    """Attack 3 at the decision: the healthy demo's records, thinking turned off — listed, and production only once
    an attestation accepts the same path and value."""
    params, records = _records(healthy_run)
    moved = load_params([], ["recipe.sampling.thinking=false"], base=params.public_dict())
    d = compute_decision(moved, records)
    assert d.decision == "limited-observation"
    assert any("recipe.sampling.thinking" in r and "loosened threshold" in r for r in d.reasons)
    att = records["operations"].typed().attestation.model_dump(mode="json")
    att["items"]["thresholds_accepted"] = [*att["items"]["thresholds_accepted"], {
        "path": "recipe.sampling.thinking", "value": False, "why": "this deployment serves K3 without reasoning"}]
    ops = records["operations"].model_copy(update={"data": OperationsData(
        attestation=parse_attestation(att, "att.yaml")).model_dump(mode="json")})
    assert compute_decision(moved, {**records, "operations": ops}).decision == "production"


def test_attack_a_model_served_under_a_name_of_its_own_keeps_the_named_recipes_floors(healthy_run):
    """K3 served as `--served-model-name llm` from `/mnt/models` (a KServe layout): the kit knows neither name, and
    before the fix the served-basis floors judged nothing — thinking off, no DSpark floor and no weight dtype were
    not listed and the run was `production`. A name is the target's to choose: the recipe the parameters name
    stands in."""
    params, records = _records(healthy_run)
    probe = records["probe"]
    renamed = probe.model_copy(update={"data": {**probe.data, "served_models": [{"id": "llm", "root": "/mnt/models"}]}})
    moved = load_params([], ["recipe.sampling.thinking=false", "recipe.spec_decode_min_acceptance_length=null"],
                        base=params.public_dict())
    d = compute_decision(moved, {**records, "probe": renamed})
    assert d.decision == "limited-observation"
    for path in ("recipe.sampling.thinking", "recipe.spec_decode_min_acceptance_length"):
        assert any(path in r and "loosened threshold" in r for r in d.reasons), (path, d.reasons)


def test_a_decision_listing_its_loosened_settings_in_another_order_still_verifies(tmp_path, monkeypatch):
    """The table's order follows the parameters model (issue 48): a decision.json written when it followed a
    hand-kept list holds the same loosened settings in another order, and must still verify; another value must not."""
    from k3lib.core.store import RunStore
    from k3lib.verdict import recompute

    rows = [{"path": "axes.agent.repetitions", "value": 3}, {"path": "axes.capacity.step_duration_s", "value": 1.5}]
    said = ["axes.agent.repetitions = 3 (default 10)", "axes.capacity.step_duration_s = 1.5 (default 120)"]
    accepted = "loosened threshold(s), accepted by K3 Demo on 2026-01-01 (why: decision.json loosened_thresholds): "
    store = RunStore.create_at(tmp_path / "run")
    store.write_json("decision.json", {"decision": "production", "loosened_thresholds": rows,
                                       "reasons": ["a finding", accepted + "; ".join(said)]})
    monkeypatch.setattr(recompute, "raw_data_problems", lambda store, stored: [])

    def decided(loose, reasons):
        return lambda s, d: {"decision": "production", "loosened_thresholds": loose, "reasons": reasons}

    assert recompute.decision_problems(store, decided(rows[::-1], [accepted + "; ".join(said[::-1]),
                                                                   "a finding"])) == []
    changed = [rows[1], {**rows[0], "value": 2}]
    assert [p.split(" (")[0] for p in recompute.decision_problems(store, decided(changed, [
        "a finding", accepted + "; ".join([said[1], said[0].replace("= 3", "= 2")])]))] == [
        "decision.json: reasons differs from what the evidence gives",
        "decision.json: loosened_thresholds differs from what the evidence gives"]


def test_a_checklist_configuration_listing_its_loosened_settings_in_another_order_still_verifies():
    """The sheet's configuration column lists an axis' loosened settings in the table's order: compared sorted."""
    from k3lib.verdict.recompute import _canonical

    said = ["axes.capacity.step_duration_s = 1.5, looser than the default 120",
            "axes.capacity.soak_duration_s = 3, looser than the default 1800",
            "axes.agent.concurrency_levels = [1, 2], looser than its floor 4 — contract.planned_concurrency 4"]

    def checklist(items):
        return [{"id": "C08", "configuration": "context 4096 tokens; loosened: " + ", ".join(items)}]

    assert _canonical(checklist(said), "checklist") == _canonical(checklist(said[::-1]), "checklist")
    assert _canonical(checklist(said), "checklist") != _canonical(
        checklist([said[0].replace("1.5", "2"), *said[1:]]), "checklist")
