"""The soak: sustained load at the planned concurrency, with prompts sharing a prefix, read for memory growth,
KV accumulation, prefix eviction, fragmentation and preemption over its sending window."""

from __future__ import annotations

import dataclasses
import time

from ...core import progress
from .agreement import window_agreement
from .analysis import soak_analysis
from .calibration import Calibration
from .ranks import rank_window
from .shapes import RequestRow, SoakRow
from .state import Recorder
from .window import record_stats
from .watch import LoadWindow, boundary_snapshot


@dataclasses.dataclass(frozen=True)
class Soak:
    """The soak as the run description writes it (`data`), and how it ended (`note`)."""

    data: SoakRow
    note: str


async def soak(rec: Recorder, load: LoadWindow, calibration: Calibration, admit_limit: int | None) -> Soak:
    """Sustained load at the planned concurrency through `load`, judged over its sending window."""
    assert rec.timeline is not None  # the runner starts the samplers before any phase
    plan, cap = rec.plan, rec.cap
    sizing = rec.client(rec.params.target.timeout_s)
    client = rec.client(cap.request_timeout_s)
    try:
        n = min(4 * plan.planned_concurrency, 32)
        prompts = await rec.prompts(sizing, count=n, tokens=plan.prompt_tokens, seed=71,
                                    shared_prefix_tokens=plan.shared_prefix_tokens)
        bodies = [rec.body(p, plan.output_tokens) for p in prompts]
        progress.phase(f"soak: concurrency {plan.planned_concurrency}", requests=cap.soak_max_requests,
                       duration_s=cap.soak_duration_s + plan.soak_drain_s)
        bucket: list[RequestRow] = []
        before = await boundary_snapshot(rec.urls)
        t0 = time.time()
        summary, early = await load(client, bodies, phase="soak", label="soak", concurrency=plan.planned_concurrency,
                                    max_requests=cap.soak_max_requests, duration_s=cap.soak_duration_s,
                                    bucket=bucket, soak=True)
        t1 = time.time()
        after = await boundary_snapshot(rec.urls)
        alive = await rec.check_alive(client, "soak", plan.planned_concurrency)
    finally:
        await sizing.aclose()
        await client.aclose()
    rows = rec.metric_rows()
    data: SoakRow = {"start_wall": t0, "end_wall": t1, "concurrency": plan.planned_concurrency,
            "prompt_tokens": prompts[0].prompt_tokens, "shared_prefix_tokens": prompts[0].shared_prefix_tokens,
            "output_tokens": plan.output_tokens, "distinct_prompts": len(prompts),
            "note": early or "", "engine_alive_after": alive, **record_stats(bucket),
            **calibration.trust(summary, bucket, plan.planned_concurrency, before, after),
            "ranks": rank_window(before, after, rows, t0, t1),
            # judged over the sending window: the drain's tail, load falling off, is not sustained load
            **soak_analysis(rows, rec.gpu_rows(), t0, min(t1, t0 + cap.soak_duration_s),
                            concurrency=plan.planned_concurrency,
                            memory_growth_min_mib=cap.memory_growth_min_mib, kv_trend_max=cap.kv_trend_max,
                            hit_rate_drop_max=cap.hit_rate_drop_max,
                            fragmentation_share_max=cap.fragmentation_share_max,
                            waiting_tolerance=cap.waiting_tolerance, settle_fraction=cap.settle_fraction,
                            admit_limit=admit_limit)}
    data["agreement"] = window_agreement(data, bucket, rows, settle_fraction=cap.settle_fraction,
                                         calibration_error_ms=calibration.error_at(plan.planned_concurrency))
    return Soak(data, early or f"{data['ok']} requests over {t1 - t0:.1f} s")
