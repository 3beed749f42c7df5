"""What a review notebook opens first: the review parameters, its run folder and the review data — alone under
papermill, cell by cell in JupyterLab, or inside `run_review` (which passes the run's resolved params.json)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from . import views
from ..core.evidence import EvidenceRecord
from ..core.session import adopt_folder, find_path, open_run_folder, write_record
from ..core.store import RunStore, utc_now
from .review_figures import register_views
from ..renewal.params import RenewalParams, load_any_review
from ..renewal.analysis import analyse_stability
from ..renewal.review import (ReviewData, analyse, load_review, read_axes_cache, read_hourly_cache, resolve_deployment,
                     review_incidents)


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

    def axes(self, drill: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        """The six axes: the run's cached ones (`run_review` computes them once before its notebooks) when they
        were computed from these inputs, else computed here (a notebook opened alone). The drill changes only the
        stability axis, which is then recomputed from the incidents and the drill."""
        cached = read_axes_cache(self.params, self.store) if self._data is None else None
        if cached is None:
            return analyse(self.data, drill)
        if drill is not None:
            incidents = review_incidents(self.params)  # clipped to the window, as the cached axes were
            cached["stability"] = analyse_stability(incidents.kept, self.params.review.rules, drill,
                                                    outside_window=incidents.describe())
        return cached

    def load_frame(self) -> Any:
        """What the load figure draws: the run's cached hourly means, else the frame on the grid (same figure)."""
        hourly = read_hourly_cache(self.params, self.store) if self._data is None else None
        return hourly if hourly is not None else self.data.frame

    def record(self, record: EvidenceRecord) -> EvidenceRecord:
        """Stamp timing and source onto the axis record and write `evidence/<axis>.json` atomically."""
        s = self.params.review.series
        assert s is not None, "demo parameters are materialised before the series are read"
        return write_record(self.store, record, started_at=self.started_at, t0=self._t0,
                            target=s.history_file or s.prometheus_url)

    def __repr__(self) -> str:
        s = self.params.review.series
        assert s is not None, "demo parameters are materialised before the series are read"
        return (f"ReviewContext(axis={self.axis!r}, run={str(self.store.root)!r}, "
                f"series={s.history_file or s.prometheus_url!r}, window={s.start.isoformat()}…{s.end.isoformat()})")


def with_demo_inputs(params: RenewalParams, store: RunStore) -> RenewalParams:
    """Demo parameters that name no inputs: the scenario's three weeks are generated into the run's inputs/,
    hashed into its manifest (generated inputs are evidence too), and the parameters returned point at them."""
    if params.review.demo is None or params.review.inputs is not None:
        return params
    from ..renewal.demo import materialise

    params = materialise(params, store.path("inputs"))
    adopt_folder(store, "inputs")
    return params


def open_review_run(params_file: str, overrides: list[str] | None = None, run_dir: str = ""
                    ) -> tuple[RenewalParams, RunStore]:
    """The review's parameters and run folder; in IPython, the review's HTML views are registered first."""
    register_views()
    params = load_any_review(find_path(params_file), list(overrides or []))
    store = open_run_folder(run_dir, params.run.label)
    params = resolve_deployment(with_demo_inputs(params, store))
    if not store.path("params.json").exists():
        store.write_json("params.json", params.public_dict())
    return params, store


def open_review(axis: str, params_file: str, overrides: list[str] | None = None, run_dir: str = "",
                interactive: bool = False) -> ReviewContext:
    """The first call of every review axis notebook."""
    views.install()
    params, store = open_review_run(params_file, overrides, run_dir)
    return ReviewContext(axis=axis, params=params, store=store, interactive=interactive)


def open_review_summary(params_file: str, overrides: list[str] | None = None, run_dir: str = ""
                        ) -> tuple[RenewalParams, RunStore]:
    """The summary reads evidence records only; it never reads the inputs or calls a target."""
    views.install()
    return open_review_run(params_file, overrides, run_dir)
