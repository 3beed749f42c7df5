"""Self-hosted vs API, live: the same task set through each named path with one request format, one retry
policy and one quality rule, fixed (and hashed) before any result is read. `k3 paths -p FILE` runs it."""

from __future__ import annotations

from .notebook import LiveSection, live_figure, live_section
from .config import Endpoint, PathsParams, RequestFormat, load_paths_params
from .record import (PathsResult, PathSummary, PairedDifference, TaskOutcome, compare_fixed, read_paths_record,
                     write_schema)
from .figures import paths_lines
from .run import check_endpoints, fixed_elements, run_paths
from .tasks import QualityRule, Task, TaskSet, builtin_task_set, load_task_set

__all__ = [
    "Endpoint",
    "LiveSection",
    "PairedDifference",
    "PathSummary",
    "PathsParams",
    "PathsResult",
    "QualityRule",
    "RequestFormat",
    "Task",
    "TaskOutcome",
    "TaskSet",
    "builtin_task_set",
    "check_endpoints",
    "compare_fixed",
    "fixed_elements",
    "live_figure",
    "live_section",
    "load_paths_params",
    "load_task_set",
    "paths_lines",
    "read_paths_record",
    "run_paths",
    "write_schema",
]
