"""The plan counts every request each axis sends (issue 46): the agent's tool-turn series and contract check
beside its levels, the capacity steps at the speed they ran, what the run may send at most; a step too short to
complete a request is a plan warning and an inconclusive step, never a saturation point."""

from __future__ import annotations

import statistics
from pathlib import Path

from k3lib.axes.agent.rate import turns_needed
from k3lib.axes.capacity.analysis import saturation_point
from k3lib.axes.capacity.concurrency import too_short
from k3lib.axes.estimate import _Speed, agent_phases, capacity_phases, closed_loop_sent, sessions_sent
from k3lib.core.params import load_params
from k3lib.core.progress import read_status

ROOT = Path(__file__).resolve().parents[1]
EMULATOR = ROOT / "parameters" / "emulator.yaml"


def test_the_agent_plan_counts_its_series_and_contract_check():
    params = load_params([EMULATOR])
    phases = agent_phases(params, _Speed(0.01, 0.002))
    names = [p.name for p in phases]
    # the series the contract's failure rate needs (1 % → 381 turns: k3lib.axes.agent.rate.turns_needed)
    needed = turns_needed(params.contract.max_tool_call_failure_rate)
    assert needed == 381 and any(n.startswith(f"tool-turn series ({needed} turns") for n in names)
    assert any(n.startswith("vendor contract check (35 requests") for n in names)
    off = agent_phases(load_params([EMULATOR], ["axes.agent.contract_check=false"]), _Speed(0.01, 0.002))
    assert sum(p.requests for p in phases) - sum(p.requests for p in off) == 35
    assert all(p.most >= p.requests for p in phases)


def test_a_step_shorter_than_a_request_is_a_plan_warning():
    params = load_params([EMULATOR], ["axes.capacity.step_duration_s=1"])
    slow = _Speed(ttft_s=2.0, per_token_s=0.2)  # 128 tokens: about 28 s a request
    steps = [p for p in capacity_phases(params, slow) if p.name.startswith("step")]
    assert steps and all(p.warning and "axes.capacity.step_duration_s" in p.warning for p in steps)
    assert all(p.requests >= int(p.name.rsplit(" ", 1)[-1]) for p in steps), "the first wave is always sent"
    fast = _Speed(ttft_s=0.01, per_token_s=0.001)
    assert not any(p.warning for p in capacity_phases(params, fast))


def test_a_step_no_request_completed_in_is_inconclusive_not_held():
    s = 1_000_000_000
    wave = [{"ok": True, "sent_wall_ns": 10 * s, "done_wall_ns": 38 * s, "e2e_ms": 28_000.0} for _ in range(5)]
    held, why = too_short(wave, 20.0, True, [])
    assert held is None and "no request completed within the step's 20 s" in why[0] and "28 s" in why[0]
    steps = [{"concurrency": 1, "held": True}, {"concurrency": 5, "held": held}]
    assert saturation_point(steps) == 1, "the short step is no saturation point"
    cycled = wave + [{"ok": True, "sent_wall_ns": 10 * s, "done_wall_ns": 12 * s, "e2e_ms": 2000.0}]
    assert too_short(cycled, 20.0, True, []) == (True, [])
    assert too_short(wave, 20.0, False, ["preempted"]) == (False, ["preempted"])  # a failed step stays failed


def test_the_plan_counts_what_the_healthy_run_sends_per_axis(healthy_run):
    """Per axis, the requests the plan counted against the requests the axis sent to the target (its progress
    count, the number progress shows as sent/planned). The agent's and the long context's are counted exactly.
    A capacity step ends by its duration: how many it sends follows from how long a request takes there, which
    the plan takes from the preflight's one short request (off by up to twice on a loaded machine), so each step's
    count is checked at the time its requests took. The prefix cache's extra sessions, taken only while the gain
    is undecided, lie between the plan's count and its at-most; no axis passes its at-most."""
    _, store = healthy_run
    plan = {a["axis"]: a for a in store.read_json("plan.json")["axes"]}
    sent = {axis: (read_status(store.root, axis) or {}).get("done") or 0 for axis in plan}
    agent = plan["agent"]["requests"]
    assert abs(sent["agent"] - agent) <= 0.1 * agent, (sent["agent"], agent)
    rows = store.read_jsonl("evidence/capacity/requests.jsonl")
    assert sent["capacity"] == len(rows), "progress counts what the axis recorded"
    params = load_params([EMULATOR])
    cap = params.axes.capacity
    counted = sum(1 for r in rows if r["phase"] == "long-context")
    for step in {r["step"] for r in rows if r["phase"] in ("concurrency", "soak")}:
        mine = [r for r in rows if r["step"] == step]
        c = params.contract.planned_concurrency if step == "soak" else int(step[1:])
        took = statistics.median(r["e2e_ms"] for r in mine if r.get("ok")) / 1000
        counted += closed_loop_sent(c, cap.soak_duration_s if step == "soak" else cap.step_duration_s, took)
    for step in {r["step"] for r in rows if r["phase"] == "sessions"}:  # "sessions 4": a level of agent sessions
        mine = [r for r in rows if r["step"] == step]
        took = statistics.median(r["e2e_ms"] for r in mine if r.get("ok")) / 1000
        counted += sessions_sent(int(step.split()[-1]), cap.session_duration_s, cap.session_think_s, took)
    assert abs(len(rows) - counted) <= 0.1 * len(rows), (len(rows), counted)
    lc = next(p for p in plan["capacity"]["phases"] if p["name"].startswith("long context"))
    assert lc["requests"] == sum(1 for r in rows if r["phase"] == "long-context")
    assert plan["prefix_cache"]["requests"] <= sent["prefix_cache"] <= plan["prefix_cache"]["at_most"]
    for axis, entry in plan.items():
        assert sent[axis] <= entry["at_most"], f"{axis} sent more than the plan's at-most"


def test_a_too_short_step_is_an_inconclusive_finding_not_a_saturation_point():
    from k3lib.axes.capacity.result import CapacityResult
    from k3lib.axes.capacity.saturation import saturation_findings

    s = 1_000_000_000
    wave = [{"ok": True, "sent_wall_ns": 10 * s, "done_wall_ns": 38 * s, "e2e_ms": 28_000.0} for _ in range(4)]
    held, why = too_short(wave, 20.0, True, [])
    steps = [{"concurrency": c, "held": held, "why": why, "sent": c, "ok": c} for c in (1, 2, 4, 5)]
    result = CapacityResult({"plan": {}, "steps": steps}, [], [], [], None, None)
    params = load_params([EMULATOR])
    (sat,) = [f for f in saturation_findings(result, params) if f.rule.endswith("saturation")]
    assert result.saturation_point is None and sat.status == "warn"
    assert "too short to measure sustained load" in sat.message and "saturation point none" in sat.message
