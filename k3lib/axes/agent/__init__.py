"""Acceptance axis 2: the reference agent scenario and the tool-call contract, under load.

`run_agent(ctx)` (`run.py`) plays the sample at each concurrency level and writes every request to the run folder;
`agent_record(result, ctx)` (`judge.py`) turns it into findings; the tables and the figure (`figures.py`) show it.
`load_agent_result(store)` re-renders a finished run.
"""

from __future__ import annotations

from .checks import CHECKS, CheckResult, ParsedCall, environment_refusal, rates, stability_outcomes
from .contract import ContractCheck
from .series import ToolTurnSeries
from .serving import SPEC_DECODE, tool_strict_settings
from .figures import (FailingReply, cases_table, contract_table, failing_example, rates_figure, rates_table,
                      steps_table, turns_table)
from .judge import agent_record, iter_findings
from .result import CONTRACT_FILE, RUN_FILE, STEPS_FILE, TURNS_FILE, AgentResult
from .run import load_agent_result, run_agent, sample_summary
from .scenario import RunSettings, ScenarioRunner, assistant_message, filler_lines
from .sample import AgentSample, load_sample, packaged_sample_path, parse_sample
from .tools import BUILTIN_TOOLS

__all__ = [
    "AgentResult",
    "AgentSample",
    "BUILTIN_TOOLS",
    "CHECKS",
    "CONTRACT_FILE",
    "CheckResult",
    "ContractCheck",
    "FailingReply",
    "ParsedCall",
    "RUN_FILE",
    "RunSettings",
    "STEPS_FILE",
    "ScenarioRunner",
    "TURNS_FILE",
    "ToolTurnSeries",
    "agent_record",
    "assistant_message",
    "cases_table",
    "contract_table",
    "environment_refusal",
    "failing_example",
    "filler_lines",
    "iter_findings",
    "load_agent_result",
    "load_sample",
    "packaged_sample_path",
    "parse_sample",
    "rates",
    "rates_figure",
    "rates_table",
    "run_agent",
    "sample_summary",
    "stability_outcomes",
    "steps_table",
    "turns_table",
]
