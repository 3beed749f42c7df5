"""The review notebooks' entry point: what a review notebook opens (the review parameters, its run folder and the
review data — alone under papermill, cell by cell in JupyterLab, or inside `run_review`, which passes the run's
resolved params.json), the axis computed and recorded, and the live incident drill on the review's target.

The notebook's display set-up (its views) is installed by the opener above the report, `k3lib.opening.review`."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..core.evidence import EvidenceRecord
from ..core.session import find_path, open_run_folder, write_record
from ..core.store import RunStore, utc_now
from ..emulator import start_emulator
from ..io.target import emulator_config, resolve_target
from .analysis import analyse_stability
from .artifacts import check_pipeline
from .drill import for_deployment, is_deployment, not_run, run_drill
from .drillshapes import RenewalDrillData
from .params import RenewalParams, load_any_review
from .records import axis_record, decide_review
from .review import (
    ReviewData,
    analyse,
    load_review,
    resolve_run,
    read_axes_cache,
    read_hourly_cache,
    review_incidents,
    scope_of,
    with_demo_inputs,
)
from .shapes import AxesData, AxisData

__all__ = ["ReviewContext", "axis_result", "decide_review", "drill_not_run", "open_review_run", "record_axis",
           "review_drill", "with_demo_inputs"]


@dataclasses.dataclass
class ReviewContext:
    axis: str
    params: RenewalParams
    store: RunStore
    interactive: bool = False
    started_at: str = dataclasses.field(default_factory=utc_now)
    _t0: float = dataclasses.field(default_factory=time.monotonic)
    _data: ReviewData | None = None

    @property
    def data(self) -> ReviewData:
        """Inputs and series, read on first use (the drill notebook may not need them before its drill)."""
        if self._data is None:
            self._data = load_review(self.params)
        return self._data

    def axes(self, drill: RenewalDrillData | None = None) -> AxesData:
        """The six axes: the run's cached ones (`run_review` computes them once before its notebooks) when they
        were computed from these inputs, else computed here (a notebook opened alone). The drill changes only the
        stability axis, which is then recomputed from the incidents and the drill."""
        cached = read_axes_cache(self.params, self.store) if self._data is None else None
        if cached is None:
            return analyse(self.data, drill)
        if drill is not None:
            scope = scope_of(self.params)
            incidents = review_incidents(scope.inputs.incidents, scope.window)  # clipped as the cached axes were
            cached["stability"] = analyse_stability(incidents.kept, self.params.review.rules, drill,
                                                    outside_window=incidents.describe())
        return cached

    def load_frame(self) -> Any:
        """What the load figure draws: the run's cached hourly means, else the frame on the grid (same figure)."""
        hourly = read_hourly_cache(self.params, self.store) if self._data is None else None
        return hourly if hourly is not None else self.data.frame

    def record(self, record: EvidenceRecord) -> EvidenceRecord:
        """Stamp timing and source onto the axis record and write `evidence/<axis>.json` atomically."""
        return write_record(self.store, record, started_at=self.started_at, t0=self._t0,
                            target=scope_of(self.params).source.location)

    def __repr__(self) -> str:
        s = scope_of(self.params).source
        return (f"ReviewContext(axis={self.axis!r}, run={str(self.store.root)!r}, "
                f"series={s.location!r}, window={s.start.isoformat()}…{s.end.isoformat()})")


def open_review_run(params_file: str, overrides: list[str] | None = None, run_dir: str = ""
                    ) -> tuple[RenewalParams, RunStore]:
    """The review's parameters and run folder, opened by the review's entry point (`review.resolve_run`: its demo
    inputs generated, its deployment resolved, params.json written once)."""
    params = load_any_review(find_path(params_file), list(overrides or []))
    store = open_run_folder(run_dir, params.run.label)
    return resolve_run(params, store), store


def axis_result(ctx: ReviewContext, drill: RenewalDrillData | None = None) -> AxisData:
    """This notebook's axis, computed from the run's inputs and series."""
    return ctx.axes(drill)[ctx.axis]  # type: ignore[literal-required]  # ctx.axis: one of the six


def record_axis(ctx: ReviewContext, result: AxisData) -> EvidenceRecord:
    return ctx.record(axis_record(ctx, result))


def review_drill(ctx: ReviewContext) -> RenewalDrillData | None:
    """The live incident drill on the review's target (the embedded emulator when no base_url is given, with a
    second emulator standing in for the API), plus the pipeline artifact check when a manifest is named. Its
    answers speak for the reviewed deployment only when the target is it (not the emulator; its model, and its
    instance when named); otherwise they are all "not shown", and the drill's observations are kept apart."""
    drill = ctx.params.review.drill
    demo = ctx.params.review.demo is not None  # a demo's deployment is the embedded emulator its series describe
    why = drill_not_run(ctx.params)
    if why is not None:
        if demo:
            return None
        result = not_run(why)
        ctx.store.write_json("drill/drill.json", result)
        return result
    target = resolve_target(ctx.params)  # duck-typed: it reads params.target only
    stand_in = None
    api = drill.api_base_url
    try:
        if api is None and target.emulator is not None:
            stand_in = start_emulator(emulator_config(ctx.params), host="127.0.0.1", port=0)
            api = stand_in.url
        result = run_drill(target.base_url, drill, api_base_url=api, headers=target.headers(),
                           model=ctx.params.target.model)
        if stand_in is not None:
            result["api_note"] = "the API path is a second embedded emulator standing in for the provider's API"
        # the answers speak for the reviewed deployment only if the drill touched it
        deployment = ctx.params.review.deployment
        proves, reason = is_deployment(result, emulator=target.emulator is not None and not demo,
                                       model_name=deployment.model_name, instances=deployment.instances,
                                       addresses=(target.base_url, *ctx.params.target.metrics_urls))
        result = for_deployment(result, proves, reason)
    finally:
        if stand_in is not None:
            stand_in.stop()
        target.stop()
    if drill.artifacts_manifest:
        result["pipeline"] = check_pipeline(drill.artifacts_manifest)
    ctx.store.write_json("drill/drill.json", result)  # raw steps; evidence/ holds records only
    return result


def drill_not_run(params: Any) -> str | None:
    """Why the drill is not run (None: it is): disabled, or a review with no deployment URL — the embedded emulator
    is drilled only for a demo, whose deployment it is; never in place of a real deployment."""
    if not params.review.drill.enabled:
        return "review.drill.enabled is false"
    if params.target.base_url is None and params.review.demo is None:
        return ("no deployment URL (target.base_url): the embedded emulator is not the reviewed deployment — name "
                "the deployment's base URL and the kill/restore steps to show the drill premise")
    return None
