"""The progressive-concurrency phase: after the client's self-calibration, one closed-loop load step per planned
concurrency (and one beyond the contract), each with its client numbers, server window, settled gauges, trust and
per-rank figures, judged held or not."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from ...core import progress
from ...core.evidence import CapacityStep
from ...core.numbers import figure
from ...io.client import ChatClient
from ...io.prompts import RUN_SALT, BuiltPrompt
from .agreement import settle_held, window_agreement
from .analysis import judge_step, settled_stats
from .calibration import Calibration
from .ranks import rank_window
from .shapes import RequestRow, StepRow
from .state import Recorder
from .window import record_stats, window_numbers
from .watch import LoadWindow, boundary_snapshot


@dataclasses.dataclass(frozen=True)
class StepInputs:
    """What the steps take from the phases before them: the calibration that gates their latency figures and the
    server's admit limit (max_num_seqs × DP) that a queue is judged against."""

    calibration: Calibration
    admit_limit: int | None


async def concurrency_steps(rec: Recorder, load: LoadWindow, calibrate: Callable[[], Awaitable[Calibration]],
                            admit_limit: int | None, publish: Callable[[tuple[CapacityStep, ...]], None]
                            ) -> tuple[CapacityStep, ...]:
    """The client's self-calibration (`calibrate`), then one step per planned concurrency, each sent through
    `load`; `publish` gets the steps as they end (a phase cut at its bound keeps them)."""
    plan = rec.plan
    sizing = rec.client(rec.params.target.timeout_s)
    client = rec.client(rec.cap.request_timeout_s)
    steps: tuple[CapacityStep, ...] = ()
    try:
        prompts = await rec.prompts(sizing, count=4, tokens=plan.prompt_tokens, seed=53)
        inputs = StepInputs(await calibrate(), admit_limit)
        for c in plan.steps:
            if rec.dead:
                step = CapacityStep(concurrency=c, label=f"c{c}", status="skipped", held=False,
                                    out_of_contract=c > plan.planned_concurrency, note="engine dead")
            else:
                step = await _step(rec, load, client, prompts, c, inputs)
            steps = (*steps, step)
            publish(steps)
    finally:
        await sizing.aclose()
        await client.aclose()
    return steps


async def _step(rec: Recorder, load: LoadWindow, client: ChatClient, prompts: Sequence[BuiltPrompt], c: int,
                inputs: StepInputs) -> CapacityStep:
    """One closed-loop step at concurrency `c`: measured, then judged held or not, as the one record written."""
    plan, cap = rec.plan, rec.cap
    label = f"c{c}"
    bodies = SaltedBodies(tuple(rec.body(p, plan.output_tokens) for p in prompts), f"{RUN_SALT}-{label}")
    progress.phase(f"step {plan.steps.index(c) + 1} of {len(plan.steps)}: concurrency {c}",
                   requests=cap.step_max_requests, duration_s=2 * cap.step_duration_s)
    bucket: list[RequestRow] = []
    before = await boundary_snapshot(rec.urls)
    t0 = time.time()
    summary, early = await load(client, bodies, phase="concurrency", label=label, concurrency=c,
                                max_requests=cap.step_max_requests, duration_s=cap.step_duration_s, bucket=bucket)
    t1 = time.time()
    after = await boundary_snapshot(rec.urls)
    alive = await rec.check_alive(client, "concurrency", c)
    rows = rec.metric_rows()
    step = CapacityStep.model_validate({
        "concurrency": c, "label": label, "status": "done" if early is None else "stopped", "note": early or "",
        "out_of_contract": c > plan.planned_concurrency, "prompt_tokens": prompts[0].prompt_tokens,
        "sized_by": prompts[0].sized_by, "output_tokens": plan.output_tokens, "start_wall": t0, "end_wall": t1,
        "engine_alive_after": alive, **record_stats(bucket, intervals=True), **window_numbers(before, after),
        **settled_stats(rows, t0, t1, cap.settle_fraction, inputs.admit_limit),
        **inputs.calibration.trust(summary, bucket, c, before, after),
        "ranks": rank_window(before, after, rows, t0, t1)})
    measured = step_row(step)
    held, why = judge_step(measured, queue_objective_ms=rec.params.contract.queue_p95_ms,
                           waiting_tolerance=cap.waiting_tolerance,
                           max_error_share=rec.params.contract.max_error_share)
    # a step whose worker process ended early sent less load than planned: it did not show that level held
    why = why + ([] if alive else ["the engine died"]) + ([step.degraded] if step.degraded else [])
    agreement = window_agreement(measured, bucket, rows, settle_fraction=cap.settle_fraction,
                                 calibration_error_ms=inputs.calibration.error_at(c))
    settled, why = settle_held(held and alive and not step.degraded, why, agreement)
    settled, why = too_short(bucket, cap.step_duration_s, settled, why)
    return step.model_copy(update={"agreement": agreement, "held": settled, "why": why})


def step_row(step: CapacityStep) -> StepRow:
    """A step as the run description writes it: the fields it was built with."""
    return cast(StepRow, step.model_dump(exclude_unset=True))


def steps_note(steps: Sequence[CapacityStep], planned: int) -> str:
    return f"{sum(1 for s in steps if s.held)}/{planned} steps held"


class SaltedBodies:
    """Request `i` of a step: the prompts in turn, each with its own cache salt (nothing shared, full KV cost). A
    module-level class, so a step spread over worker processes hands it to them as it is (it pickles)."""

    def __init__(self, bodies: Sequence[Mapping[str, Any]], salt: str) -> None:
        self.bodies, self.salt = tuple(bodies), salt

    def __call__(self, i: int) -> dict[str, Any]:
        return {**self.bodies[i % len(self.bodies)], "cache_salt": f"{self.salt}-{i}"}


def too_short(bucket: Sequence[RequestRow], duration_s: float, held: bool | None, why: list[str]
              ) -> tuple[bool | None, list[str]]:
    """A step in which no request completed within its duration measured no sustained load at that level (one
    wave, cut or drained): it is inconclusive (None), never a held step a saturation point could rest on."""
    sent = [ns for r in bucket if (ns := r.get("sent_wall_ns"))]
    if not sent or held is False:
        return held, why
    end = min(sent) + duration_s * 1e9
    if any(r.get("ok") and (r.get("done_wall_ns") or end + 1) <= end for r in bucket):
        return held, why
    e2e = [ms for r in bucket if r.get("ok") and (ms := r.get("e2e_ms"))]
    took = f" (a request took {figure(max(e2e) / 1000, ' s')})" if e2e else ""
    return None, [*why, f"no request completed within the step's {figure(duration_s, ' s')}{took}: the step measured "
                        "no sustained load; raise axes.capacity.step_duration_s above a request's time"]
