"""Axis 3, memory capacity: five bounded phases (cold load, long context, progressive concurrency, soak, agent
sessions) on one wall clock, an OOM turned into a class and a decision, and the saturation point that caps limited
traffic."""

from .analysis import judge_step, memory_growth, saturation_point, settled_stats, soak_analysis
from .classify import LogVerdict, OomClassification, classify_log, classify_oom
from .server import server_config
from .figures import (configuration_table, decision_table, long_context_table, oom_figure, oom_lines, phase_figure,
                      phases_table, ranks_table, steps_table)
from .judge import capacity_record, implied_decision, iter_findings, traffic_cap
from .ranks import rank_findings, rank_window
from .result import CapacityResult, oom_event, read_capacity
from .roofline import roofline, roofline_figure, roofline_findings, roofline_table
from .window import failure_kind
from .run import CapacityRunner, Timeline, run_capacity
from .sessionviews import session_figure, session_levels_table, session_turns_table
from .shape import PHASES, CapacityPlan, plan_capacity

__all__ = [
    "CapacityPlan",
    "CapacityResult",
    "CapacityRunner",
    "LogVerdict",
    "OomClassification",
    "PHASES",
    "Timeline",
    "capacity_record",
    "classify_log",
    "classify_oom",
    "configuration_table",
    "decision_table",
    "failure_kind",
    "implied_decision",
    "iter_findings",
    "judge_step",
    "long_context_table",
    "memory_growth",
    "oom_event",
    "oom_figure",
    "oom_lines",
    "phase_figure",
    "phases_table",
    "plan_capacity",
    "rank_findings",
    "rank_window",
    "ranks_table",
    "read_capacity",
    "roofline",
    "roofline_figure",
    "roofline_findings",
    "roofline_table",
    "run_capacity",
    "saturation_point",
    "server_config",
    "session_figure",
    "session_levels_table",
    "session_turns_table",
    "settled_stats",
    "soak_analysis",
    "steps_table",
    "traffic_cap",
]
