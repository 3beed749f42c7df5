"""Attacks on what a renewal decision rests on (issue 39, points 5–6; issue 36's small-sample rule), each written
to fail: a drill that never touched the deployment, a kill after the streamed task had ended, a live run whose API
path only failed to connect or authenticate, or that ran another task set or model; one task with 100,000 retries,
rows that contradict themselves, decisions on a handful of tasks, rules quietly loosened. Each starts from a
decision that is not `renew` and shows it stays so, with a reason naming the cause (or one line, exit 2)."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from renewal_attack import TODAY, copy_scenario, csv_rows, review, text, write_rows

from k3lib import emulator
from k3lib.core.errors import BadInputError
from k3lib.renewal import demo
from k3lib.renewal.analysis import analyse_stability, compare_paths
from k3lib.renewal.drill import (
    QUESTIONS,
    DrillObservation,
    answer_questions,
    for_deployment,
    is_deployment,
    not_run,
    run_drill,
)
from k3lib.renewal.params import DrillParams, load_review_params
from k3lib.renewal.review import analyse, decide_from_axes, load_review
from k3lib.renewal.rules import RenewalRules

KILL = [{"http": {"path": "/_emulator/faults", "json": {"faults": ["crash=1"]}}},
        {"http": {"path": "/v1/chat/completions", "json": {"messages": [{"role": "user", "content": "hi"}],
                                                           "max_tokens": 4}}}]
ROLLBACK = [{"http": {"path": "/_emulator/restart", "json": {"profile": "demo", "faults": [],
                                                             "vllm_version": demo.PREVIOUS_VERSION}}}]


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return {s: demo.generate(s, tmp_path_factory.mktemp(s)) for s in ("steady", "idle-heavy", "poor")}


@pytest.fixture(scope="module")
def servers():
    cfg = emulator.EmulatorConfig.from_profile("demo", time_scale=0.05)
    target, api = emulator.start_emulator(cfg, port=0), emulator.start_emulator(cfg, port=0)
    try:
        yield target, api
    finally:
        target.stop()
        api.stop()


@pytest.fixture(scope="module")
def full_drill(servers):
    """The demo's drill on a loopback emulator: all five questions answered yes on that target."""
    target, api = servers
    drill = DrillParams.model_validate({"kill": KILL, "restore": ROLLBACK, "previous_version": demo.PREVIOUS_VERSION,
                                        "recovery_timeout_s": 10, "request_timeout_s": 10})
    result = run_drill(target.url, drill, api_base_url=api.url)
    assert {a["answer"] for a in result["answers"].values()} == {"yes"}, result["steps"]
    return target, result


def _unshown_steady(demos, tmp_path):
    """steady with its incidents' field preservation left blank: recovery not shown → dual-circuit."""
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    header, rows = csv_rows(paths["incidents"])
    write_rows(paths["incidents"], header, [dict(r, fields_preserved="") for r in rows])
    return paths


def _with_drill(paths, drill):
    params = load_review_params([paths["params"]])
    data = load_review(params)
    return decide_from_axes(data.params, analyse(data, drill), today=TODAY)


# --- 5. the drill proves the deployment ------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, why", [
    pytest.param({"emulator": True, "model_name": "kimi-k3"}, "embedded emulator", id="the-embedded-emulator"),
    pytest.param({"emulator": False, "model_name": "kimi-k3-prod"}, "not the reviewed model kimi-k3-prod",
                 id="another-model"),
    pytest.param({"emulator": False, "model_name": "kimi-k3", "instances": ("gpu-node-1:8000",)},
                 "none of the deployment's instances gpu-node-1:8000", id="another-address"),
])
def test_attack_a_drill_on_another_target_answers_nothing_about_the_deployment(demos, tmp_path, full_drill, kw,
                                                                               why):
    """The drill's five yes come from a server that is not the reviewed deployment: every answer about the
    deployment is "not shown", the incidents stay "recovery not shown" (dual-circuit, never renew)."""
    target, result = full_drill
    paths = _unshown_steady(demos, tmp_path)
    assert review(paths)[0].decision == "dual-circuit"
    proves, reason = is_deployment(result, addresses=(target.url,), **kw)
    assert not proves and why in reason
    drill = for_deployment(result, proves, reason)
    assert {a["answer"] for a in drill["answers"].values()} == {"not shown"}
    assert {a["answer"] for a in drill["deployment"]["observed"].values()} == {"yes"}  # kept apart, not counted
    d = _with_drill(paths, drill)
    assert d.decision == "dual-circuit", d.reasons
    assert "neither the drill nor the incident log shows: fields_preserved" in text(d)
    assert "0/5 about the reviewed deployment" in text(d) and why in text(d)


def test_a_drill_on_the_deployment_itself_answers_for_it(demos, tmp_path, full_drill):
    target, result = full_drill
    host_port = target.url.removeprefix("http://")
    proves, reason = is_deployment(result, emulator=False, model_name="kimi-k3", instances=(host_port,),
                                   addresses=(target.url,))
    assert proves and "serves the reviewed model kimi-k3" in reason
    drill = for_deployment(result, proves, reason)
    d = _with_drill(copy_scenario(demos["steady"], tmp_path / "steady"), drill)
    assert d.finding("stability.recoverable").outcome is True
    # the drill answers for the deployment, never for a logged incident that leaves its own answer blank (issue 44)
    blank = _with_drill(_unshown_steady(demos, tmp_path / "blank"), drill).finding("stability.recoverable")
    assert blank.outcome is None and "INC-001 (fields_preserved)" in blank.sentence


def test_an_unchecked_drill_counts_for_nothing():
    """run_drill's own result, never checked against the deployment, answers nothing about it."""
    drill = {**not_run("x"), "answers": {q: {"question": q, "answer": "yes", "evidence": "x"} for q in QUESTIONS},
             "deployment": {"is_deployment": False, "why": "not checked against the reviewed deployment"}}
    stability = analyse_stability([], RenewalRules(), drill)
    assert stability.recoverable is None and set(stability.not_shown) == set(QUESTIONS)


@pytest.mark.slow
def test_attack_a_kill_after_the_stream_ended_shows_no_in_flight_task(servers):
    """The kill's first step only waits until the streamed task has finished: nothing was in flight when the engine
    died, so "in-flight tasks resumed or cancelled" is not shown (it used to read the finished task as yes)."""
    target, _ = servers
    drill = DrillParams.model_validate({"kill": [{"argv": ["true"], "wait_s": 6}, *KILL], "restore": ROLLBACK,
                                        "recovery_timeout_s": 10, "request_timeout_s": 10})
    result = run_drill(target.url, drill)
    answer = result["answers"]["in_flight_resumed_or_cancelled"]
    assert result["in_flight_at_kill"] is False and answer["answer"] == "not shown", result["steps"]
    assert "no request was observed in flight when the kill ran" in answer["evidence"]
    assert result["answers"]["detected_automatically"]["answer"] == "yes"  # the kill itself did work


@pytest.mark.parametrize("outcome", ["finished", "error", "cut"])
def test_in_flight_needs_a_request_in_flight_at_the_kill(outcome):
    fields = {"call": {"reasoning": True, "content": False, "tool_calls": True},
              "answer": {"reasoning": True, "content": True, "tool_calls": False}}
    seen = DrillObservation(detected=True, detect_s=0.2, health_after_kill="HTTP 503", task_outcome=outcome,
                    task_detail="finish_reason length", restore_steps=1, restored=True, recovery_s=1.0,
                    version_before="0.33.0", version_after="0.32.0", previous_version=None, first_after_status=200,
                    resumed_status=200, before_fields=fields, after_fields=fields, failover=None, timeout_s=10.0,
                    in_flight_at_kill=False)
    assert answer_questions(seen)["in_flight_resumed_or_cancelled"].answer == "not shown"


# --- 5. a live run of the same tasks: transport and authentication are no quality ------------------------------------

@pytest.fixture(scope="module")
def live_runs(tmp_path_factory):
    """`k3 paths` on the built-in task set: the API path an emulator that wants a key never sent (HTTP 401 on every
    request), or a port nobody listens on."""
    import socket

    from k3lib.axes.paths import load_paths_params, read_paths_record, run_paths
    from k3lib.core.store import RunStore

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    good = emulator.start_emulator(emulator.EmulatorConfig.from_profile("demo", time_scale=0.02), port=0)
    keyed = emulator.start_emulator(emulator.EmulatorConfig.from_profile("demo", time_scale=0.02, api_key="k3y"),
                                    port=0)
    out = {}
    try:
        for name, api in (("auth", keyed.url), ("transport", closed)):
            folder = tmp_path_factory.mktemp(name)
            f = folder / "paths.yaml"
            f.write_text(yaml.safe_dump({"paths": {
                "task_set": "builtin", "currency": "EUR",
                "retry": {"max_retries": 0, "timeout_s": 10, "backoff_s": 0.01},
                "endpoints": {"self_hosted": {"base_url": good.url, "model": "kimi-k3", "concurrency": 3},
                              "api": {"base_url": api, "model": "kimi-k3", "concurrency": 3,
                                      "connect_timeout_s": 2}}}}), encoding="utf-8")
            store = RunStore.create(folder / "out")
            run_paths(load_paths_params([f]), store)
            out[name] = (store.root, read_paths_record(store.root))
    finally:
        good.stop()
        keyed.stop()
    return out


def _live_review(paths, root, record, sets=()):
    task_set = next(x.sha256 for x in record.fixed if x.name == "task_set")
    params = load_review_params([paths["params"]], [f"review.live_paths={root}",
                                                    f"review.fixed.task_set.live_sha256={task_set}",
                                                    "review.rules.min_sample_tasks=6", *sets])
    data = load_review(params)
    return decide_from_axes(data.params, analyse(data), today=TODAY, live=record)


@pytest.mark.parametrize("which, kind", [
    pytest.param("auth", "authentication (HTTP 401)", id="api-key-never-sent"),
    pytest.param("transport", "transport (TargetUnreachable)", id="nothing-listening"),
])
def test_attack_an_api_that_never_answered_is_no_quality_miss(demos, tmp_path, live_runs, which, kind):
    """poor exits to the API on the task log; a live run whose API path failed every task on authentication or
    transport used to read as "the API misses the quality rule" (dual-circuit). It is inconclusive: the failures
    are set aside and counted, and exit-to-api is neither blocked nor backed by it."""
    root, record = live_runs[which]
    api = [t for t in record.tasks if t.path == "api"]
    assert api and all(t.status == "failed" for t in api)
    paths = copy_scenario(demos["poor"], tmp_path / "poor")
    d = _live_review(paths, root, record)
    assert d.decision == "exit-to-api" and d.rule == "exit.quality-use-recovery", d.reasons
    live = d.finding("comparison.live")
    assert live.outcome is None and live.measured["set_aside"] == {"api": {kind: len(api)}}
    assert "set aside as transport or authentication failures, not quality misses" in live.sentence
    assert "it neither allows nor blocks exit-to-api" in live.sentence


@pytest.mark.parametrize("sets, needle", [
    pytest.param(["review.fixed.task_set.live_sha256=" + "ab" * 32], "not the review's abababababab", id="other-set"),
    pytest.param(["review.deployment.model_name=kimi-k3-prod"], "not the reviewed kimi-k3-prod", id="other-model"),
])
def test_a_live_run_of_another_task_set_or_model_is_not_read(demos, tmp_path, live_runs, sets, needle):
    root, record = live_runs["auth"]
    paths = copy_scenario(demos["poor"], tmp_path / "poor")
    d = _live_review(paths, root, record, sets)
    live = d.finding("comparison.live")
    assert live.outcome is None and needle in live.sentence and "is not the review's" in live.sentence


def test_a_live_run_on_too_few_tasks_is_inconclusive(demos, tmp_path, live_runs):
    """The built-in set's 6 tasks at the default minimum of 30: neither allows nor blocks exit."""
    root, record = live_runs["auth"]
    paths = copy_scenario(demos["poor"], tmp_path / "poor")
    d = _live_review(paths, root, record, ["review.rules.min_sample_tasks=30"])
    assert d.decision == "exit-to-api" and d.finding("comparison.live").outcome is None


# --- 6. robust figures -------------------------------------------------------------------------------------------------

def test_attack_one_task_with_100000_retries_moves_no_mean(demos, tmp_path):
    """One self-hosted task of idle-heavy (reduce) with 100,000 retries: counted and named, its retries bounded by
    the policy (a mean of 100,000 / n would have flipped the retries rule), the decision unchanged."""
    paths = copy_scenario(demos["idle-heavy"], tmp_path / "idle")
    before = review(paths)[1]["production"]
    header, rows = csv_rows(paths["tasks"])
    i = next(i for i, r in enumerate(rows) if r["path"] == "self-hosted" and r["retries"] == "0"
             and r["category"] == "agent")
    rows[i] = dict(rows[i], retries="100000")
    write_rows(paths["tasks"], header, rows)
    d, axes = review(paths)
    prod = axes["production"]
    assert d.decision == "reduce", d.reasons
    assert prod.over_retry_policy == before.over_retry_policy + 1
    assert rows[i]["task_id"] in prod.over_retry_policy_tasks and rows[i]["task_id"] in text(d)
    cap = prod.retry_policy_max_retries
    assert prod.losses.retries_per_task <= before.losses.retries_per_task + cap / prod.tasks + 1e-3
    assert prod.accepted <= before.accepted  # a task the policy would have stopped is no delivery


def test_attack_failures_marked_off_policy_are_still_no_deliveries(demos, tmp_path):
    """poor's rejected tasks given 99 retries, hoping to have them set aside as off-policy: a task the policy would
    have stopped is not accepted under it — the acceptance rate does not rise."""
    paths = copy_scenario(demos["poor"], tmp_path / "poor")
    before = review(paths)[1]["production"]
    header, rows = csv_rows(paths["tasks"])
    write_rows(paths["tasks"], header, [dict(r, retries="99") if r["accepted"] == "false" else r for r in rows])
    d, axes = review(paths)
    assert d.decision == "exit-to-api" and axes["production"].acceptance_rate <= before.acceptance_rate


@pytest.mark.parametrize("change, needle", [
    pytest.param({"accepted": "true", "timed_out": "true"}, "column timed_out: true on an accepted task",
                 id="accepted-and-timed-out"),
    pytest.param({"accepted": "true", "finished_at": ""}, "column finished_at: blank on an accepted task",
                 id="accepted-never-finished"),
    pytest.param({"started_at": ""}, "column started_at: blank on a task that finished", id="finished-never-started"),
])
def test_a_contradictory_row_is_refused_with_its_line(demos, tmp_path, change, needle):
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    header, rows = csv_rows(paths["tasks"])
    i = next(i for i, r in enumerate(rows) if r["finished_at"])
    rows[i] = dict(rows[i], **change)
    write_rows(paths["tasks"], header, rows)
    with pytest.raises(BadInputError) as ei:
        review(paths)
    assert f"line {i + 2}, {needle}" in ei.value.one_line()


def _task(tid, path, accepted, tools=0, category="agent"):
    t = dt.datetime(2026, 8, 1, 10, tzinfo=dt.timezone.utc)
    from k3lib.renewal.inputs import TaskRecord

    return TaskRecord(task_id=tid, category=category, path=path, submitted_at=t, started_at=t,
                      finished_at=t + dt.timedelta(minutes=5), accepted=accepted, retries=0, tool_call_errors=tools,
                      timed_out=False, manual_correction=False, routed_to_api=False, wait_s=0)


def test_three_shared_tasks_decide_no_equivalence():
    """3 tasks on both paths, the API accepting all three and self-hosting none: a point estimate would call the
    API better; on fewer than min_sample_tasks the equivalence is not shown."""
    tasks = [_task(f"T{i}", "self-hosted", False) for i in range(3)] + [_task(f"T{i}", "api", True) for i in range(3)]
    comparison = compare_paths(tasks, [], rules=RenewalRules())
    assert comparison["paired_tasks"] == 3 and comparison["api_equivalent"] is None
    assert comparison["difference"] is None and comparison["api"]["acceptance_low"] < 0.5


def test_too_few_tasks_are_no_firm_exit(demos, tmp_path):
    """poor (exit-to-api) cut to 20 tasks of its task set: the production is inconclusive with its interval —
    never a firm exit (issue 36), never renew."""
    paths = copy_scenario(demos["poor"], tmp_path / "poor")
    header, rows = csv_rows(paths["tasks"])
    own = [r for r in rows if r["path"] == "self-hosted"]
    days = {}
    for r in own:  # one task a day keeps the log's coverage of the window
        days.setdefault(r["submitted_at"][:10], r)
    write_rows(paths["tasks"], header, list(days.values()))
    d, axes = review(paths)
    assert axes["production"].tasks == 21 and axes["production"].shown is False
    assert d.decision == "dual-circuit" and d.rule == "dual.quality-missed", d.reasons
    assert "useful production is not shown to meet the rule" in text(d) and "fewer than 30" in text(d)
    assert "95 % " in d.finding("production.quality").sentence  # the interval is stated


def test_loosened_rules_are_listed_in_the_decision_and_its_condition(demos, tmp_path):
    """Idle capacity renewed by loosening the load rules: allowed, but said wherever the decision is read."""
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    sets = ["review.rules.min_acceptance_rate=0.5", "review.rules.large_idle_share_max=0.9",
            "review.rules.min_sample_tasks=10"]
    d, _ = review(paths, sets)
    loose = d.finding("review.loosened")
    assert {x["name"] for x in loose.measured["rules"]} == {"rules.min_acceptance_rate", "rules.large_idle_share_max",
                                                            "rules.min_sample_tasks"}
    assert all(x["origin"].startswith("--set") for x in loose.measured["rules"])
    assert "rules.min_acceptance_rate 0.5 (built-in 0.8" in text(d)
    assert "decided on loosened rules — " in d.condition and "rules.min_acceptance_rate 0.5 (built-in 0.8)" in d.condition
    tighter, _ = review(paths, ["review.rules.min_acceptance_rate=0.95"])
    assert tighter.finding("review.loosened") is None  # a stricter rule is no loosening
