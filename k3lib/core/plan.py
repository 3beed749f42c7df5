"""The batches: which notebooks run, in which order, and which axis each one records.

Both batches, acceptance and renewal review, are described here as data (`BatchPlan`), so that the batch runner
(`k3lib.batch`), the two batches on top of it and the report that re-renders a finished run all read one list.
"""

from __future__ import annotations

import dataclasses
from typing import Any

Stage = tuple[tuple[str, str], ...]  # (notebook file in notebooks/, axis id written to evidence/<axis>.json)

# Stages run in order; the notebooks of one stage may run at the same time. Only read-only axes share a stage:
# a load-bearing axis (agent, capacity, prefix cache) must have the target to itself, or it measures the others.
ACCEPTANCE_STAGES: tuple[Stage, ...] = (
    (("00_probe.ipynb", "probe"), ("01_environment.ipynb", "environment")),
    (("02_agent_tools.ipynb", "agent"),),
    (("03_capacity.ipynb", "capacity"),),
    (("04_prefix_cache.ipynb", "prefix_cache"),),
    (("05_operations.ipynb", "operations"),),  # last: its rollback drill restarts the target
)
ACCEPTANCE: tuple[tuple[str, str], ...] = tuple(pair for stage in ACCEPTANCE_STAGES for pair in stage)
ACCEPTANCE_SUMMARY = "99_acceptance.ipynb"
ACCEPTANCE_AXES: tuple[str, ...] = tuple(axis for _, axis in ACCEPTANCE)

# The renewal review: the analyses only read the run's inputs, so they run two at a time; the drill (15) is the
# only one that touches a target.
REVIEW_STAGES: tuple[Stage, ...] = (
    (("11_load.ipynb", "load"), ("12_useful_production.ipynb", "production")),
    (("13_api_comparison.ipynb", "comparison"), ("14_cost.ipynb", "cost")),
    (("15_stability.ipynb", "stability"), ("16_operations.ipynb", "operations")),
)
REVIEW: tuple[tuple[str, str], ...] = tuple(pair for stage in REVIEW_STAGES for pair in stage)
REVIEW_SUMMARY = "19_renewal.ipynb"


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """One batch: its axis stages, then its summary notebook alone (the summary reads every axis' evidence)."""

    kind: str  # acceptance | renewal: which index the report writes
    title: str
    stages: tuple[Stage, ...]
    summary: str

    @property
    def axes(self) -> dict[str, str]:
        """Axis notebook → its axis id."""
        return {nb: axis for stage in self.stages for nb, axis in stage}

    @property
    def all_stages(self) -> list[tuple[tuple[str, str | None], ...]]:
        return [*self.stages, ((self.summary, None),)]

    @property
    def notebooks(self) -> list[str]:
        """Every notebook in the order the report lists them: the axes, then the summary."""
        return [nb for stage in self.all_stages for nb, _ in stage]


def acceptance_plan(stages: tuple[Stage, ...] = ACCEPTANCE_STAGES) -> BatchPlan:
    return BatchPlan("acceptance", "k3kit acceptance", stages, ACCEPTANCE_SUMMARY)


def review_plan(stages: tuple[Stage, ...] = REVIEW_STAGES) -> BatchPlan:
    return BatchPlan("renewal", "k3kit renewal review", stages, REVIEW_SUMMARY)


def run_kind(store: Any) -> str:
    """Which batch made the run folder `store` (a RunStore): "renewal" when it holds the review's summary notebook,
    else "acceptance"."""
    return "renewal" if store.path(f"notebooks/{REVIEW_SUMMARY}").is_file() else "acceptance"
