"""The session phase against the emulator over a real socket (issue 47): a healthy server's per-turn records show the
prompt growing, later turns hitting the prefix cache and every tool result answering an id of the server's previous
reply; a server that evicts the cache between turns ends in a decision other than production, for the session
phase's own finding."""

from __future__ import annotations

import json
import signal
import threading
import time

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


def _stop_when(run_json, ready, timeout_s: float = 120) -> threading.Thread:
    """Ctrl-C (SIGINT to the main thread) as soon as `ready(run.json)` holds."""
    main = threading.main_thread().ident
    assert main is not None

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                data = json.loads(run_json.read_text())
            except (OSError, ValueError):
                data = None
            if data is not None and ready(data):
                signal.pthread_kill(main, signal.SIGINT)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _mid_last_level(data) -> bool:
    """Stop point: the last level of sessions holds, at least one of its sessions has ended."""
    current = (data.get("sessions") or {}).get("current") or {}
    return current.get("sessions") == 4 and len(current.get("finished") or []) >= 1


@pytest.mark.slow
def test_a_session_phase_stopped_mid_level_resumes_without_resending(tmp_path):
    """Stopped (Ctrl-C) in the middle of its last level, the capacity axis' cut attempt set apart as `--resume` sets
    it, the axis resumes: the earlier phases and levels are not run again, the sessions the stop left ended are
    kept once and not re-sent, the cut sessions stay apart, and the judged level is whole."""
    from k3lib.batch.execute import aborted_folder, set_aside

    run_dir = tmp_path / "run"
    overrides = [*FAST, "axes.capacity.session_duration_s=2"]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05), host="127.0.0.1", port=0) as h:
            args = [f"target.base_url={h.url}", "target.gpu_metrics.source=dcgm", f"target.gpu_metrics.url={h.dcgm_url}",
                    *overrides]
            ctx = k3lib.open_axis("capacity", PARAMS, args, str(run_dir))
            watcher = _stop_when(ctx.store.path("evidence/capacity/run.json"), _mid_last_level)
            with pytest.raises(KeyboardInterrupt):
                capacity.run_capacity(ctx)
            watcher.join(5)
            store = RunStore(ctx.store.root)
            under = aborted_folder(store)
            set_aside(store, "03_capacity.ipynb", "capacity", under)
            cut_run = store.read_json(f"{under}/evidence/capacity/run.json")
            cut_turns = store.read_jsonl(f"{under}/evidence/capacity/sessions.jsonl")
            cut_requests = store.read_jsonl(f"{under}/evidence/capacity/requests.jsonl")

            ctx = k3lib.open_axis("capacity", PARAMS, args, str(run_dir))
            result = capacity.run_capacity(ctx)
            record = ctx.record(capacity.capacity_record(result, ctx))
    finally:
        signal.signal(signal.SIGINT, previous)
    finished = cut_run["sessions"]["current"]["finished"]
    assert finished and cut_run["sessions"]["current"]["sessions"] == 4
    kept = [t for t in cut_turns if t["level"] != 4 or t["session"] in finished]
    # the phases before the sessions and the ended levels were not run again: their records are the cut attempt's
    assert [p["phase"] for p in result.run["phases"]] == ["cold-load", "long-context", "concurrency", "soak",
                                                          "sessions"]
    assert [r for r in result.requests if r["phase"] != "sessions"] == \
        [r for r in cut_requests if r["phase"] != "sessions"]
    # every ended session's turns once, as they were; no turn of a session the stop cut
    assert result.sessions[:len(kept)] == kept
    new = result.sessions[len(kept):]
    assert new and all(t["level"] == 4 and t["session"] not in finished for t in new)
    cut_ids = {t["request_id"] for t in cut_turns} - {t["request_id"] for t in kept}
    assert not cut_ids & {t["request_id"] for t in result.sessions}
    assert not cut_ids & {r["request_id"] for r in result.requests}
    # the judged level is whole: its ended sessions and this attempt's, every one of its turns
    level = result.run["sessions"]["levels"][-1]
    assert level["sessions"] == 4 and level["status"] == "done"
    assert level["resumed"] == {"from": under, "kept_sessions": len(finished),
                                "kept_turns": sum(1 for t in kept if t["level"] == 4)}
    assert level["turns"] == sum(1 for t in result.sessions if t["level"] == 4)
    assert level["sessions_finished"] >= len(finished) + 1
    assert [lv["sessions"] for lv in result.run["sessions"]["levels"]] == [1, 2, 4]
    assert "current" not in result.run["sessions"]
    assert result.phase("sessions")["status"] == "done" and "resumed from" in result.phase("sessions")["note"]
    assert record.data["sessions"]["turn_count"] == len(result.sessions)
    assert {f.rule for f in record.findings} >= {"capacity.session_preemption", "capacity.session_prefix_reuse"}
    assert RunStore(ctx.store.root).verify() == []
