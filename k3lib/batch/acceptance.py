"""The acceptance batch: the axis notebooks against the target (started here when the parameters name none), the
target checked and restarted between stages, then the summary's decision — on the shared batch layer
(`k3lib.batch`), as the renewal review is. Before it, the preflight (`k3lib.batch.preflight`) and the plan: what
each axis will do and about how long it will take (`k3lib.axes.estimate`).
"""

from __future__ import annotations

from typing import Any, Callable

from ..axes.estimate import REPORT_S, AxisEstimate, estimate_axes
from ..core.errors import BadInputError
from ..core.numbers import figure
from ..core.params import Params
from ..core.plan import ACCEPTANCE_STAGES, acceptance_plan
from ..core.store import RunStore
from ..core.target import Target, pin_target
from ..io.target import RecoveryEvent, recover, resolve_target
from ..verdict.assemble import decide_run
from ..verdict.decision import AcceptanceDecision
from .execute import Progress, _finished, publish, run_batch


def check_resume(store: RunStore) -> None:
    """Before `--resume` trusts anything in a run folder: every file the manifest lists must still be what the kit
    wrote — `request.json` (the parameters to run again), `params.json` and every finished axis. Only the files of an
    axis that did not finish may differ (a kill mid-axis leaves its raw data half-hashed): that axis runs again. An
    edited file is one line (BadInputError, exit 2) naming it."""

    manifest = store.manifest()["files"]
    if "request.json" not in manifest:
        raise BadInputError("request.json is not in the run's manifest: it was not written by the kit, a resumed run "
                            "will not trust it", source=str(store.path("request.json")))
    plan = acceptance_plan(ACCEPTANCE_STAGES)
    open_axes = [(nb, axis) for nb, axis in plan.axes.items() if not _finished(store, nb, axis, manifest)]
    redone = tuple(p for nb, axis in open_axes for p in (f"notebooks/{nb}", f"evidence/{axis}.json", f"evidence/{axis}/"))
    redone += (f"notebooks/{plan.summary}", "decision.json", "report/")  # the summary is always decided again
    for problem in store.verify():
        rel = problem.split(":")[0]
        if not rel.startswith(redone):
            raise BadInputError(f"{problem} — the run folder no longer matches what the kit wrote: `--resume` will not "
                                "trust it (start a new run, or `k3 verify` it)", source=str(store.path(rel)))


def run_acceptance(params: Params, store: RunStore, *, progress: Progress | None = None,
                   on_start: Callable[[str], None] | None = None, resume: bool = False,
                   target: Target | None = None) -> AcceptanceDecision:
    """Run every acceptance notebook against the target (starting the emulator if needed), then decide.

    The parameters as requested go to `request.json`, so that `--resume` can start the same kind of target
    again; `params.json` holds them with the running target pinned, which is what the notebooks read. `target`:
    one already resolved (and preflighted) by the caller, who then stops it; else it is resolved and stopped here.
    """
    if not resume:
        store.write_json("request.json", params.public_dict())
    owned = target is None
    target = target or resolve_target(params)
    if on_start:
        on_start(target.base_url)
    plan = acceptance_plan(ACCEPTANCE_STAGES)
    progress = progress or Progress(len(plan.notebooks), run_dir=store.root)
    events: list[RecoveryEvent] = []

    def between(last: str) -> None:
        if any(e.get("restarted") is False and "command" in e for e in events):
            return  # a restart already failed to bring the target back: do not hammer it
        event = recover(target, after=last)
        if event:
            events.append(event)
            store.write_json("events.json", events)
            progress.note(f"      target unhealthy after {last} (health {event['health_before']}): "
                          + ("restarted" if event["restarted"] else "NOT restarted") + f" — {event['detail'][:100]}")

    try:
        store.write_json("params.json", pin_target(params, target).public_dict())
        result = run_batch(store, plan, timeout_s=params.run.notebook_timeout_s, progress=progress, resume=resume,
                           between=between)
    finally:
        if owned:
            target.stop()
    if result.decision_data is None:
        decision = decide_run(params, store, result.records)  # the summary failed: same rules over the same records
    else:
        decision = AcceptanceDecision.model_validate(result.decision_data)
    publish(store, result, decision.doc())
    return decision


def plan_estimates(params: Params, speed: Any, *, embedded: bool) -> tuple[list[AxisEstimate], float]:
    """Each axis' estimate and the batch's whole duration: stage by stage (a stage lasts as long as its longest
    notebook), then the summary and the report."""
    axes = estimate_axes(params, speed, embedded=embedded)
    by_nb = {a.notebook: a for a in axes}
    total = sum(max(by_nb[nb].seconds for nb, _ in stage if nb in by_nb) for stage in ACCEPTANCE_STAGES) + REPORT_S
    return axes, total


def plan_lines(params: Params, speed: Any, *, embedded: bool, measured: bool) -> list[str]:
    """The plan as the batch prints it before it starts (and `k3 validate --plan` alone)."""
    axes, total = plan_estimates(params, speed, embedded=embedded)
    basis = "the parameters and the target's speed in the preflight" if measured else \
        "the parameters and a default speed (the preflight measured none)"
    lines = [f"plan: {len(axes)} axes and the summary, about {duration(total)} in all (from {basis})"]
    for a in axes:
        reqs = f", {a.requests:,} requests" if a.requests else ""
        most = f" (at most {a.at_most:,}: the run stops before it sends more)" if a.at_most > a.requests else ""
        lines.append(f"  {a.notebook:<24} about {duration(a.seconds)}{reqs}{most}")
        for p in a.phases:
            lines.append(f"      {p.name}: {duration(p.seconds)}"
                         + (f", {p.requests:,} requests" if p.requests else "")
                         + (f" (at most {p.most:,})" if p.most > p.requests else "") + f" (ends by {p.bound})")
    lines.append(f"  99_acceptance.ipynb      about {duration(REPORT_S)} (the decision and the report)")
    lines += [f"plan: warning: {p.warning}" for a in axes for p in a.phases if p.warning]
    return lines


def duration(seconds: float) -> str:
    """`42 s`, `3 min 20 s`, `1 h 04 min`."""
    s = int(round(seconds))
    if s < 10:
        return f"{figure(round(max(seconds, 0.1), 1))} s"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
