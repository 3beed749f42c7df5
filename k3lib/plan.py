"""The batches: which notebooks run, in which order, and which axis each one records."""

from __future__ import annotations

# (notebook file in notebooks/, axis id written to evidence/<axis>.json)
ACCEPTANCE: tuple[tuple[str, str], ...] = (
    ("00_probe.ipynb", "probe"),
    ("01_environment.ipynb", "environment"),
    ("02_agent_tools.ipynb", "agent"),
    ("03_capacity.ipynb", "capacity"),
    ("04_prefix_cache.ipynb", "prefix_cache"),
    ("05_operations.ipynb", "operations"),  # last: its rollback drill restarts the target
)
ACCEPTANCE_SUMMARY = "99_acceptance.ipynb"
ACCEPTANCE_AXES: tuple[str, ...] = tuple(axis for _, axis in ACCEPTANCE)
