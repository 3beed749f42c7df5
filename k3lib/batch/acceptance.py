"""The acceptance batch: the axis notebooks against the target (started here when the parameters name none), the
target checked and restarted between stages, then the summary's decision — on the shared batch layer
(`k3lib.batch`), as the renewal review is.
"""

from __future__ import annotations

from typing import Any, Callable

from .execute import Progress, publish, run_batch
from ..verdict.decision import Decision
from ..core.errors import BadInputError
from ..core.params import Params
from ..core.plan import ACCEPTANCE_STAGES, acceptance_plan
from ..core.store import RunStore
from ..report.summary import decide_run
from ..core.target import pin_target, recover, resolve_target


def check_resume(store: RunStore) -> None:
    """Before `--resume` trusts anything in a run folder: every file the manifest lists must still be what the kit
    wrote — `request.json` (the parameters to run again), `params.json` and every finished axis. Only the files of an
    axis that did not finish may differ (a kill mid-axis leaves its raw data half-hashed): that axis runs again. An
    edited file is one line (BadInputError, exit 2) naming it."""
    from .execute import _finished

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
                   on_start: Callable[[str], None] | None = None, resume: bool = False) -> Decision:
    """Run every acceptance notebook against the target (starting the emulator if needed), then decide.

    The parameters as requested go to `request.json`, so that `--resume` can start the same kind of target
    again; `params.json` holds them with the running target pinned, which is what the notebooks read.
    """
    if not resume:
        store.write_json("request.json", params.public_dict())
    target = resolve_target(params)
    if on_start:
        on_start(target.base_url)
    plan = acceptance_plan(ACCEPTANCE_STAGES)
    progress = progress or Progress(len(plan.notebooks))
    events: list[dict[str, Any]] = []

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
        target.stop()
    if result.decision_data is None:
        decision = decide_run(params, store, result.records)  # the summary failed: same rules over the same records
    else:
        decision = Decision.from_dict(result.decision_data)
    publish(store, result, decision.to_dict())
    return decision
