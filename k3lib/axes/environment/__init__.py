"""Axis 1, the compatibility chain: CUDA build, host driver branch, vLLM version, image, GPUs and flags, read from
every proof at hand and compared with the recipe at three levels (host, container, engine)."""

from .figures import environment_table, findings_table
from .judge import EnvironmentResult, environment_record, evaluate, iter_findings, table_rows
from .rules import RULES, RuleSpec
from .run import check_environment, gather_sources
from .sources import (EnvironmentSources, ImageRef, SourceText, ToolChoiceProbe, classify_tool_probe,
                      parse_image_inspect, read_sources, sources_from_texts)
from .values import in_range, parse_flag, parse_version

__all__ = [
    "EnvironmentResult",
    "EnvironmentSources",
    "ImageRef",
    "RULES",
    "RuleSpec",
    "SourceText",
    "ToolChoiceProbe",
    "check_environment",
    "classify_tool_probe",
    "environment_record",
    "environment_table",
    "evaluate",
    "findings_table",
    "gather_sources",
    "in_range",
    "iter_findings",
    "parse_flag",
    "parse_image_inspect",
    "parse_version",
    "read_sources",
    "sources_from_texts",
    "table_rows",
]
