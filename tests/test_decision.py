"""Decision rules: strongest first, missing evidence and open items never a pass."""

from __future__ import annotations

import ast
import datetime as dt
import fnmatch
import re

import pytest

from conftest import ROOT

from k3lib.verdict.decision import DECISIONS, EXIT_CODES, RULES, AcceptanceOutcome, decide, level_for, traffic_cap_from
from k3lib.core.evidence import EvidenceRecord, Finding, axis_status
from k3lib.verdict.sheet import ITEMS, item_status, sheet_rows


def rec(axis: str, **rules: str) -> EvidenceRecord:
    findings = [Finding(rule=rule.replace("__", "."), status=status, message=f"{rule} is {status}")
                for rule, status in rules.items()]
    return EvidenceRecord(axis=axis, title=axis, status=axis_status(findings), findings=findings)


OK_PROBE = rec("probe", probe__health="pass", probe__models="pass")

CASES = [
    pytest.param({"probe": OK_PROBE}, ["probe"], "production", id="all-pass"),
    pytest.param({}, ["probe"], "limited-observation", id="missing-evidence"),
    pytest.param({"probe": rec("probe", probe__health="fail")}, ["probe"], "environment-rebuild", id="unhealthy"),
    pytest.param({"probe": rec("probe", probe__health="pass", probe__metrics="not-observable")}, ["probe"],
                 "limited-observation", id="not-observable-is-not-a-pass"),
    pytest.param({"environment": rec("environment", environment__cuda_build="fail")}, ["environment"],
                 "environment-rebuild", id="cuda12-image"),
    pytest.param({"agent": rec("agent", agent__arguments_valid="fail")}, ["agent"], "limited-observation",
                 id="bad-tool-args-blocks-agents"),
    pytest.param({"capacity": rec("capacity", capacity__saturation="fail")}, ["capacity"], "capacity-extension",
                 id="kv-starved"),
    pytest.param({"prefix_cache": rec("prefix_cache", prefix_cache__reuse="fail")}, ["prefix_cache"],
                 "limited-observation", id="no-prefix-caching"),
    pytest.param({"capacity": rec("capacity", capacity__saturation="fail"),
                  "environment": rec("environment", environment__driver_branch="fail")}, ["environment", "capacity"],
                 "environment-rebuild", id="two-faults-strongest-wins"),
    pytest.param({"capacity": rec("capacity", capacity__oom="fail"),
                  "agent": rec("agent", agent__no_markup_leak="fail")}, ["agent", "capacity"],
                 "capacity-extension", id="capacity-beats-agents"),
]


@pytest.mark.parametrize("records, planned, expected", CASES)
def test_decide(records, planned, expected):
    d = decide(records, planned, today=dt.date(2026, 11, 30))
    assert d.decision == expected
    assert d.exit_code == EXIT_CODES[expected]
    assert d.reasons
    if expected == "limited-observation":
        assert d.reexamine_on == "2026-12-14"
        assert d.traffic_cap and d.traffic_cap["max_concurrency"] >= 1
    else:
        assert d.reexamine_on is None and d.traffic_cap is None


def test_agents_blocked_and_cache_gain_flags():
    d = decide({"agent": rec("agent", agent__no_markup_leak="fail"),
                "prefix_cache": rec("prefix_cache", prefix_cache__reuse="fail")}, ["agent", "prefix_cache"])
    assert d.agents_blocked and not d.cache_gain_counted
    assert d.traffic_cap["agents_blocked"] is True


def _capacity_record(held: list[bool], planned: int = 4) -> EvidenceRecord:
    """A capacity record built by the axis's own record builder from a run's steps (no hand-built data)."""
    import types

    from k3lib.axes.capacity import capacity_record
    from k3lib.axes.capacity.result import CapacityResult
    from k3lib.core.params import load_params

    params = load_params([ROOT / "parameters" / "emulator.yaml"], [f"contract.planned_concurrency={planned}"])
    steps = [{"concurrency": c, "status": "done", "held": ok, "why": [] if ok else ["preempted"], "preemptions": 0,
              "out_of_contract": c > planned} for c, ok in enumerate(held, start=1)]
    phases = [{"phase": "concurrency", "status": "done", "start_wall": 0.0, "end_wall": 1.0, "note": ""}]
    result = CapacityResult({"plan": {}, "phases": phases, "steps": steps}, [], [], [], None, None)
    return capacity_record(result, types.SimpleNamespace(params=params))


@pytest.mark.parametrize("held, planned, cap", [
    pytest.param([True] * 5, 4, 4, id="beyond-the-plan-capped-at-the-plan"),
    pytest.param([True, True, True, False, False], 4, 3, id="saturates-at-4"),
])
def test_traffic_cap_is_the_one_the_capacity_axis_measured(held, planned, cap):
    record = _capacity_record(held, planned)
    measured = traffic_cap_from({"capacity": record})
    assert measured["max_concurrency"] == cap
    assert measured["source"] == "evidence/capacity.json: data.traffic_cap"
    d = decide({"capacity": record, "prefix_cache": rec("prefix_cache", prefix_cache__reuse="fail")},
               ["capacity", "prefix_cache"])
    if all(held[:planned]):  # every step up to the plan held: the cache defect limits, the cap is stated
        assert d.decision == "limited-observation"
        assert d.traffic_cap["max_concurrency"] == cap
        assert any(r.startswith(f"traffic cap: {cap} ") for r in d.reasons)
    else:  # a step at or below the plan did not hold: saturation at nominal load, no cap to live under
        assert d.decision == "capacity-extension" and d.traffic_cap is None


def test_traffic_cap_on_the_demo_shape_states_the_measured_cap():
    """The demo's shape: saturation point 5, planned 4 → cap 4, never the fallback of one request at a time."""
    record = _capacity_record([True] * 5, 4)
    assert record.data["saturation_point"] == 5
    d = decide({"capacity": record}, ["capacity", "prefix_cache"])
    assert d.decision == "limited-observation"
    assert d.traffic_cap["max_concurrency"] == 4 and d.traffic_cap["saturation_point"] == 5


def test_no_step_held_caps_at_one_request_with_the_reason():
    cap = traffic_cap_from({"capacity": _capacity_record([False, False], 2)})
    assert cap["max_concurrency"] == 1 and "accepted no load step" in cap["basis"] and cap["source"] is None


@pytest.mark.parametrize("rule, level", [
    ("environment.driver_branch", "environment-rebuild"),
    ("agent.auto_tool_choice", "environment-rebuild"),
    ("agent.arguments_valid", "limited-observation"),
    ("capacity.cold_load", "environment-rebuild"),
    ("capacity.startup_oom", "environment-rebuild"),
    ("capacity.oom", "capacity-extension"),
    ("capacity.memory_growth", "limited-observation"),
    ("capacity.notebook", "limited-observation"),
    ("environment.build_method", "limited-observation"),
    ("prefix_cache.reuse", "limited-observation"),
    ("something.else", "limited-observation"),
])
def test_rule_levels(rule, level):
    assert level_for(Finding(rule=rule, status="fail", message="x"))[0] == level


def test_the_sheet_has_the_sixteen_items_of_the_source_document():
    assert [i.id for i in ITEMS] == [f"C{n:02d}" for n in range(1, 17)]
    assert len({i.title for i in ITEMS}) == 16


def test_an_item_without_a_proving_finding_stays_open_and_blocks_production():
    records = {"probe": OK_PROBE}
    rows = sheet_rows(records)
    assert all(r["status"] == "open" for r in rows)
    d = decide(records, ["probe"], checklist=rows[:1])
    assert d.decision == "limited-observation"
    assert any("C01" in r and "still open" in r for r in d.reasons)


def test_item_status_reads_matching_findings():
    env = rec("environment", environment__image="pass", environment__vllm_version="pass",
              environment__cuda_build="fail")
    assert item_status(ITEMS[0], {"environment": env})[0] == "pass"
    assert item_status(ITEMS[1], {"environment": env})[0] == "fail"
    assert item_status(ITEMS[2], {"environment": env})[0] == "open"


def _item(item_id: str):
    return next(i for i in ITEMS if i.id == item_id)


def test_attack_an_item_passes_only_when_every_rule_it_rests_on_passes():
    """Issue 43: C08 (cold load apart from long context) passed on `capacity.cold_load` alone; every rule it rests
    on must now have a passing finding, or it stays open and production is refused."""
    partial = {"capacity": rec("capacity", capacity__cold_load="pass")}
    status, _ = item_status(_item("C08"), partial)
    assert status == "open"
    (row,) = [r for r in sheet_rows(partial) if r["id"] == "C08"]
    assert "no finding for capacity.long_context" in row["observed"]
    assert decide(partial, ["capacity"], checklist=[row]).decision == "limited-observation"
    whole = {"capacity": rec("capacity", capacity__cold_load="pass", capacity__long_context="pass")}
    assert item_status(_item("C08"), whole)[0] == "pass"


def test_one_name_of_an_event_suffices_and_a_setting_turned_off_drops_its_rules():
    """An OOM is reported as capacity.oom or capacity.startup_oom (one suffices); the thinking checks apply only
    when the agent axis ran with thinking on (off, the settings table lists it as loosened)."""
    cap = rec("capacity", capacity__oom="pass", capacity__context_refusal="pass")
    assert item_status(_item("C10"), {"capacity": cap})[0] == "pass"
    c07 = [r for r in _item("C07").rules if r not in ("agent.reasoning_present", "agent.no_reasoning_leak")
           and not r.startswith("agent.contract.")]
    agent = rec("agent", **{r.replace(".", "__"): "pass" for r in c07})
    with_settings = agent.model_copy(update={"data": {"settings": {"thinking": False, "contract_check": False}}})
    assert item_status(_item("C07"), {"agent": with_settings})[0] == "pass"
    thinking = agent.model_copy(update={"data": {"settings": {"thinking": True, "contract_check": False}}})
    assert item_status(_item("C07"), {"agent": thinking})[0] == "open"


def test_decision_json_shape():
    d = decide({"probe": OK_PROBE}, ["probe"]).model_dump()
    assert set(d) >= {"decision", "reasons", "checklist", "traffic_cap", "reexamine_on", "build"}
    assert set(d["checklist"][0]) >= {"id", "title", "status", "evidence"}
    assert d["build"] == "official"


def test_the_one_table_decides_whatever_a_finding_carries():
    """No hint inside a finding changes the decision: the rule id and the status decide, through RULES only."""
    hinted = Finding(rule="capacity.oom", status="fail", message="x", evidence={"decision": "production"})
    assert level_for(hinted) == level_for(Finding(rule="capacity.oom", status="fail", message="x"))
    assert level_for(Finding(rule="environment.cuda_build", status="warn", message="x"))[0] == "limited-observation"
    assert level_for(Finding(rule="environment.cuda_build", status="pass", message="x"))[0] == "production"


def test_the_four_decisions_and_their_exit_codes_are_defined_once():
    assert [o.value for o in AcceptanceOutcome] == list(DECISIONS) == ["production", "limited-observation",
                                                             "capacity-extension", "environment-rebuild"]
    assert EXIT_CODES == {o.value: o.exit_code for o in AcceptanceOutcome} and len(set(EXIT_CODES.values())) == 4
    assert all(rule.level in AcceptanceOutcome for rule in RULES) and RULES[-1].pattern == "*"


# -- every rule id the sheet or the decision cites is emitted by some axis ------------------------------------------

AXES = ("probe", "environment", "agent", "capacity", "prefix_cache", "attestation")
_ID = re.compile(rf"^(?:{'|'.join(AXES)})\.[a-z_]+$")


def _emitted_rule_ids() -> set[str]:
    """Rule ids the axes' code can emit: full-id literals, capacity's `_f("name", …)`, the prefix axis'
    `rule + "name"`, the agent's checks, and the runner's `{axis}.notebook` for an axis notebook that failed."""
    from k3lib.axes.agent.checks import CHECKS
    from k3lib.axes.agent.contract_judge import ITEMS as CONTRACT

    out = {f"agent.{c}" for c in CHECKS} | {f"{a}.notebook" for a in AXES}
    out |= {f"agent.{kind}.{i}" for i in CONTRACT for kind in ("contract", "compat")}  # `agent.{kind}.{item.id}`
    for path in (ROOT / "k3lib").rglob("*.py"):
        if path.name in ("decision.py", "sheet.py") or "renewal" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _ID.match(node.value):
                out.add(node.value)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_f"
                  and path.parent.name == "capacity" and node.args and isinstance(node.args[0], ast.Constant)):
                out.add(f"capacity.{node.args[0].value}")
            elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and path.parent.name == "prefix_cache"
                  and isinstance(node.left, ast.Name) and node.left.id == "rule"
                  and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)):
                out.add(f"prefix_cache.{node.right.value}")
            elif (isinstance(node, ast.JoinedStr) and path.parent.name == "prefix_cache" and len(node.values) == 2
                  and isinstance(node.values[0], ast.FormattedValue) and isinstance(node.values[0].value, ast.Name)
                  and node.values[0].value.id == "AXIS" and isinstance(node.values[1], ast.Constant)):
                out.add(f"prefix_cache{node.values[1].value}")
    return out


def test_every_rule_the_decision_cases_use_is_emitted_by_some_axis():
    """A decision case on a rule id no axis emits tests a decision no run can reach."""
    emitted = _emitted_rule_ids()
    used = {f.rule for case in CASES for record in case.values[0].values() for f in record.findings}
    assert used and not sorted(used - emitted)


def test_every_rule_the_sheet_or_the_decision_cites_is_emitted_by_some_axis():
    emitted = _emitted_rule_ids()
    cited = {p for item in ITEMS for p in item.rules} | {r.pattern for r in RULES if r.pattern != "*"}
    orphans = sorted(p for p in cited if not any(fnmatch.fnmatchcase(e, p) for e in emitted))
    assert not orphans, f"cited but emitted by no axis: {orphans}"
    assert {"environment.host_container", "capacity.startup_oom", "attestation.rollback_rehearsed"} <= emitted
