"""The session phase against the emulator over a real socket (issue 47): a healthy server's per-turn records show the
prompt growing, later turns hitting the prefix cache and every tool result answering an id of the server's previous
reply; a server that evicts the cache between turns ends in a decision other than production, for the session
phase's own finding."""

from __future__ import annotations

import pytest

import k3lib
import k3lib.axes.capacity as capacity
from conftest import ROOT
from k3lib.core.outcomes import level_for
from k3lib.core.store import RunStore
from k3lib.emulator import EmulatorConfig, start_emulator

PARAMS = str(ROOT / "parameters" / "emulator.yaml")
# the other phases as short as the capacity tests run them; the session phase as the demo runs it
FAST = ["axes.capacity.step_duration_s=1.0", "axes.capacity.soak_duration_s=1.5",
        "axes.capacity.context_lengths_tokens=[1000]", "axes.capacity.sample_interval_s=0.1",
        "axes.capacity.concurrency_steps=[4]"]


def _run(tmp_path, *faults: str, extra: tuple[str, ...] = ()):
    with start_emulator(EmulatorConfig.from_profile("demo", faults=faults, time_scale=0.05), host="127.0.0.1",
                        port=0) as h:
        ctx = k3lib.open_axis("capacity", PARAMS, [f"target.base_url={h.url}", "target.gpu_metrics.source=dcgm",
                                                   f"target.gpu_metrics.url={h.dcgm_url}", *FAST, *extra],
                              str(tmp_path / "run"))
        result = capacity.run_capacity(ctx)
        record = ctx.record(capacity.capacity_record(result, ctx))
    return ctx, result, record


def _sessions(record):
    return {f.rule: f for f in record.findings if f.rule.startswith("capacity.session_")}


@pytest.mark.slow
def test_healthy_sessions_grow_reuse_and_answer_live_ids(tmp_path):
    ctx, result, record = _run(tmp_path)
    assert result.phase("sessions")["status"] == "done"
    found = _sessions(record)
    assert {r: f.status for r, f in found.items()} == {
        "capacity.session_preemption": "pass", "capacity.session_prefix_reuse": "pass",
        "capacity.session_tool_calls": "pass", "capacity.session_stall": "info"}
    turns = result.sessions
    by_session: dict[str, list[dict]] = {}
    for t in turns:
        by_session.setdefault(t["session"], []).append(t)
    deep = [s for s in by_session.values() if len(s) >= 3]
    assert deep
    for s in deep:
        s.sort(key=lambda t: t["turn"])
        prompts = [t["prompt_tokens"] for t in s]
        assert prompts == sorted(prompts) and prompts[-1] > prompts[0]  # the history grows turn after turn
        assert all(t["cached_tokens"] >= t["designed_cached_tokens"] for t in s[1:])  # later turns hit the cache
    answers = [(a["id"], t["previous_call_ids"]) for t in turns for a in t["answers"]]
    assert answers and all(i in previous for i, previous in answers)  # every result answers a live id
    assert all(t.get("level") in (1, 2, 4) for t in turns)
    assert record.data["sessions"]["turn_count"] == len(turns) and record.data["sessions"]["turns"][0]["kv_usage_max"] \
        is not None
    assert RunStore(ctx.store.root).verify() == []
    # nothing of the session phase stands between the run and production
    assert not [f.rule for f in record.findings if f.rule.startswith("capacity.session_")
                and f.status not in ("pass", "info")]


@pytest.mark.slow
def test_a_cache_evicted_between_turns_fails_the_session_phase(tmp_path):
    _, result, record = _run(tmp_path, "session-evict")
    reuse = _sessions(record)["capacity.session_prefix_reuse"]
    assert reuse.status == "fail" and "session phase" in reuse.message and reuse.observed["ratio"] < 0.5
    # the session phase's own finding decides: everything else of the axis held
    assert [f.rule for f in record.findings if f.status == "fail"] == ["capacity.session_prefix_reuse"]
    assert level_for(reuse)[0] == record.data["implied_decision"] == "limited-observation"


@pytest.mark.slow
def test_kv_exhausted_by_long_histories_fails_the_session_phase_alone(tmp_path):
    """A pool with room for the planned requests (4 x 1,664 tokens in 8,192) but not for eight agents' histories
    growing to three quarters of the context: the concurrency steps hold, the sessions are preempted."""
    _, result, record = _run(tmp_path, "kv-pool=8192", extra=(
        "contract.planned_sessions=8", "axes.capacity.session_duration_s=3", "axes.capacity.session_think_s=0.05",
        "axes.agent.long_context_fraction=0.75"))
    held = _sessions(record)["capacity.session_preemption"]
    assert held.status == "fail" and "session phase" in held.message and held.observed["preemptions"] > 0
    assert result.step(4)["held"] is True  # the planned concurrency of independent requests fits
    assert level_for(held)[0] == record.data["implied_decision"] == "capacity-extension"
