"""The progressive-concurrency phase: after the client's self-calibration, one closed-loop load step per planned
concurrency (and one beyond the contract), each with its client numbers, server window, settled gauges, trust and
per-rank figures, judged held or not."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...core import progress
from ...core.numbers import figure
from ...io.prompts import RUN_SALT, BuiltPrompt
from .agreement import calibration_error_at, settle_held, window_agreement
from .analysis import judge_step, settled_stats
from .calibration import CalibrationPhase
from .ranks import rank_window
from .window import record_stats, window_numbers
from .trust import calibration_summary
from .watch import boundary_snapshot


class ConcurrencyPhase(CalibrationPhase):
    """The concurrency steps."""

    async def _concurrency(self) -> str:
        assert self.timeline is not None  # run() starts the samplers before any phase
        plan = self.plan
        sizing = self._client(self.params.target.timeout_s)
        client = self._client(plan.request_timeout_s)
        try:
            prompts = await self._prompts(sizing, count=4, tokens=plan.prompt_tokens, seed=53)
            await self._calibrate()
            for c in plan.steps:
                label = f"c{c}"
                if self.dead:
                    self.steps.append({"concurrency": c, "label": label, "status": "skipped", "held": False,
                                       "out_of_contract": c > plan.planned_concurrency, "note": "engine dead"})
                    continue
                bodies = self._salted(prompts, plan.output_tokens, f"{label}")
                progress.phase(f"step {plan.steps.index(c) + 1} of {len(plan.steps)}: concurrency {c}",
                               requests=plan.step_max_requests, duration_s=2 * plan.step_duration_s)
                bucket: list[dict[str, Any]] = []
                before = await boundary_snapshot(self.urls)
                t0 = time.time()
                summary, early = await self._closed(client, bodies, phase="concurrency", label=label,
                                                    concurrency=c, max_requests=plan.step_max_requests,
                                                    duration_s=plan.step_duration_s, bucket=bucket)
                t1 = time.time()
                after = await boundary_snapshot(self.urls)
                alive = await self._check_alive(client, "concurrency", c)
                step = {"concurrency": c, "label": label, "status": "done" if early is None else "stopped",
                        "note": early or "", "out_of_contract": c > plan.planned_concurrency,
                        "prompt_tokens": prompts[0].prompt_tokens, "sized_by": prompts[0].sized_by,
                        "output_tokens": plan.output_tokens, "start_wall": t0, "end_wall": t1,
                        "engine_alive_after": alive, **record_stats(bucket, intervals=True), **window_numbers(before, after),
                        **settled_stats(self.timeline.metric_rows(), t0, t1, self.cap.settle_fraction,
                                        self._admit_limit()),
                        **self._trust(summary, bucket, c, before, after),
                        "ranks": rank_window(before, after, self.timeline.metric_rows(), t0, t1)}
                held, why = judge_step(step, queue_objective_ms=self.params.contract.queue_p95_ms,
                                       waiting_tolerance=self.cap.waiting_tolerance,
                                       max_error_share=self.params.contract.max_error_share)
                # a step whose worker process ended early sent less load than planned: it did not show that level held
                degraded = step.get("degraded")
                why = why + ([] if alive else ["the engine died"]) + ([degraded] if degraded else [])
                step["agreement"] = window_agreement(
                    step, bucket, self.timeline.metric_rows(), settle_fraction=self.cap.settle_fraction,
                    calibration_error_ms=calibration_error_at({"summary": calibration_summary(self._reports)}, c))
                settled, why = settle_held(held and alive and not degraded, why, step["agreement"])
                settled, why = too_short(bucket, plan.step_duration_s, settled, why)
                step.update(held=settled, why=why)
                self.steps.append(step)
        finally:
            await sizing.aclose()
            await client.aclose()
        return f"{sum(1 for s in self.steps if s.get('held'))}/{len(plan.steps)} steps held"

    def _salted(self, prompts: Sequence[BuiltPrompt], max_tokens: int, label: str) -> "SaltedBodies":
        return SaltedBodies(tuple(self._body(p, max_tokens) for p in prompts), f"{RUN_SALT}-{label}")


class SaltedBodies:
    """Request `i` of a step: the prompts in turn, each with its own cache salt (nothing shared, full KV cost). A
    module-level class, so a step spread over worker processes hands it to them as it is (it pickles)."""

    def __init__(self, bodies: Sequence[Mapping[str, Any]], salt: str) -> None:
        self.bodies, self.salt = tuple(bodies), salt

    def __call__(self, i: int) -> dict[str, Any]:
        return {**self.bodies[i % len(self.bodies)], "cache_salt": f"{self.salt}-{i}"}


def too_short(bucket: Sequence[Mapping[str, Any]], duration_s: float, held: bool | None, why: list[str]
              ) -> tuple[bool | None, list[str]]:
    """A step in which no request completed within its duration measured no sustained load at that level (one
    wave, cut or drained): it is inconclusive (None), never a held step a saturation point could rest on."""
    sent = [r["sent_wall_ns"] for r in bucket if r.get("sent_wall_ns")]
    if not sent or held is False:
        return held, why
    end = min(sent) + duration_s * 1e9
    if any(r.get("ok") and (r.get("done_wall_ns") or end + 1) <= end for r in bucket):
        return held, why
    e2e = [r["e2e_ms"] for r in bucket if r.get("ok") and r.get("e2e_ms")]
    took = f" (a request took {figure(max(e2e) / 1000, ' s')})" if e2e else ""
    return None, [*why, f"no request completed within the step's {figure(duration_s, ' s')}{took}: the step measured "
                        "no sustained load; raise axes.capacity.step_duration_s above a request's time"]
