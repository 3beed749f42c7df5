"""One review's data, loaded once from the parameters: inputs read, series on the grid, the six axes computed.

The notebooks and the batch call the same two functions, so a re-run from files or from Prometheus gives the
same figures as the report shows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from ..axes.paths.record import PathsResult
from ..core.store import RunStore, sha256_file, to_json_bytes
from .analysis import (analyse_load, analyse_operations, analyse_production, analyse_stability, benefits_summary,
                       compare_paths, full_cost)
from .decision import RenewalDecision, decide_renewal
from .inputs import (CostsInput, HoursRecord, IncidentRecord, TaskRecord, read_costs, read_hours, read_incidents,
                     read_tasks, resolve_currency)
from .params import RenewalParams
from .series import Grid, RawSeries, gpu_count, load_frame, series_from_file, series_from_prometheus


@dataclasses.dataclass(frozen=True)
class ReviewData:
    params: RenewalParams
    grid: Grid
    raw: dict[str, RawSeries]
    frame: Any  # pandas DataFrame on the grid (series.FRAME_COLUMNS)
    tasks: tuple[TaskRecord, ...]
    costs: CostsInput
    incidents: tuple[IncidentRecord, ...]
    hours: tuple[HoursRecord, ...]

    @property
    def gpus(self) -> int:
        return gpu_count(self.raw)

    @property
    def source(self) -> str:
        s = self.params.review.series
        assert s is not None, "demo parameters are materialised before the series are read"
        return s.history_file or s.prometheus_url or ""

    def __repr__(self) -> str:
        return (f"ReviewData(source={self.source!r}, slots={len(self.frame)}, step_s={self.grid.step_s:g}, "
                f"gpus={self.gpus}, tasks={len(self.tasks)}, incidents={len(self.incidents)})")


def load_series(params: RenewalParams) -> tuple[Grid, dict[str, RawSeries]]:
    s = params.review.series
    assert s is not None, "demo parameters are materialised before the series are read"
    grid = Grid.for_window(s.start, s.end, s.step_s)
    if s.history_file:
        return grid, series_from_file(s.history_file, grid)
    return grid, series_from_prometheus(s.prometheus_url or "", grid, selector=s.selector)


def load_review(params: RenewalParams) -> ReviewData:
    """Read every input (each bad value: one BadInputError line) and the series for the window."""
    inp = params.review.inputs
    assert inp is not None, "demo parameters are materialised before the inputs are read"
    tasks = tuple(read_tasks(inp.tasks))
    costs = resolve_currency(params.review.currency, read_costs(inp.costs), inp.costs)
    incidents, hours = tuple(read_incidents(inp.incidents)), tuple(read_hours(inp.hours))
    grid, raw = load_series(params)
    return ReviewData(params, grid, raw, load_frame(raw, grid), tasks, costs, incidents, hours)


def analyse(data: ReviewData, drill: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The six axes as JSON-ready dicts, keyed by axis id."""
    rules, fixed = data.params.review.rules, data.params.review.fixed
    load = analyse_load(data.frame, data.tasks, rules, data.grid, data.gpus)
    production = analyse_production(data.frame, data.tasks, rules, data.grid, fixed)
    comparison = compare_paths(data.tasks, data.hours, fixed, rules)
    return {
        "load": load,
        "production": production,
        "comparison": comparison,
        "cost": full_cost(data.costs, production, comparison),
        "stability": analyse_stability(data.incidents, rules, drill),
        "operations": analyse_operations(data.hours, comparison, production, rules),
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


def write_axes_cache(params: RenewalParams, store: RunStore) -> dict[str, dict[str, Any]]:
    """Load the inputs and compute the axes once, written (atomically, hashed in the manifest) to AXES_CACHE with
    the load figure's hourly means."""
    data = load_review(params)
    axes = analyse(data)
    hourly = hourly_load(data.frame)
    store.write_json(AXES_CACHE, {"inputs_sha256": inputs_sha256(params), "axes": axes, "load_hourly": {
        "index": [t.isoformat() for t in hourly.index],
        "columns": {c: [None if v != v else float(v) for v in hourly[c]] for c in HOURLY_COLUMNS}}})
    return axes


def _cached(params: RenewalParams, store: RunStore) -> dict[str, Any] | None:
    entry = store.manifest()["files"].get(AXES_CACHE)
    try:
        raw = store.path(AXES_CACHE).read_bytes() if entry is not None else b""
        cached = json.loads(raw) if raw and hashlib.sha256(raw).hexdigest() == entry.get("sha256") else None
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("inputs_sha256") != inputs_sha256(params):
        return None
    return cached


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


def read_axes_cache(params: RenewalParams, store: RunStore) -> dict[str, dict[str, Any]] | None:
    """The run's cached axes when the file is the one the manifest hashed and was computed from these very inputs;
    None otherwise (a notebook opened alone, or inputs changed since): the caller computes them."""
    cached = _cached(params, store)
    return cached.get("axes") if cached is not None else None


def decide_from_axes(params: RenewalParams, axes: dict[str, Any], statuses: dict[str, str] | None = None,
                     today=None, live: PathsResult | None = None) -> RenewalDecision:
    """The decision with the review's rules; `live`: the `k3 paths` record `review.live_paths` names (None: the
    comparison rests on the task log only)."""
    return decide_renewal(axes, params.review.rules, params.review.benefits.declared(), statuses=statuses,
                          today=today, defaulted=params.review.defaulted(), live=live,
                          live_source=params.review.live_paths if live is not None else None)
