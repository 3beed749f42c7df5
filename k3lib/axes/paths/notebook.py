"""The live section of `13_api_comparison`: a `k3 paths` run read back, shown and kept in the review's run folder.

The review never sends the task set itself (a review reads three weeks of operation; the live run is its own
command with its own bounds); it shows the run `review.live_paths` names, or says the section is open.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .record import REVIEW_COPY, PathsResult, read_paths_record, record_data
from .figures import paths_lines

if TYPE_CHECKING:
    from ...core.store import RunStore


@dataclass(frozen=True)
class LiveSection:
    result: PathsResult | None
    source: str | None
    open_reason: str | None  # why there is nothing to show (None when a record is shown)

    def lines(self) -> list[str]:
        if self.result is None:
            return [f"open: {self.open_reason}"]
        return [f"live comparison: {self.source}", *paths_lines(self.result)]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(str(self)) + "</pre>"


class ReviewRun(Protocol):
    """What the live section reads of the review's context (k3lib.renewal.notebook.ReviewContext): the review
    parameters (`params.review.live_paths`) and the run folder it copies the record into."""

    @property
    def params(self) -> Any: ...

    @property
    def store(self) -> RunStore: ...


def live_section(ctx: ReviewRun) -> LiveSection:
    """The run named by `review.live_paths`, copied into this review's run as `live/paths.json` (atomic, in the
    manifest), where the comparison record and the decision read it."""
    source = getattr(ctx.params.review, "live_paths", None)
    if not source:
        return LiveSection(None, None, "no live run of the same task set on both paths (run `k3 paths -p FILE` and "
                                       "set review.live_paths to its run folder); the comparison above reads the "
                                       "task log only")
    result = read_paths_record(source)
    ctx.store.write_json(REVIEW_COPY, record_data(result))
    return LiveSection(result, source, None)


def live_figure(section: LiveSection) -> Any:
    """Per-task latency on each path (answered tasks), accepted and rejected apart."""
    import plotly.graph_objects as go

    fig = go.Figure()
    if section.result is None:
        fig.update_layout(title="Live comparison: open (no `k3 paths` run given)")
        return fig
    for s in section.result.paths:
        for accepted in (True, False):
            ys = [t.latency_ms for t in section.result.tasks
                  if t.path == s.path and t.status == "answered" and t.accepted is accepted]
            if ys:
                fig.add_box(y=ys, name=f"{s.path} {'accepted' if accepted else 'rejected'}", boxpoints="all")
    fig.update_layout(title="Task latency per path (first send to final answer, retries and tool rounds "
                            "included)", yaxis={"title": "ms"})
    return fig

