"""The review notebooks' calls, one per cell (`k3lib.review` in a notebook): the opener (the notebook's views
installed, then the review's context from `k3lib.renewal.notebook`), the axis result, its table and figure, the
drill, the record, the rules table and the decision."""

from __future__ import annotations

from typing import Any

from ..core.store import RunStore
from ..renewal.notebook import (ReviewContext, axis_result, decide_review, drill_not_run, open_review_run,
                                record_axis, review_drill)
from ..renewal.params import RenewalParams
from ..renewal.results import TypedAxis
from ..report import review_figures as figures
from ..report import views
from ..report.review_figures import drill_table, register_views, rules_table

__all__ = ["ReviewContext", "axis_figure", "axis_result", "axis_table", "decide_review", "drill_not_run",
           "drill_table", "open_review", "open_review_summary", "record_axis", "review_drill", "rules_table"]


def open_review(axis: str, params_file: str, overrides: list[str] | None = None, run_dir: str = "",
                interactive: bool = False) -> ReviewContext:
    """The first call of every review axis notebook."""
    views.install()
    register_views()
    params, store = open_review_run(params_file, overrides, run_dir)
    return ReviewContext(axis=axis, params=params, store=store, interactive=interactive)


def open_review_summary(params_file: str, overrides: list[str] | None = None, run_dir: str = ""
                        ) -> tuple[RenewalParams, RunStore]:
    """The summary reads evidence records only; it never reads the inputs or calls a target."""
    views.install()
    register_views()
    return open_review_run(params_file, overrides, run_dir)


def axis_table(ctx: ReviewContext, result: dict[str, Any] | TypedAxis) -> Any:
    return figures.axis_table(ctx.axis, result)


def axis_figure(ctx: ReviewContext, result: dict[str, Any] | TypedAxis) -> Any:
    return figures.axis_figure(ctx.axis, result, ctx.load_frame() if ctx.axis == "load" else None)
