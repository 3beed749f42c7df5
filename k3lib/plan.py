"""The batches: which notebooks run, in which order, and which axis each one records."""

from __future__ import annotations

# Stages run in order; the notebooks of one stage may run at the same time. Only read-only axes share a stage:
# a load-bearing axis (agent, capacity, prefix cache) must have the target to itself, or it measures the others.
ACCEPTANCE_STAGES: tuple[tuple[tuple[str, str], ...], ...] = (
    (("00_probe.ipynb", "probe"), ("01_environment.ipynb", "environment")),
    (("02_agent_tools.ipynb", "agent"),),
    (("03_capacity.ipynb", "capacity"),),
    (("04_prefix_cache.ipynb", "prefix_cache"),),
    (("05_operations.ipynb", "operations"),),  # last: its rollback drill restarts the target
)
ACCEPTANCE: tuple[tuple[str, str], ...] = tuple(pair for stage in ACCEPTANCE_STAGES for pair in stage)
ACCEPTANCE_SUMMARY = "99_acceptance.ipynb"
ACCEPTANCE_AXES: tuple[str, ...] = tuple(axis for _, axis in ACCEPTANCE)
