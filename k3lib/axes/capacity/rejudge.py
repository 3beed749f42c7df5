"""A capacity run judged again from its raw data: each load window's client counts recounted from the requests it
kept (`requests.jsonl`), its gauges re-read from the sampled series (`metrics.json`, `gpu.json`), its measurements
compared again, its held/why decided again, then every finding — what `k3 verify` holds the stored record to.

The counter and histogram deltas between a window's boundary scrapes are kept as measured (the scrapes themselves
are not stored); the sampled series that lie inside them are re-read, and must agree with them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ...core.params import Params
from .agreement import calibration_error_at, settle_held, window_agreement
from .analysis import judge_step, settled_stats, soak_analysis
from .window import record_stats
from .result import CapacityResult, read_capacity
from .run_shapes import CalibrationData, RunJson
from .shapes import MetricRow, RequestRow, SoakRow, StepRow


def _requests(result: CapacityResult, phase: str, label: str | None) -> list[RequestRow]:
    return [r for r in result.requests if r.get("phase") == phase and (label is None or r.get("step") == label)]


def rederive_step(step: StepRow, requests: Sequence[RequestRow], rows: Sequence[MetricRow], params: Params,
                  calibration: CalibrationData | None) -> StepRow:
    """One concurrency step decided again from its requests and the sampled series."""
    start, end = step.get("start_wall"), step.get("end_wall")
    if step.get("status") == "skipped" or start is None or end is None:
        return step.copy()
    cap = params.axes.capacity
    out: StepRow = {**step, **record_stats(requests, intervals=True),
           **settled_stats(rows, float(start), float(end), cap.settle_fraction,
                           step.get("admit_limit"))}
    held, why = judge_step(out, queue_objective_ms=params.contract.queue_p95_ms, waiting_tolerance=cap.waiting_tolerance,
                           max_error_share=params.contract.max_error_share)
    alive, degraded = out.get("engine_alive_after", True), out.get("degraded")
    why = why + ([] if alive else ["the engine died"]) + ([degraded] if degraded else [])
    agreement = window_agreement(out, requests, rows, settle_fraction=cap.settle_fraction,
                                 calibration_error_ms=calibration_error_at(calibration, int(step["concurrency"])))
    out["agreement"] = agreement
    held_now, why = settle_held(bool(held and alive and not degraded), why, agreement)
    out.update({"held": held_now, "why": why})
    return out


def rederive_soak(soak: SoakRow, requests: Sequence[RequestRow], result: CapacityResult, params: Params) -> SoakRow:
    """The soak's counts, accumulation, eviction, fragmentation and queue read again over its sending window."""
    if soak.get("start_wall") is None or soak.get("end_wall") is None:
        return soak.copy()
    cap = params.axes.capacity
    t0, t1 = float(soak["start_wall"]), float(soak["end_wall"])
    ran = (result.run.get("plan") or {}).get("soak_duration_s")  # the soak's duration in the run judged
    duration = float(ran) if isinstance(ran, (int, float)) and ran else cap.soak_duration_s
    out: SoakRow = {**soak, **record_stats(requests),
           **soak_analysis(result.metrics, result.gpu, t0, min(t1, t0 + duration),
                           concurrency=int(soak.get("concurrency") or params.contract.planned_concurrency),
                           memory_growth_min_mib=cap.memory_growth_min_mib, kv_trend_max=cap.kv_trend_max,
                           hit_rate_drop_max=cap.hit_rate_drop_max,
                           fragmentation_share_max=cap.fragmentation_share_max,
                           waiting_tolerance=cap.waiting_tolerance, settle_fraction=cap.settle_fraction,
                           admit_limit=soak.get("admit_limit"))}
    out["agreement"] = window_agreement(out, requests, result.metrics, settle_fraction=cap.settle_fraction,
                                        calibration_error_ms=calibration_error_at(result.run.get("calibration"),
                                                                                  int(out["concurrency"])))
    return out


def rejudge_capacity(store: Any, params: Params) -> CapacityResult:
    """The run folder's capacity result with every load window decided again from its raw data."""
    result = read_capacity(store)
    calibration = result.run.get("calibration")
    steps = [rederive_step(s, _requests(result, "concurrency", s.get("label")), result.metrics, params, calibration)
             for s in result.steps]
    run: RunJson = {**result.run, "steps": steps}
    if soak := result.run.get("soak"):
        run["soak"] = rederive_soak(soak, _requests(result, "soak", None), result, params)
    return dataclasses.replace(result, run=run)
