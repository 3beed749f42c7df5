"""The capacity axis' trust in its own numbers: the client's self-calibration gate before the steps (a step above a
failed calibration keeps its counts, its latency figures are marked invalid) and the client/server cross-check of
every step and the soak (counts agree on a healthy, isolated emulator; another client's requests show up)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import yaml

import k3lib
import k3lib.axes.capacity as capacity
from k3lib.io.calibration import CalibrationReport, LoopLagReport, calibration_dict
from k3lib.axes.capacity.analysis import judge_step, saturation_point
from k3lib.axes.capacity.result import CapacityResult
from k3lib.axes.capacity.run import CapacityRunner
from k3lib.axes.capacity.shape import plan_capacity
from k3lib.axes.capacity.trust import (calibration_concurrencies, calibration_rounds, cross_check_data,
                                  cross_check_label, failed_report, gate_step, governing_report, known_timing)
from k3lib.io.client import run_sync
from k3lib.io.crosscheck import CrossCheckItem, cross_check
from k3lib.verdict.decision import level_for
from k3lib.emulator import EmulatorConfig, start_emulator
from k3lib.io.load import summarize
from k3lib.io.metrics import Snapshot
from k3lib.core.params import load_params

ROOT = Path(__file__).resolve().parents[1]
PARAMS = str(ROOT / "parameters" / "emulator.yaml")
FAST = ["axes.capacity.step_duration_s=1.0", "axes.capacity.soak_duration_s=1.5",
        "axes.capacity.context_lengths_tokens=[1000]", "axes.capacity.sample_interval_s=0.1",
        "axes.environment.timeout_s=3"]
LAG = LoopLagReport(1.0, 5.0, 10, 0.1, 0.2, 0.3)
TIMING = {"known_ttft_ms": 20.0, "known_itl_ms": 5.0, "chunks": 20}


def _report(concurrency: int, valid: bool) -> CalibrationReport:
    rep = failed_report(concurrency, TIMING, 10.0, "forced")
    return rep if not valid else CalibrationReport(**{**calibration_dict(rep), "loop_lag": LAG, "valid": True,
                                                      "reason": "client timing error within bound"})


# --- pure: which calibration speaks for which step ------------------------------------------------------------


@pytest.mark.parametrize("reports, concurrency, governing, valid", [
    pytest.param([(4, True), (5, True)], 1, 4, True, id="below-all-passed-nearest-above"),
    pytest.param([(4, True), (5, True)], 5, 5, True, id="at-highest"),
    pytest.param([(4, True), (5, False)], 4, 4, True, id="below-the-failure-trusted"),
    pytest.param([(4, True), (5, False)], 5, 5, False, id="at-the-failure"),
    pytest.param([(4, False), (5, True)], 5, 4, False, id="above-a-failure-not-trusted"),
    pytest.param([(4, False), (5, False)], 2, None, True, id="below-a-failure-uncalibrated"),
    pytest.param([(1, True)], 8, 1, True, id="above-all-passed-highest"),
    pytest.param([], 4, None, True, id="not-calibrated"),
])
def test_governing_report_and_gate(reports, concurrency, governing, valid):
    reps = [_report(c, ok) for c, ok in reports]
    got = governing_report(reps, concurrency)
    assert (got.concurrency if got else None) == governing
    fields = gate_step(None, reps, concurrency)
    assert fields["latency_valid"] is valid and fields["calibrated_at"] == governing
    assert (fields["invalid_reason"] is None) is valid
    if not valid:
        assert f"concurrency {governing}" in fields["invalid_reason"]


def test_gate_step_goes_through_gate_phase_on_a_phase_summary():
    summary = summarize([], name="c8", kind="closed-loop", target_url="http://127.0.0.1:1", started_wall_ns=0,
                        duration_s=1.0, max_requests=1, max_duration_s=1.0, loop_lag_ms_p99=3.5)
    bad = gate_step(summary, [_report(4, False)], 8)
    assert bad == {"latency_valid": False, "invalid_reason": bad["invalid_reason"], "calibrated_at": 4,
                   "loop_lag_p99_ms": 3.5}
    assert "client self-calibration failed at concurrency 4" in bad["invalid_reason"]
    assert gate_step(summary, [_report(4, True)], 2)["latency_valid"] is True


@pytest.mark.parametrize("records, ttft, itl", [
    pytest.param([], 50.0, 10.0, id="nothing-measured-defaults"),
    pytest.param([{"ok": True, "ttft_ms": 3.0, "itl_ms": [0.4, 0.5]}], 20.0, 5.0, id="fast-emulator-clamped-up"),
    pytest.param([{"ok": True, "ttft_ms": 9000.0, "itl_ms": [80.0]}], 500.0, 50.0, id="long-prefill-clamped-down"),
    pytest.param([{"ok": True, "ttft_ms": 120.0, "itl_ms": [22.0, 24.0]}, {"ok": False, "ttft_ms": 1.0}], 120.0, 23.0,
                 id="median-of-ok-records"),
])
def test_known_timing_follows_the_target_within_cheap_bounds(records, ttft, itl):
    t = known_timing(records)
    assert (t["known_ttft_ms"], t["known_itl_ms"], t["chunks"]) == (ttft, itl, 20)


@pytest.mark.parametrize("concurrency, timing, rounds", [
    pytest.param(4, TIMING, 3, id="few-streams-more-rounds"),
    pytest.param(64, TIMING, 1, id="many-streams-one-round"),
    pytest.param(1, {"known_ttft_ms": 500.0, "known_itl_ms": 50.0, "chunks": 20}, 2, id="slow-schedule-time-bound"),
])
def test_calibration_rounds(concurrency, timing, rounds):
    assert calibration_rounds(concurrency, timing) == rounds


def test_plan_calibrates_planned_and_highest_step_and_budgets_it():
    on = plan_capacity(load_params([PARAMS], []))
    off = plan_capacity(load_params([PARAMS], ["axes.capacity.calibrate=false"]))
    assert on.calibration_concurrencies == calibration_concurrencies(4, on.steps) == (4, 5)
    assert off.calibration_concurrencies == ()
    assert on.phase_budget_s("concurrency") > off.phase_budget_s("concurrency")
    demo = yaml.safe_load(Path(PARAMS).read_text())["axes"]["capacity"]
    assert on.capacity.calibration_server == demo["calibration_server"] == "thread"
    assert on.capacity.calibration_max_error_ms == demo["calibration_max_error_ms"] > 10  # lenient on the shared demo cores
    from k3lib.core.params import CapacityParams

    real = CapacityParams()  # a real deployment: calibrated, 10 ms, a server that does not share the client's GIL
    assert real.calibrate and real.calibration_max_error_ms == 10 and real.calibration_server == "process"


@pytest.mark.parametrize("step", [
    pytest.param({"ok": 10, "preemptions": 0, "waiting_mean": 0.0}, id="clean"),
    pytest.param({"ok": 10, "preemptions": 2, "waiting_mean": 0.0}, id="preempted"),
    pytest.param({"ok": 10, "preemptions": 0, "waiting_mean": 0.1, "queue_p95_ms": 900.0}, id="queued"),
])
def test_an_invalid_latency_gate_does_not_move_the_saturation_judgement(step):
    """The steps are judged on the server's counters only: a step whose client latency is not trusted is held or
    not exactly as it would be if it were, and its counts and preemptions still count."""
    trusted = judge_step({**step, "latency_valid": True, "ttft_p95_ms": 5.0}, queue_objective_ms=500.0,
                         waiting_tolerance=0.5)
    untrusted = judge_step({**step, "latency_valid": False, "ttft_p95_ms": 99999.0}, queue_objective_ms=500.0,
                           waiting_tolerance=0.5)
    assert trusted == untrusted


# --- pure: the cross-check bounds ----------------------------------------------------------------------------


@pytest.mark.parametrize("item, agrees", [
    pytest.param(CrossCheckItem("x", 10, 10, 0, "requests"), True, id="exact"),
    pytest.param(CrossCheckItem("x", 10, 12, 0, "requests", server_extra=2), True, id="server-extra-within"),
    pytest.param(CrossCheckItem("x", 10, 13, 0, "requests", server_extra=2), False, id="server-extra-beyond"),
    pytest.param(CrossCheckItem("x", 10, 9, 0, "requests", server_extra=2), False, id="extra-is-one-sided"),
    pytest.param(CrossCheckItem("x", 10, 8, 0, "requests", server_short=2), True, id="server-short-within"),
    pytest.param(CrossCheckItem("x", 10, 11, 0, "requests", server_short=2), False, id="short-is-one-sided"),
])
def test_one_sided_bounds(item, agrees):
    assert item.agrees is agrees


def _exposition(stop: float, length: float, abort: float, prompt: float, gen: float) -> Snapshot:
    m = 'model_name="m"'
    return Snapshot.from_text(
        f'vllm:request_success_total{{finished_reason="stop",{m}}} {stop}\n'
        f'vllm:request_success_total{{finished_reason="length",{m}}} {length}\n'
        f'vllm:request_success_total{{finished_reason="abort",{m}}} {abort}\n'
        f'vllm:prompt_tokens_total{{{m}}} {prompt}\nvllm:generation_tokens_total{{{m}}} {gen}\n')


def _rec(ok: bool, *, sent: bool = True, prompt: int = 100, gen: int = 10) -> SimpleNamespace:
    return SimpleNamespace(ok=ok, sent_ns=1 if sent else None, prompt_tokens=prompt if ok else None,
                           completion_tokens=gen if ok else None, ttft_ms=None, e2e_ms=None)


# 3 finished ok, 2 cut at the deadline (sent), 1 cancelled before it was sent
WINDOW = [_rec(True), _rec(True), _rec(True), _rec(False), _rec(False), _rec(False, sent=False)]


@pytest.mark.parametrize("after, disagree", [
    pytest.param(_exposition(3, 0, 2, 500, 35), set(), id="cut-requests-aborted-on-the-server"),
    pytest.param(_exposition(2, 2, 1, 500, 45), set(), id="a-cut-request-finished-on-the-server"),
    pytest.param(_exposition(3, 0, 1, 400, 32), set(), id="a-disconnect-not-yet-registered"),
    pytest.param(_exposition(6, 0, 2, 800, 60), {"requests finished", "requests sent", "prompt tokens",
                                                 "generation tokens"}, id="three-foreign-requests"),
    pytest.param(_exposition(4, 0, 2, 500, 45), {"requests sent"}, id="one-foreign-request-caught-by-the-sum"),
    pytest.param(_exposition(3, 0, 2, 900, 30), {"prompt tokens"}, id="prompt-tokens-beyond-the-cut-allowance"),
])
def test_cross_check_counts_with_requests_cut_at_the_deadline(after, disagree):
    check = cross_check(WINDOW, _exposition(0, 0, 0, 0, 0), after)
    assert {i.quantity for i in check.disagreements} == disagree
    data = cross_check_data(check)
    assert data["counts_agree"] is (not disagree)
    label = cross_check_label(data)
    assert label.startswith("counts disagree") if disagree else label == "agrees"


def test_cross_check_without_server_counters_is_not_a_disagreement():
    data = cross_check_data(cross_check(WINDOW, Snapshot.from_text(""), Snapshot.from_text("")))
    assert data["agrees"] is None and data["counts_agree"] is None and cross_check_label(data) == "n/a"
    assert cross_check_label(cross_check_data(None, "scrape failed")) == "n/a (scrape failed)"


# --- findings from a run folder's content (no load) ------------------------------------------------------------


def _result(calibration, steps, soak=None):
    phases = [{"phase": "concurrency", "status": "done", "start_wall": 0.0, "end_wall": 1.0, "note": ""}]
    run = {"plan": {}, "phases": phases, "steps": steps, "calibration": calibration, "soak": soak}
    return CapacityResult(run, [], [], [], None, None)


def _step(c, latency_valid, counts_agree=True):
    cc = {"agrees": counts_agree, "counts_agree": counts_agree,
          "disagreements": [] if counts_agree else ["requests sent"],
          "items": [{"quantity": "requests sent", "client": 10.0, "server": 10.0 if counts_agree else 25.0,
                     "diff": 0.0 if counts_agree else -15.0, "unit": "requests"}]}
    return {"concurrency": c, "status": "done", "held": True, "ok": 10, "preemptions": 0,
            "latency_valid": latency_valid, "cross_check": cc}


@pytest.mark.parametrize("calibration, steps, status, needle", [
    pytest.param({"enabled": False, "ran": False}, [_step(4, None)], "info", "not calibrated", id="off"),
    pytest.param({"enabled": True, "ran": True, "max_error_ms": 10,
                  "summary": [{"concurrency": 4, "valid": True}, {"concurrency": 5, "valid": True}]},
                 [_step(4, True), _step(5, True)], "pass", "up to concurrency 5", id="passed"),
    pytest.param({"enabled": True, "ran": True, "max_error_ms": 10,
                  "summary": [{"concurrency": 4, "valid": True},
                              {"concurrency": 5, "valid": False, "reason": "ITL error p99 31 ms > bound 10 ms"}]},
                 [_step(4, True), _step(5, False)], "warn", "at or above 5 are marked invalid", id="failed-at-5"),
])
def test_calibration_finding(calibration, steps, status, needle):
    params = load_params([PARAMS], [])
    f = next(f for f in capacity.iter_findings(_result(calibration, steps), params)
             if f.rule == "capacity.client_calibration")
    assert f.status == status and needle in f.message
    if status == "warn":
        assert level_for(f)[0] == "limited-observation" and f.evidence["invalid_steps"] == [5]
        assert capacity.implied_decision([f]) == "limited-observation"


def test_cross_check_finding_names_the_disagreeing_window():
    params = load_params([PARAMS], [])
    result = _result({"enabled": False}, [_step(1, None), _step(4, None, counts_agree=False)],
                     soak={"cross_check": _step(4, None)["cross_check"]})
    f = next(f for f in capacity.iter_findings(result, params) if f.rule == "capacity.cross_check")
    assert f.status == "warn" and level_for(f)[0] == "limited-observation"
    assert "1 of 3 load window(s): concurrency 4 (requests sent: client 10, server 25)" in f.message
    table = capacity.steps_table(result)
    assert list(table["cross_check"]) == ["agrees", "counts disagree: requests sent (client 10, server 25)"]
    assert "latency_valid" in table.columns and "latency_note" in table.columns


# --- the runner's calibration on its own (a real socket, no load on the target) ------------------------------


def _runner(tmp_path, url, *extra):
    ctx = k3lib.open_axis("capacity", PARAMS, [f"target.base_url={url}", *FAST, *extra], str(tmp_path / "run"))
    return CapacityRunner(ctx)


def test_runner_calibrates_against_a_local_known_timing_server(tmp_path, emulator):
    runner = _runner(tmp_path, emulator.url)
    t0 = time.monotonic()
    asyncio.run(runner._calibrate())
    elapsed = time.monotonic() - t0
    cal = runner.calibration
    assert [r["concurrency"] for r in cal["summary"]] == [4, 5]
    assert all(r["valid"] for r in cal["summary"]), cal["summary"]
    assert [r["requests"] for r in cal["summary"]] == [4 * 3, 5 * 3]  # rounds for ≥ 200 gaps each
    assert cal["reports"][0]["url"].startswith("http://127.0.0.1:") and cal["error"] is None
    assert elapsed < 5, elapsed  # cheap: a couple of seconds at most
    # kept in the run folder straight away, so a killed run keeps it
    assert runner.store.read_json("evidence/capacity/run.json")["calibration"]["summary"] == cal["summary"]


def test_a_calibration_that_cannot_run_fails_its_steps(tmp_path, emulator, monkeypatch):
    from k3lib.axes.capacity import calibration as run_mod

    def refuse(self, timeout_s=20.0):
        raise RuntimeError("known-timing server did not start")

    monkeypatch.setattr(run_mod.KnownTimingServer, "start", refuse)
    runner = _runner(tmp_path, emulator.url)
    asyncio.run(runner._calibrate())
    assert runner.calibration["error"] == "RuntimeError: known-timing server did not start"
    assert [r["valid"] for r in runner.calibration["summary"]] == [False, False]
    assert "calibration did not complete" in runner.calibration["summary"][0]["reason"]
    assert gate_step(None, runner._reports, 4)["latency_valid"] is False


def test_calibration_off_runs_nothing(tmp_path, emulator):
    runner = _runner(tmp_path, emulator.url, "axes.capacity.calibrate=false")
    asyncio.run(runner._calibrate())
    assert runner.calibration["enabled"] is False and runner._reports == []


# --- whole runs against the emulator over a real socket -------------------------------------------------------


def _emulator():
    return start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0)


def _run(tmp_path, url, dcgm, *extra):
    ctx = k3lib.open_axis("capacity", PARAMS, [f"target.base_url={url}", "target.gpu_metrics.source=dcgm",
                                               f"target.gpu_metrics.url={dcgm}", *FAST, *extra],
                          str(tmp_path / "run"))
    result = capacity.run_capacity(ctx)
    return ctx, result, ctx.record(capacity.capacity_record(result, ctx))


def _windows(result):
    return [s for s in result.steps if s.get("status") != "skipped"] + [result.run["soak"]]


@pytest.mark.slow
def test_healthy_run_is_calibrated_and_client_and_server_agree(tmp_path):
    with _emulator() as h:
        ctx, result, record = _run(tmp_path, h.url, h.dcgm_url)
    cal = record.by_rule("capacity.client_calibration")
    assert cal.status == "pass", cal.message
    assert record.data["calibration"]["ran"] and all(r["valid"] for r in record.data["calibration"]["summary"])
    assert all(s["latency_valid"] for s in _windows(result))
    for w in _windows(result):
        cc = w["cross_check"]
        assert cc["counts_agree"] is True, cc
        by = {i["quantity"]: i for i in cc["items"]}
        # requests cut at the window's deadline may still finish on the server: it can count more, never fewer
        assert by["requests finished"]["client"] == w["ok"] <= by["requests finished"]["server"]
        assert by["requests sent"]["agrees"] is True, by["requests sent"]
        assert by["requests sent"]["client"] == by["requests sent"]["server"] > 0
    assert record.by_rule("capacity.cross_check").status in ("pass", "info")  # info: latency only, never counts
    assert set(record.data["cross_check"]) >= {"concurrency 4", "the soak"}
    assert record.status == "pass" and record.data["implied_decision"] == "production"
    assert (capacity.steps_table(result)["cross_check"] != "n/a").all()


@pytest.mark.slow
def test_an_absurd_calibration_bound_marks_the_steps_invalid_but_keeps_the_counts(tmp_path):
    with _emulator() as h:
        ctx, result, record = _run(tmp_path, h.url, h.dcgm_url, "axes.capacity.calibration_max_error_ms=0.5")
    cal = record.by_rule("capacity.client_calibration")
    assert cal.status == "warn" and level_for(cal)[0] == "limited-observation"
    assert "at concurrency 4 exceeds its bound" in cal.message and "marked invalid, not trusted" in cal.message
    by_c = {s["concurrency"]: s for s in result.steps}
    assert [by_c[c]["latency_valid"] for c in (1, 2, 4, 5)] == [True, True, False, False]
    assert "client self-calibration failed at concurrency 4" in by_c[5]["invalid_reason"]
    assert result.run["soak"]["latency_valid"] is False
    # the saturation judgement rests on the server's counters: the invalid steps still hold and still count
    assert by_c[4]["held"] and record.data["saturation_point"] == saturation_point(result.steps) >= 4
    assert record.by_rule("capacity.saturation").status == "pass"
    assert record.status == "warn" and record.data["implied_decision"] == "limited-observation"
    table = capacity.steps_table(result)
    assert list(table["latency_valid"]) == [True, True, False, False]
    assert table["latency_note"].iloc[2].startswith("client self-calibration failed")


@pytest.mark.slow
def test_foreign_load_during_the_steps_is_recorded_as_a_disagreement(tmp_path):
    with _emulator() as h:
        stop = threading.Event()
        sent = []

        def other_tenant():
            # a second client on the same target: small requests, one at a time, bounded in count and time
            deadline = time.monotonic() + 60
            with httpx.Client(base_url=h.url, timeout=10, trust_env=False) as http:
                model = http.get("/v1/models").json()["data"][0]["id"]
                body = {"model": model, "messages": [{"role": "user", "content": "someone else"}], "max_tokens": 4}
                while not stop.is_set() and len(sent) < 2000 and time.monotonic() < deadline:
                    if http.post("/v1/chat/completions", json=body).status_code == 200:
                        sent.append(1)

        ctx = k3lib.open_axis("capacity", PARAMS, [f"target.base_url={h.url}", "target.gpu_metrics.source=dcgm",
                                                   f"target.gpu_metrics.url={h.dcgm_url}", *FAST],
                              str(tmp_path / "run"))
        runner = CapacityRunner(ctx)
        tenant = threading.Thread(target=other_tenant, daemon=True)

        original = runner._concurrency

        async def concurrency_with_a_neighbour():
            tenant.start()
            try:
                return await original()
            finally:
                stop.set()

        runner._concurrency = concurrency_with_a_neighbour
        run_sync(runner.run())
        tenant.join(timeout=15)
        result = capacity.read_capacity(ctx.store)
        record = capacity.capacity_record(result, ctx)
    assert sent, "the other tenant sent nothing"
    disagreeing = [s for s in result.steps if s["cross_check"]["counts_agree"] is False]
    assert disagreeing, [s["cross_check"]["disagreements"] for s in result.steps]
    for s in disagreeing:
        by = {i["quantity"]: i for i in s["cross_check"]["items"]}
        assert by["requests sent"]["server"] > by["requests sent"]["client"]  # more than the kit sent
    f = record.by_rule("capacity.cross_check")
    assert f.status == "warn" and level_for(f)[0] == "limited-observation"
    assert "another client was loading the target" in f.message
    assert any(cell.startswith("counts disagree") for cell in capacity.steps_table(result)["cross_check"])


# --- load over worker processes ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_step_whose_worker_is_killed_is_degraded_and_keeps_every_finished_record(tmp_path, monkeypatch):
    """load.workers=2: a worker killed with -9 in the middle of step c4 loses none of its finished records (each is in
    requests.jsonl), and the step says so and is not held; the other steps and the calibration ran over 2 workers."""
    import functools
    import os
    import signal

    from k3lib.axes.capacity import state as run_mod
    from k3lib.io.workers import WorkerPool

    journal = tmp_path / "journal"
    journal.mkdir()
    monkeypatch.setattr(run_mod, "WorkerPool", functools.partial(WorkerPool, journal_dir=journal))
    killed: list[int] = []
    closed = CapacityRunner._closed

    async def closed_with_a_kill(self, client, bodies, *, label, **kw):
        if label == "c4":
            pool = await self._workers()
            killed.append(pool.pids[1])
            asyncio.get_running_loop().call_later(0.5, os.kill, pool.pids[1], signal.SIGKILL)
        return await closed(self, client, bodies, label=label, **kw)

    monkeypatch.setattr(CapacityRunner, "_closed", closed_with_a_kill)
    with _emulator() as h:
        ctx, result, record = _run(tmp_path, h.url, h.dcgm_url, "load.workers=2")
    steps = {s["label"]: s for s in result.steps}
    c4 = steps["c4"]
    assert c4["workers"] == 2 and "load worker 2 of 2 was killed by signal 9 (SIGKILL)" in c4["degraded"]
    assert c4["held"] is False and c4["degraded"] in c4["why"]
    assert all(s["workers"] == 2 and s["degraded"] is None for k, s in steps.items() if k not in ("c4", "c1"))
    assert steps["c1"]["workers"] == 1  # one stream: one worker
    assert result.run["calibration"]["workers"] == 2
    assert all(r["workers"] == 2 for r in result.run["calibration"]["reports"])
    rows = [json.loads(line) for line in (ctx.store.path("evidence/capacity/requests.jsonl")).read_text().splitlines()]
    written = {r["request_id"] for r in rows if r["step"] == "c4"}
    sent_by_victim = set((journal / f"worker-{killed[0]}.ids").read_text().split())
    assert sent_by_victim and {i for i in sent_by_victim if i.startswith("c4-")} <= written
    assert len(written) == c4["sent"]
    # the typed evidence takes the new step fields
    assert record.data["steps"][[s["label"] for s in record.data["steps"]].index("c4")]["degraded"] == c4["degraded"]
