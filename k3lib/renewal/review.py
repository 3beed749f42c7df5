"""One review's data, loaded once from the parameters: the deployment resolved, inputs read and clipped to the
window, the deployment's series on the grid, the six axes computed.

`resolve_run` is the review's entry point: the batch and every notebook open a run with it (the demo's inputs
generated into the run, the deployment resolved from its acceptance run, `params.json` written once), and then
read the run's resolved parameters (`run_params`). What the review reads is resolved once into small typed values
(`ReviewScope`: the deployment, the window, the series source, the input files), and each step is handed the part
it uses. The notebooks and the batch call the same functions, so a re-run from files or from Prometheus gives the
same figures as the report shows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterable, cast

from pydantic import ValidationError

from ..axes.paths.record import PathsResult
from ..core.errors import BadInputError
from ..core.session import adopt_folder
from ..core.store import RunStore, sha256_file, to_json_bytes
from ..verdict import accepted as acc
from ..verdict.decision import EMULATOR_KINDS
from .analysis import (
    analyse_operations,
    analyse_production,
    analyse_stability,
    benefits_summary,
    compare_paths,
    full_cost,
)
from .decision import RenewalDecision, decide_renewal
from .demo import materialise
from .drillshapes import RenewalDrillData
from .inputs import (
    CostsInput,
    HoursRecord,
    IncidentRecord,
    TaskRecord,
    read_costs,
    read_hours,
    read_incidents,
    read_tasks,
    resolve_currency,
)
from .live import match_live
from .load import analyse_load
from .params import DeploymentLabels, InputFiles, RenewalParams, SeriesSource, load_any_review
from .results import CostResult, ProductionResult, RenewalOperationsResult, StabilityResult
from .selector import selector_data
from .series import DCGM_GPU_UTIL, Grid, RawSeries, ReviewSeries, load_frame, series_from_file, series_from_prometheus
from .shapes import Axes, AxesCache, AxesData, DeploymentData, LoadData
from .window import Clipped, ReviewWindow, clip_hours, clip_incidents, clip_tasks, hours_coverage, task_log_coverage


@dataclasses.dataclass(frozen=True)
class ReviewScope:
    """What one review reads, resolved once from its parameters (the deployment already resolved): each step is
    handed the part it uses."""

    deployment: DeploymentLabels  # `review.deployment`, complete
    source: SeriesSource  # the history file or Prometheus, and the window's bounds and step
    inputs: InputFiles  # the task log, costs, incidents and hours files
    window: ReviewWindow  # [start, end): every input is clipped to it


def scope_of(params: RenewalParams) -> ReviewScope:
    review = params.review
    inputs, source = review.inputs, review.series
    assert inputs is not None and source is not None, "demo parameters are materialised before the inputs are read"
    return ReviewScope(review.deployment, source, inputs, ReviewWindow(source.start, source.end))


@dataclasses.dataclass(frozen=True)
class ReviewData:
    params: RenewalParams  # the deployment resolved (resolve_deployment)
    grid: Grid
    series: ReviewSeries  # the deployment's series, and those left out
    frame: Any  # pandas DataFrame on the grid (series.FRAME_COLUMNS)
    tasks: tuple[TaskRecord, ...]  # inside the window
    costs: CostsInput
    incidents: tuple[IncidentRecord, ...]  # inside the window
    hours: tuple[HoursRecord, ...]  # of the ISO weeks the window touches
    window: ReviewWindow
    clipped: dict[str, Clipped]  # tasks, incidents, hours: what clipping kept and left out

    @property
    def raw(self) -> dict[str, RawSeries]:
        return self.series.raw

    @property
    def deployment(self) -> DeploymentLabels:
        return self.params.review.deployment

    @property
    def gpus(self) -> int:
        """The GPUs the capacity reserves (stated, checked against the series)."""
        return self.deployment.gpus or self.series.gpus_in_series

    @property
    def source(self) -> str:
        return scope_of(self.params).source.location

    def __repr__(self) -> str:
        return (f"ReviewData(source={self.source!r}, slots={len(self.frame)}, step_s={self.grid.step_s:g}, "
                f"gpus={self.gpus}, tasks={len(self.tasks)}, incidents={len(self.incidents)})")


ACCEPTED = ("production", "limited-observation")  # an acceptance decision that put the deployment in service


def _accepted_identity(folder: str) -> tuple[str, dict[str, str | int | None]]:
    """The served model and GPU count an accepted acceptance run recorded (its run id first); bad input when the
    folder is no run, its decision did not accept the deployment, or it ran against the embedded emulator."""

    run = acc.read_run(folder)
    source = "review.deployment.acceptance_run"
    decision = (run.decision or {}).get("decision")
    if decision not in ACCEPTED:
        raise BadInputError(f"{run.run_id} decided {decision or 'nothing'}; expected an accepted acceptance run "
                            f"({' or '.join(ACCEPTED)}) of the reviewed deployment", source=source)
    target = run.params.get("target")
    if not isinstance(target, dict) or not target.get("base_url"):
        raise BadInputError(f"{run.run_id} ran against the embedded emulator: it identifies no deployment; expected "
                            "an acceptance run of the reviewed deployment", source=source)
    model, gpus = acc.served_model(run), acc.gpu_count(run)
    return run.run_id, {"model_name": model.value, "gpus": None if gpus.value is None else int(gpus.value)}


def resolve_deployment(params: RenewalParams) -> RenewalParams:
    """The parameters with the deployment's identity complete: what `review.deployment` names, and what its
    acceptance run recorded for the rest (origins say which). A value named here that the acceptance run
    contradicts (another model, another GPU count) is bad input, as is an identity still incomplete."""
    review = params.review
    d = review.deployment
    if review.series is None:
        return params
    found: dict[str, str | int] = {}
    origins = dict(review.origins)
    if d.acceptance_run is not None:
        run_id, recorded = _accepted_identity(d.acceptance_run)
        for key, value in recorded.items():
            named = getattr(d, key)
            if value is not None and named is not None and named != value:
                raise BadInputError(f"{named!r} but the acceptance run {run_id} accepted {value!r}; expected the "
                                    "deployment that was accepted", source=f"review.deployment.{key}")
            if named is None and value is not None:
                found[key] = value
                origins[f"review.deployment.{key}"] = f"acceptance run {run_id}"
    d = d.model_copy(update=found)
    if d.missing():
        raise BadInputError(f"missing {', '.join(d.missing())}; expected the deployment under review named in the "
                            "parameters (or read from its acceptance run)", source="review.deployment")
    if d.gpu_uuids and d.gpus is not None and len(set(d.gpu_uuids)) != d.gpus:
        raise BadInputError(f"{len(set(d.gpu_uuids))} gpu_uuids but {d.gpus} GPUs; expected one UUID per reserved GPU",
                            source="review.deployment")
    return params.model_copy(update={"review": review.model_copy(update={"deployment": d, "origins": origins})})


def with_demo_inputs(params: RenewalParams, store: RunStore) -> RenewalParams:
    """Demo parameters that name no inputs: the scenario's three weeks are generated into the run's inputs/,
    hashed into its manifest (generated inputs are evidence too), and the parameters returned point at them."""
    if params.review.demo is None or params.review.inputs is not None:
        return params
    params = materialise(params, store.path("inputs"))
    adopt_folder(store, "inputs")
    return params


PARAMS = "params.json"  # the run's resolved parameters: what the batch, every notebook and a re-check read


def resolve_run(params: RenewalParams, store: RunStore) -> RenewalParams:
    """The review's entry point: the run's parameters, its demo inputs generated into it and its deployment
    resolved (`resolve_deployment`), written once to the run's params.json."""
    params = resolve_deployment(with_demo_inputs(params, store))
    if not store.path(PARAMS).exists():
        store.write_json(PARAMS, params.public_dict())
    return params


def run_params(store: RunStore) -> RenewalParams:
    """The run's resolved parameters as `resolve_run` wrote them: what every review notebook opens, so the axes
    computed before the notebooks and a decision taken after them read what the notebooks read."""
    return load_any_review(store.path(PARAMS))


def load_series(source: SeriesSource, deployment: DeploymentLabels) -> tuple[Grid, ReviewSeries]:
    grid = Grid.for_window(source.start, source.end, source.step_s)
    if source.history_file:
        return grid, series_from_file(source.history_file, grid, deployment)
    return grid, series_from_prometheus(source.prometheus_url or "", grid, deployment, selector=source.selector)


def review_incidents(incidents_file: str, window: ReviewWindow) -> Clipped:
    """The incident log clipped to the window (the drill notebook recomputes stability from it)."""
    return clip_incidents(read_incidents(incidents_file), window)


def _billed_nodes_reviewed(costs: CostsInput, hostnames: tuple[str, ...], source: str) -> None:
    """Every node the capacity bill reserves is the reviewed deployment's: a billed node left out of the review would
    be paid for and never judged (its idle GPUs left out of the load)."""
    missing = [n for n in costs.capacity_nodes if n not in hostnames]
    if missing:
        raise BadInputError(f"key capacity_nodes: {', '.join(missing)} billed but not in review.deployment.hostnames "
                            f"({', '.join(hostnames) or 'none'}); expected every billed node reviewed — add it to "
                            "hostnames and its GPUs to review.deployment.gpus", source=source)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def nothing_to_decide(s: SeriesSource, tasks_file: str, categories: Iterable[str], tasks: Clipped, frame: Any,
                      series: ReviewSeries) -> None:
    """A premise with no evidence at all in the window is bad input, not a decision: a window that has not ended,
    no task of the task set, no sample of the deployment's GPUs. One line naming what is missing and what would
    supply it (exit 2) — never a decision whose own reasons say the series cover 0 % of the window."""
    now = _now()
    if s.end > now:
        raise BadInputError(f"the window ends {s.end.isoformat()}, after now ({now.isoformat(timespec='seconds')}); "
                            "expected a window that has ended — its series, tasks and bills do not exist yet",
                            source="review.series.end")
    cats = set(categories)
    own = [t for t in tasks.kept if t.path == "self-hosted" and t.category in cats]
    if not own:
        raise BadInputError(f"no self-hosted task of the task set ({', '.join(sorted(cats))}) submitted in the window "
                            f"{s.start.date()} to {s.end.date()} ({len(tasks.kept)} task(s) inside it, "
                            f"{tasks.outside} outside); expected the window's task log (the orchestrator's or "
                            "gateway's job log, one row per task: see docs/renewal.md)", source=tasks_file)
    if not bool(frame["gpus_reporting"].gt(0).any()):
        left = "; ".join(f"{x.series} {x.name} series: {x.reason}" for x in series.left_out) or "none in the source"
        raise BadInputError(f"no GPU utilisation sample of the deployment in the window {s.start.date()} to "
                            f"{s.end.date()} (series left out: {left}); expected dcgm-exporter's "
                            "DCGM_FI_DEV_GPU_UTIL for the deployment's hosts over the window (a history file of "
                            "that window, or the Prometheus that scraped them)",
                            source=s.location or "review.series")


def load_review(params: RenewalParams) -> ReviewData:
    """Read every input (each bad value: one BadInputError line), clip it to the window, and read the deployment's
    series for the window."""
    params = resolve_deployment(params)
    scope, review = scope_of(params), params.review
    inp, window, deployment = scope.inputs, scope.window, scope.deployment
    task_log = read_tasks(inp.tasks)  # every input read (each bad value: one line), then each clipped to the window
    costs = resolve_currency(review.currency, read_costs(inp.costs), inp.costs)
    incident_log, hours_log = read_incidents(inp.incidents), read_hours(inp.hours)
    _billed_nodes_reviewed(costs, deployment.hostnames, inp.costs)
    tasks, incidents = clip_tasks(task_log, window), clip_incidents(incident_log, window)
    hours = clip_hours(hours_log, window)
    grid, series = load_series(scope.source, deployment)
    frame = load_frame(series.raw, grid, deployment.gpus)
    nothing_to_decide(scope.source, inp.tasks, review.fixed.task_set.categories, tasks, frame, series)
    return ReviewData(params, grid, series, frame, tasks.kept, costs, incidents.kept, hours.kept, window,
                      {"tasks": tasks, "incidents": incidents, "hours": hours})


def other_gpu_hosts(series: ReviewSeries) -> list[str]:
    """The hosts whose GPU utilisation series the deployment's identity left out (another node in the source)."""
    return sorted({m.group(1) for x in series.left_out if x.name == DCGM_GPU_UTIL
                   for m in [re.fullmatch(r"another host \((.+)\)", x.reason)] if m})


def deployment_use(deployment: DeploymentLabels, series: ReviewSeries) -> DeploymentData:
    return {**selector_data(deployment), "gpus_in_series": series.gpus_in_series,
            "acceptance_run": deployment.acceptance_run, "left_out": [x.describe() for x in series.left_out]}


def analyse(data: ReviewData, drill: RenewalDrillData | None = None) -> AxesData:
    """The six axes keyed by axis id: JSON-ready dicts, or the typed model where the analysis builds it."""
    rules, fixed = data.params.review.rules, data.params.review.fixed
    load: LoadData = {**analyse_load(data.frame, data.tasks, rules, data.grid, data.gpus),
                       "deployment": deployment_use(data.deployment, data.series),
                       "window": {**data.window.describe(), "step_s": data.grid.step_s}}
    production = analyse_production(data.frame, data.tasks, rules, data.grid, fixed,
                                    coverage=task_log_coverage(data.tasks, data.window),
                                    outside_window=data.clipped["tasks"].describe())
    comparison = compare_paths(data.tasks, data.hours, fixed, rules)
    return {
        "load": load,
        "production": production,
        "comparison": comparison,
        "cost": full_cost(data.costs, production, comparison, rules, other_gpu_hosts(data.series)),
        "stability": analyse_stability(data.incidents, rules, drill,
                                       outside_window=data.clipped["incidents"].describe()),
        "operations": analyse_operations(data.hours, comparison, production, rules, window_weeks=data.window.weeks,
                                         coverage=hours_coverage(data.hours, data.window),
                                         outside_window=data.clipped["hours"].describe()),
        "benefits": benefits_summary(data.params.review.benefits),
    }


AXES_CACHE = "review/axes.json"  # the six axes (no drill) computed once per run; every review notebook reads them


def inputs_sha256(params: RenewalParams) -> str:
    """One hash over what the axes depend on: the review's resolved parameters and the bytes of every input file
    (for Prometheus: its URL, selector and window, which the parameters hold)."""
    h = hashlib.sha256(to_json_bytes(params.public_dict()["review"]))
    inp, s = params.review.inputs, params.review.series
    files = [*(([inp.tasks, inp.costs, inp.incidents, inp.hours]) if inp is not None else []),
             *([s.history_file] if s is not None and s.history_file else [])]
    for f in files:
        h.update(f"\0{f}\0{sha256_file(Path(f))}".encode())
    return h.hexdigest()


HOURLY_COLUMNS = ("gpu_util", "waiting", "running")  # what the load figure draws, hourly


def hourly_load(frame: Any) -> Any:
    """The load figure's hourly means (its own resampling of these gives them back unchanged)."""
    return frame[list(HOURLY_COLUMNS)].resample("1h").mean()


def write_axes_cache(params: RenewalParams, store: RunStore) -> AxesData:
    """Load the inputs and compute the axes once, written (atomically, hashed in the manifest) to AXES_CACHE with
    the load figure's hourly means (an axis held as its typed model is written as its `model_dump(mode="json")`)."""
    data = load_review(params)
    axes = analyse(data)
    hourly = hourly_load(data.frame)
    cache: AxesCache = {"inputs_sha256": inputs_sha256(params), "axes": axes, "load_hourly": {
        "index": [t.isoformat() for t in hourly.index],
        "columns": {c: [None if v != v else float(v) for v in hourly[c]] for c in HOURLY_COLUMNS}}}
    store.write_json(AXES_CACHE, cache)
    return axes


def _cached(params: RenewalParams, store: RunStore) -> AxesCache | None:
    entry = store.manifest()["files"].get(AXES_CACHE)
    try:
        raw = store.path(AXES_CACHE).read_bytes() if entry is not None else b""
        cached = json.loads(raw) if raw and hashlib.sha256(raw).hexdigest() == entry.get("sha256") else None
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("inputs_sha256") != inputs_sha256(params):
        return None
    return cast(AxesCache, cached)  # the file this run wrote from these inputs, its hash the manifest's


def read_hourly_cache(params: RenewalParams, store: RunStore) -> Any:
    """The cached hourly means as a DataFrame on the same (UTC) index, or None (see `read_axes_cache`)."""
    import pandas as pd

    cached = _cached(params, store)
    if cached is None or not isinstance(cached.get("load_hourly"), dict):
        return None
    h = cached["load_hourly"]
    index = pd.DatetimeIndex(pd.to_datetime(h["index"]), name=None)
    return pd.DataFrame({c: pd.Series(h["columns"][c], index=index, dtype="float64") for c in HOURLY_COLUMNS},
                        index=index)


def read_axes_cache(params: RenewalParams, store: RunStore) -> AxesData | None:
    """The run's cached axes when the file is the one the manifest hashed and was computed from these very inputs;
    None otherwise (a notebook opened alone, or inputs changed since): the caller computes them."""
    cached = _cached(params, store)
    return None if cached is None else typed_cache(cached["axes"])


def typed_cache(stored: AxesData) -> AxesData | None:
    """The cached axes as `analyse` gives them: each axis its analysis builds as its typed model validated back
    from the JSON (None when one does not fit: the cache is then computed again, never read half-way)."""
    axes = stored.copy()
    try:
        if "production" in stored:
            axes["production"] = ProductionResult.model_validate(stored["production"])
        if "cost" in stored:
            axes["cost"] = CostResult.model_validate(stored["cost"])
        if "stability" in stored:
            axes["stability"] = StabilityResult.model_validate(stored["stability"])
        if "operations" in stored:
            axes["operations"] = RenewalOperationsResult.model_validate(stored["operations"])
    except ValidationError:
        return None
    return axes


def live_refusal(live: PathsResult | None, model_name: str | None, task_set_sha256: str | None) -> str | None:
    """Why the named live run is not this review's (another task set, another model), or None."""

    if live is None:
        return None
    return match_live(live, model=model_name, task_set_sha256=task_set_sha256)


def decide_from_axes(params: RenewalParams, axes: Axes, statuses: dict[str, str] | None = None,
                     today=None, live: PathsResult | None = None) -> RenewalDecision:
    """The decision with the review's rules; `live`: the `k3 paths` record `review.live_paths` names (None: the
    comparison rests on the task log only), read only when it ran the review's task set against its model."""
    review = params.review
    refused = live_refusal(live, review.deployment.model_name, review.fixed.task_set.live_sha256)
    decided = decide_renewal(axes, review.rules, review.benefits.declared(), statuses=statuses,
                             today=today, defaulted=review.defaulted(), live=live,
                             live_source=review.live_paths if live is not None else None,
                             loosened=review.loosened(), live_refused=refused)
    # a review with `demo:` set is a demonstration whatever inputs it names: its drill is the kit's emulator
    return decided.model_copy(update={"target_kind": EMULATOR_KINDS[0]}) if review.demo is not None else decided
