"""The soak: sustained load at the planned concurrency, with prompts sharing a prefix, read for memory growth,
KV accumulation, prefix eviction, fragmentation and preemption over its sending window."""

from __future__ import annotations

import time
from typing import Any

from ...core import progress
from .agreement import calibration_error_at, window_agreement
from .analysis import soak_analysis
from .calibration import CalibrationPhase
from .ranks import rank_window
from .window import record_stats
from .trust import calibration_summary
from .watch import boundary_snapshot


class SoakPhase(CalibrationPhase):
    """The sustained-operation phase."""

    async def _soak(self) -> str:
        assert self.timeline is not None  # run() starts the samplers before any phase
        plan = self.plan
        sizing = self._client(self.params.target.timeout_s)
        client = self._client(plan.request_timeout_s)
        try:
            n = min(4 * plan.planned_concurrency, 32)
            prompts = await self._prompts(sizing, count=n, tokens=plan.prompt_tokens, seed=71,
                                          shared_prefix_tokens=plan.shared_prefix_tokens)
            bodies = [self._body(p, plan.output_tokens) for p in prompts]
            progress.phase(f"soak: concurrency {plan.planned_concurrency}", requests=plan.soak_max_requests,
                           duration_s=plan.soak_duration_s + plan.soak_drain_s)
            bucket: list[dict[str, Any]] = []
            before = await boundary_snapshot(self.urls)
            t0 = time.time()
            summary, early = await self._closed(client, bodies, phase="soak",
                                                label="soak", concurrency=plan.planned_concurrency,
                                                max_requests=plan.soak_max_requests,
                                                duration_s=plan.soak_duration_s, bucket=bucket, soak=True)
            t1 = time.time()
            after = await boundary_snapshot(self.urls)
            alive = await self._check_alive(client, "soak", plan.planned_concurrency)
        finally:
            await sizing.aclose()
            await client.aclose()
        cap = self.cap
        self.soak_window = (t0, t1)
        self.soak = {"start_wall": t0, "end_wall": t1, "concurrency": plan.planned_concurrency,
                     "prompt_tokens": prompts[0].prompt_tokens, "shared_prefix_tokens": prompts[0].shared_prefix_tokens,
                     "output_tokens": plan.output_tokens, "distinct_prompts": len(prompts),
                     "note": early or "", "engine_alive_after": alive, **record_stats(bucket),
                     **self._trust(summary, bucket, plan.planned_concurrency, before, after),
                     "ranks": rank_window(before, after, self.timeline.metric_rows(), t0, t1),
                     # judged over the sending window: the drain's tail, load falling off, is not sustained load
                     **soak_analysis(self.timeline.metric_rows(), self.timeline.gpu_rows(), t0,
                                     min(t1, t0 + plan.soak_duration_s),
                                     concurrency=plan.planned_concurrency,
                                     memory_growth_min_mib=cap.memory_growth_min_mib, kv_trend_max=cap.kv_trend_max,
                                     hit_rate_drop_max=cap.hit_rate_drop_max,
                                     fragmentation_share_max=cap.fragmentation_share_max,
                                     waiting_tolerance=cap.waiting_tolerance, settle_fraction=cap.settle_fraction,
                                     admit_limit=self._admit_limit())}
        self.soak["agreement"] = window_agreement(
            self.soak, bucket, self.timeline.metric_rows(), settle_fraction=cap.settle_fraction,
            calibration_error_ms=calibration_error_at({"summary": calibration_summary(self._reports)},
                                                      plan.planned_concurrency))
        return early or f"{self.soak['ok']} requests over {t1 - t0:.1f} s"
