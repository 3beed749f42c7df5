"""Capacity axis, pure parts: OOM classes, real-world logs classified, the run's shape, step and soak reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import real_world_missing

from k3lib.axes.capacity import (classify_log, classify_oom, failure_kind, judge_step, memory_growth, plan_capacity,
                            saturation_point, server_config, settled_stats, soak_analysis)
from k3lib.axes.capacity.analysis import increase, linear_fit
from k3lib.axes.capacity.shape import default_lengths, default_steps
from k3lib.core.params import load_params
from k3lib.io.readers.vllm_log import parse_vllm_log

ROOT = Path(__file__).resolve().parents[1]
REAL_WORLD = ROOT.parent / "shared" / "real-world"

MIB = 1024 * 1024


# --- OOM classes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase, in_flight, ready, cls, decision", [
    pytest.param("cold-load", 0, False, "startup", "environment-rebuild", id="never-ready"),
    pytest.param("long-context", 1, True, "long-context", "capacity-extension", id="long-context-alone"),
    pytest.param("concurrency", 4, True, "concurrency", "capacity-extension", id="overlapping-step"),
    pytest.param("soak", 5, True, "concurrency", "capacity-extension", id="overlapping-soak"),
    pytest.param("concurrency", 1, True, "long-context", "capacity-extension", id="single-in-flight-step"),
    pytest.param("other", None, True, "serving", "capacity-extension", id="unknown-load"),
])
def test_classify_oom_by_phase_and_overlap(phase, in_flight, ready, cls, decision):
    got = classify_oom(phase, in_flight=in_flight, ready=ready)
    assert (got.oom_class, got.decision) == (cls, decision)
    assert got.remedy and got.basis


def _labels(real_world):
    return {k: v for k, v in json.loads((real_world / "labels.json").read_text()).items() if k.startswith("logs/")}


def _log_cases():
    if not (REAL_WORLD / "labels.json").exists():
        return [real_world_missing(None, None)]
    labels = json.loads((REAL_WORLD / "labels.json").read_text())
    return [pytest.param(name, lab, id=name) for name, lab in sorted(labels.items()) if name.startswith("logs/")]


# the corpus's serving OOMs and the "Running: N reqs" of the stats line just before each, read by hand
RUNNING_BEFORE_SERVING_OOM = {"logs/02.txt": 24, "logs/08.txt": 41}


@pytest.mark.parametrize("name, label", _log_cases())
def test_real_world_logs_are_classified_to_their_labels(real_world, name, label):
    verdict = classify_log(parse_vllm_log((real_world / name).read_text(encoding="utf-8", errors="replace")))
    if label["oom_phase"] == "startup":
        assert (verdict.kind, verdict.oom_class, verdict.decision) == ("startup-oom", "startup", "environment-rebuild")
    elif label["oom_phase"] == "serving":
        assert verdict.kind == "serving-oom"
        assert verdict.decision == "capacity-extension"
        # requests running just before the OOM decide between one long prompt and overlapping requests; the
        # counts are read by hand from the last stats line before the OOM in each log (not from the verdict)
        assert verdict.running_before == RUNNING_BEFORE_SERVING_OOM[name]
        assert verdict.oom_class == "concurrency"
    elif label["engine_dead"]:
        assert (verdict.kind, verdict.oom_class) == ("engine-death", None)
    elif label["context_rejections"]:
        assert verdict.kind == "context-rejection"
        assert verdict.context_rejections == label["context_rejections"]
    else:
        assert verdict.kind == "clean"


def test_real_world_serving_ooms_happened_with_overlapping_requests(real_world):
    """The two serving OOMs in the corpus both follow a stats line with many requests running."""
    serving = [n for n, lab in _labels(real_world).items() if lab["oom_phase"] == "serving"]
    assert serving
    for name in serving:
        verdict = classify_log(parse_vllm_log((real_world / name).read_text(encoding="utf-8", errors="replace")))
        assert verdict.running_before and verdict.running_before > 1
        assert verdict.oom_class == "concurrency"


_STATS = ("INFO 05-01 10:00:0{s} [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
          "throughput: 1.0 tokens/s, Running: {n} reqs, Waiting: 0 reqs, GPU KV cache usage: 50.0%, Prefix cache hit "
          "rate: 0.0%")
_START = ("INFO 05-01 09:59:00 [api_server.py:1] vLLM API server version 0.11.0\n"
          "INFO:     Application startup complete.\n")
_OOM = ("ERROR 05-01 10:00:09 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")


@pytest.mark.parametrize("body, kind, cls", [
    pytest.param(_START + _STATS.format(s=1, n=1) + "\n" + _OOM, "serving-oom", "long-context", id="one-running"),
    pytest.param(_START + _STATS.format(s=1, n=6) + "\n" + _OOM, "serving-oom", "concurrency", id="six-running"),
    pytest.param(_START + _OOM, "serving-oom", "serving", id="no-stats-line"),
    pytest.param("INFO 05-01 09:59:00 [api_server.py:1] vLLM API server version 0.11.0\n" + _OOM,
                 "startup-oom", "startup", id="before-ready"),
])
def test_classify_log_reads_the_load_before_the_oom(body, kind, cls):
    verdict = classify_log(parse_vllm_log(body))
    assert (verdict.kind, verdict.oom_class) == (kind, cls)


# --- the shape of a run -----------------------------------------------------------------------------------


@pytest.mark.parametrize("planned, steps", [
    pytest.param(1, (1, 2), id="1"),
    pytest.param(4, (1, 2, 4, 5), id="4"),
    pytest.param(5, (1, 2, 4, 5, 6), id="5-kimi-recipe"),
    pytest.param(16, (1, 2, 4, 8, 16, 20), id="16"),
])
def test_default_steps_climb_to_the_plan_and_one_beyond(planned, steps):
    assert default_steps(planned) == steps


def test_default_lengths_reserve_the_answer():
    assert default_lengths(4096, 64) == (1008, 2016, 3024, 4032)


def test_plan_from_the_demo_parameters_and_explicit_steps():
    params = load_params([ROOT / "parameters/emulator.yaml"], ["axes.capacity.concurrency_steps=[3, 9]"])
    plan = plan_capacity(params)
    assert plan.steps == (3, 4, 9) and plan.beyond_contract == 9 and plan.planned_concurrency == 4
    assert plan.out_of_contract_tokens > params.contract.max_context_tokens
    assert max(plan.context_lengths_tokens) <= params.contract.max_context_tokens
    assert plan.budget_s == sum(plan.model_dump()["budget_s"].values())


def test_real_defaults_are_sized_for_a_real_deployment():
    from k3lib.core.params import CapacityParams

    cap = CapacityParams()
    assert cap.step_duration_s >= 60 and cap.soak_duration_s >= 600 and cap.ready_timeout_s >= 600


# --- steps and saturation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("step, objective, held, reason", [
    pytest.param({"ok": 10, "preemptions": 0, "waiting_mean": 0.0}, None, True, None, id="clean"),
    pytest.param({"ok": 10, "preemptions": 3, "waiting_mean": 0.0}, None, False, "preemption", id="preempted"),
    pytest.param({"ok": 10, "preemptions": 0, "waiting_mean": 1.2}, None, False, "waiting", id="queueing"),
    pytest.param({"ok": 10, "preemptions": 0, "waiting_mean": 0.1, "queue_p95_ms": 900.0}, 500.0, False,
                 "objective", id="queue-above-objective"),
    pytest.param({"ok": 10, "preemptions": 0, "waiting_mean": 0.1, "queue_p95_ms": 200.0}, 500.0, True, None,
                 id="queue-within-objective"),
    pytest.param({"ok": 3, "preemptions": 0, "server_errors": 2}, None, False, "server side", id="5xx"),
    pytest.param({"ok": 0, "preemptions": None, "preemptions_sampled": 0.0}, None, False, "no request", id="nothing"),
])
def test_judge_step(step, objective, held, reason):
    ok, why = judge_step(step, queue_objective_ms=objective, waiting_tolerance=0.5)
    assert ok is held
    if reason:
        assert any(reason in w for w in why), why
    else:
        assert why == []  # a step that holds gives no reason against itself


@pytest.mark.parametrize("held, point", [
    pytest.param([True, True, True, True], 5, id="all"),
    pytest.param([True, True, False, False], 2, id="breaks-at-4"),
    pytest.param([False, True, True, True], None, id="first-fails"),
    pytest.param([True, False, True, True], 1, id="a-hole-stops-it"),
])
def test_saturation_point_is_the_highest_unbroken_step(held, point):
    steps = [{"concurrency": c, "held": h} for c, h in zip((1, 2, 4, 5), held)]
    assert saturation_point(steps) == point


def test_settled_stats_skip_the_ramp_and_count_preemptions():
    rows = [{"t_wall": t, "num_requests_waiting": 5 if t < 3 else 0, "num_requests_running": 4,
             "kv_cache_usage_perc": 0.5, "num_preemptions_total": 10 + t} for t in range(10)]
    got = settled_stats(rows, 0, 9, 0.34)
    assert got["waiting_mean"] == 0 and got["running_mean"] == 4 and got["preemptions_sampled"] == 9


# --- counters, fits, soak -----------------------------------------------------------------------------------


@pytest.mark.parametrize("values, expected", [
    pytest.param([1, 2, 5], 4, id="monotonic"),
    pytest.param([10, 12, 3, 5], 2 + 3 + 2, id="reset-counts-the-new-value"),
    pytest.param([7], 0, id="single"),
])
def test_increase(values, expected):
    assert increase(values) == expected


def test_linear_fit():
    slope, intercept, r2 = linear_fit([(0, 1), (1, 3), (2, 5)])
    assert (round(slope, 6), round(intercept, 6), round(r2, 6)) == (2, 1, 1)
    assert linear_fit([(0, 1), (0, 2), (0, 3)]) is None


def _gpu(values_mib, t0=0.0):
    return [{"t_wall": t0 + i, "host": "n0", "gpu": 0, "fb_used_bytes": v * MIB, "fb_total_bytes": 143771 * MIB}
            for i, v in enumerate(values_mib)]


def test_memory_growth_tells_a_leak_from_a_flat_reservation():
    leak = memory_growth(_gpu([1000 + 50 * i for i in range(21)]), 0, 20)[0]
    flat = memory_growth(_gpu([1000] * 21), 0, 20)[0]
    assert leak["growth_mib"] == pytest.approx(1000, rel=0.01) and leak["r2"] > 0.99
    assert flat["growth_mib"] == 0


def _soak_rows(n=30, *, usage=lambda i: 0.5, running=lambda i: 4, hits=lambda i: 0.8, preempt=lambda i: 0,
               waiting=lambda i: 0):
    rows, q, h = [], 0.0, 0.0
    for i in range(n):
        q += 100
        h += 100 * hits(i)
        rows.append({"t_wall": float(i), "kv_cache_usage_perc": usage(i), "num_requests_running": running(i),
                     "num_requests_waiting": waiting(i), "num_preemptions_total": preempt(i),
                     "prefix_cache_queries_total": q, "prefix_cache_hits_total": h})
    return rows


@pytest.mark.parametrize("rows, gpu, flag", [
    pytest.param(_soak_rows(), _gpu([1000] * 30), None, id="steady"),
    pytest.param(_soak_rows(), _gpu([1000 + 40 * i for i in range(30)]), "memory_growing", id="leak"),
    pytest.param(_soak_rows(usage=lambda i: 0.3 + i / 60), _gpu([1000] * 30), "kv_accumulating", id="kv-climbs"),
    pytest.param(_soak_rows(hits=lambda i: 0.9 if i < 10 else 0.3), _gpu([1000] * 30), "evicting", id="eviction"),
    pytest.param(_soak_rows(usage=lambda i: 0.95, running=lambda i: 1), _gpu([1000] * 30), "fragmented",
                 id="fragmentation"),
    pytest.param(_soak_rows(preempt=lambda i: i), _gpu([1000] * 30), "preemptions", id="preemptions"),
])
def test_soak_analysis_flags(rows, gpu, flag):
    got = soak_analysis(rows, gpu, 0, 29, concurrency=4, memory_growth_min_mib=256, kv_trend_max=0.15,
                        hit_rate_drop_max=0.2, fragmentation_share_max=0.2, waiting_tolerance=0.5)
    flags = {"memory_growing": bool(got["memory_growing"]), "kv_accumulating": got["kv_accumulating"],
             "evicting": got["evicting"], "fragmented": got["fragmented"], "preemptions": bool(got["preemptions"])}
    assert {k for k, v in flags.items() if v} == ({flag} if flag else set())


@pytest.mark.parametrize("waiting, queueing", [
    pytest.param(lambda i: 4 if i < 8 else 0, False, id="ramp-up-head-only"),
    pytest.param(lambda i: 2, True, id="lasting-queue"),
    pytest.param(lambda i: 0 if i < 8 else 2, True, id="queue-builds-later"),
])
def test_soak_queueing_is_judged_after_the_ramp_up(waiting, queueing):
    got = soak_analysis(_soak_rows(waiting=waiting), _gpu([1000] * 30), 0, 29, concurrency=4,
                        memory_growth_min_mib=256, kv_trend_max=0.15, hit_rate_drop_max=0.2,
                        fragmentation_share_max=0.2, waiting_tolerance=0.5, settle_fraction=0.3)
    assert got["queueing"] is queueing


# --- request outcomes and configuration ---------------------------------------------------------------------


@pytest.mark.parametrize("rec, kind", [
    pytest.param({"ok": True, "http_status": 200}, None, id="ok"),
    pytest.param({"ok": False, "http_status": 400, "error_kind": "APIError"}, "refused", id="400"),
    pytest.param({"ok": False, "http_status": 500, "error_kind": "APIError"}, "server-error", id="500"),
    pytest.param({"ok": False, "http_status": 200, "error_kind": "APIError"}, "server-error", id="error-in-stream"),
    pytest.param({"ok": False, "http_status": None, "error_kind": "Timeout"}, "timeout", id="timeout"),
    pytest.param({"ok": False, "http_status": None, "error_kind": "TargetUnreachable"}, "unreachable",
                 id="refused-tcp"),
    pytest.param({"ok": False, "cancelled": True, "error_kind": "Cancelled"}, "cancelled", id="deadline"),
])
def test_failure_kind(rec, kind):
    assert failure_kind(rec) == kind


def test_server_config_reads_args_cache_info_and_models():
    log = parse_vllm_log(
        "(APIServer pid=1) INFO 05-01 09:59:00 [api_server.py:1] vLLM API server version 0.11.0\n"
        "(APIServer pid=1) INFO 05-01 09:59:00 [utils.py:1] non-default args: {'model': 'm', 'max_model_len': 32768, "
        "'tensor_parallel_size': 8, 'gpu_memory_utilization': 0.97, 'max_num_seqs': 5}\n"
        "(APIServer pid=1) INFO 05-01 09:59:01 [scheduler.py:1] Chunked prefill is enabled with "
        "max_num_batched_tokens=4096.\n")
    cfg = server_config(log, {"block_size": "64", "num_gpu_blocks": "9000", "enable_prefix_caching": "True"},
                        {"id": "m", "max_model_len": 32768})
    v, src = cfg["values"], cfg["sources"]
    assert (v["max_model_len"], v["tensor_parallel_size"], v["data_parallel_size"]) == (32768, 8, 1)
    assert (v["gpu_memory_utilization"], v["max_num_seqs"], v["max_num_batched_tokens"]) == (0.97, 5, 4096)
    assert (v["block_size"], v["num_gpu_blocks"], v["enable_prefix_caching"]) == (64, 9000, True)
    assert src["max_num_batched_tokens"] == "log: chunked prefill line"
    assert server_config(None)["values"]["tensor_parallel_size"] is None


# --- cold load and admission, judged by the axis's own findings over a run's content --------------------------


def _cold_result(ready: dict, config: dict | None = None):
    from k3lib.axes.capacity.result import CapacityResult

    phases = [{"phase": "cold-load", "status": "done", "start_wall": 0.0, "end_wall": 1.0, "note": ""}]
    run = {"plan": {}, "phases": phases, "steps": [], "ready": ready, "config": {"values": config or {}}}
    return CapacityResult(run, [], [], [], None, None)


def _finding(result, rule, *overrides):
    from k3lib.axes.capacity import iter_findings

    params = load_params([str(ROOT / "parameters" / "emulator.yaml")], list(overrides))
    return next(f for f in iter_findings(result, params) if f.rule == f"capacity.{rule}")


READY = {"ready": True, "polls": 1, "waited_s": 0.4, "ready_at_wall": 1.0, "last_status": 200,
         "memory_at_ready": [{"gpu": "h/gpu0", "used_mib": 1000.0, "total_mib": 2000.0}]}


@pytest.mark.parametrize("ready, status, words", [
    pytest.param({**READY, "observed_transition": True, "restart": {"command": "target.restart", "ok": True}},
                 "pass", "restarted with target.restart, not ready → ready", id="restarted"),
    pytest.param({**READY, "observed_transition": False, "restart": {"command": None, "ok": None}},
                 "not-observable", "not observed: the server was already running", id="already-running"),
    pytest.param({**READY, "observed_transition": False, "restart": {"command": "target.restart", "ok": False,
                                                                      "detail": "exit status 1"}},
                 "not-observable", "target.restart failed (exit status 1)", id="restart-failed"),
    pytest.param({**READY, "observed_transition": False, "restart": {
        "command": "target.restart", "ok": True, "detail": "exit status 0",
        "effect": "no effect seen: /health never left 200 and its process start time did not change — nothing "
                  "restarted"}},
                 "not-observable", "nothing restarted: the cold load was not observed", id="restart-without-effect"),
])
def test_cold_load_is_measured_only_across_a_restart(ready, status, words):
    f = _finding(_cold_result(ready), "cold_load")
    assert f.status == status and words in f.message, f.message


@pytest.mark.parametrize("config, planned, status", [
    pytest.param({"max_num_seqs": 8, "data_parallel_size": 1}, 4, "pass", id="within"),
    pytest.param({"max_num_seqs": 4, "data_parallel_size": 2}, 9, "fail", id="above-seqs-times-dp"),
    pytest.param({"max_num_seqs": 5, "data_parallel_size": 2}, 10, "pass", id="exactly-at-the-limit"),
    pytest.param({}, 4, "info", id="not-stated"),
])
def test_a_planned_concurrency_above_max_num_seqs_times_dp_is_a_finding(config, planned, status):
    f = _finding(_cold_result({**READY, "observed_transition": True}, config), "admission",
                 f"contract.planned_concurrency={planned}")
    assert f.status == status, f.message


def _gauges(n=10, *, waiting=2.0, running=3.0, usage=0.4):
    return [{"t_wall": float(i), "num_requests_waiting": waiting, "num_requests_running": running,
             "kv_cache_usage_perc": usage, "num_preemptions_total": 0.0} for i in range(n)]


@pytest.mark.parametrize("rows, admit_limit, held", [
    # a busy client machine: requests wait for the engine's next step while it has room — not saturation
    pytest.param(_gauges(), 8, True, id="waiting-with-room"),
    pytest.param(_gauges(usage=0.95), 8, False, id="waiting-with-the-kv-pool-full"),
    pytest.param(_gauges(running=8.0), 8, False, id="waiting-at-max-num-seqs"),
    pytest.param(_gauges(), None, False, id="admission-limit-unknown-counts-every-waiting-request"),
])
def test_a_queue_counts_only_while_the_engine_is_full(rows, admit_limit, held):
    step = {"ok": 10, "preemptions": 0, **settled_stats(rows, 0, 9, 0.3, admit_limit)}
    ok, why = judge_step(step, queue_objective_ms=None, waiting_tolerance=0.5)
    assert ok is held, why
    soak = soak_analysis(rows, _gpu([1000] * 10), 0, 9, concurrency=4, memory_growth_min_mib=256, kv_trend_max=0.15,
                         hit_rate_drop_max=0.2, fragmentation_share_max=1.0, waiting_tolerance=0.5,
                         settle_fraction=0.3, admit_limit=admit_limit)
    assert soak["queueing"] is not held


# --- a step's latency vs its objective: judged on the bootstrap interval of its p95 -----------------------


def _requests(ttft_ms: list[float]) -> list[dict]:
    """Request records as the capacity runner's sink keeps them (ok, TTFT and e2e per request)."""
    return [{"ok": True, "ttft_ms": t, "e2e_ms": 4 * t, "prompt_tokens": 100, "completion_tokens": 16}
            for t in ttft_ms]


def _spread(n: int, centre: float, width: float) -> list[float]:
    """n latencies evenly spread over [centre − width, centre + width] (a noisy step, deterministic)."""
    return [centre - width + 2 * width * i / (n - 1) for i in range(n)]


@pytest.mark.parametrize("objective, expected", [
    pytest.param(400.0, "pass", id="interval-below-the-objective"),
    pytest.param(150.0, "fail", id="interval-above-the-objective"),
    pytest.param(None, None, id="no-objective"),
])
def test_a_steps_latency_is_judged_on_its_p95_interval(objective, expected):
    from k3lib.axes.capacity.analysis import latency_verdict
    from k3lib.axes.capacity.window import record_stats

    step = record_stats(_requests(_spread(200, 200.0, 50.0)), intervals=True)
    interval = step["ttft_p95_interval"]
    assert interval["low"] <= step["ttft_p95_ms"] <= interval["high"] and interval["n"] == 200
    assert 200 < interval["low"] < interval["high"] < 250  # the p95 of 150…250 ms, bounded by the data
    status, text, kept = latency_verdict(step, "ttft", objective)
    assert status == expected and kept == interval
    if objective is not None:
        assert f"{objective:g} ms" in text and "interval" in text


def test_an_interval_that_straddles_the_objective_is_inconclusive_never_a_flipped_verdict():
    from k3lib.axes.capacity.analysis import latency_verdict
    from k3lib.axes.capacity.window import record_stats

    step = record_stats(_requests(_spread(60, 200.0, 50.0)), intervals=True)
    interval = step["ttft_p95_interval"]
    # an objective inside the interval, on either side of the point estimate: never pass on one, fail on the other
    for objective in (interval["low"] + 0.1, step["ttft_p95_ms"], interval["high"] - 0.1):
        status, text, _ = latency_verdict(step, "ttft", objective)
        assert status == "inconclusive" and "straddles" in text and f"{interval['low']:.1f}" in text
    few = record_stats(_requests([100.0] * 10), intervals=True)
    assert few["ttft_p95_interval"] is None
    status, text, _ = latency_verdict(few, "ttft", 500.0)
    assert status == "inconclusive" and "fewer than the 20" in text


@pytest.mark.parametrize("centre, status, decision", [
    pytest.param(100.0, "pass", "production", id="below"),
    pytest.param(1000.0, "fail", "capacity-extension", id="above"),
    pytest.param(236.0, "warn", "limited-observation", id="straddles"),  # its p95 ≈ 300 ms
])
def test_the_capacity_record_judges_the_planned_steps_latency_on_its_interval(centre, status, decision):
    """Through the capacity axis' own record builder: the finding, its interval and the decision it forces."""
    import types

    from k3lib.axes.capacity import capacity_record
    from k3lib.axes.capacity.result import CapacityResult
    from k3lib.axes.capacity.window import record_stats
    from k3lib.verdict.decision import rule_for, strongest

    params = load_params([ROOT / "parameters" / "emulator.yaml"],
                         ["contract.planned_concurrency=4", "contract.ttft_p95_ms=300"])
    steps = [{"concurrency": 4, "label": "c4", "status": "done", "held": True, "why": [], "latency_valid": True,
              **record_stats(_requests(_spread(100, centre, 0.3 * centre)), intervals=True)}]
    phases = [{"phase": "concurrency", "status": "done", "start_wall": 0.0, "end_wall": 1.0, "note": ""}]
    record = capacity_record(CapacityResult({"plan": {}, "phases": phases, "steps": steps}, [], [], [], None, None),
                             types.SimpleNamespace(params=params))
    found = record.by_rule("capacity.latency_ttft")
    assert found is not None and found.status == status and found.evidence["interval"]["n"] == 100
    assert (found.status == "warn") == found.message.startswith("inconclusive")
    assert strongest([found]) == decision
    assert record.by_rule("capacity.latency_e2e").status == "info"  # the emulator's contract sets no e2e objective
    assert record.typed().steps[0].ttft_p95_interval == found.evidence["interval"]
    if status == "fail":
        assert "objective" in rule_for(found.rule).why
