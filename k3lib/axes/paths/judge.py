"""The quality rule applied to one task's exchange — the same pure function for every path, never raises."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..agent.checks import schema_errors
from ...io.chatstream import ToolCall
from ...io.readers.tool_markup import detect_markup
from .tasks import QualityRule


@dataclass(frozen=True)
class Exchange:
    """What a path did with one task: the final answer and every tool call it made on the way."""

    final: str | None
    finish_reason: str | None
    calls: Sequence[ToolCall]
    offered: Mapping[str, Mapping[str, Any]]  # tool name → parameter schema
    error_returned: bool  # the planned tool error was handed to the model
    retried_after_error: bool  # … and it called the tool again, which then succeeded
    last_result: Any  # the last successful tool result


def call_problem(call: ToolCall, offered: Mapping[str, Mapping[str, Any]],
                 schema: Mapping[str, Any] | None = None) -> str | None:
    """Why a tool call is malformed (not offered, arguments not a JSON object valid against the schema), or None."""
    if not (isinstance(call.name, str) and call.name in offered):
        return f"{call.name!r} is not an offered tool"
    if call.json_error:
        return f"{call.name}: {call.json_error}"
    if not isinstance(call.parsed, dict):
        return f"{call.name}: arguments are a JSON {type(call.parsed).__name__}, not an object"
    errors = schema_errors(call.parsed, schema if schema is not None else offered[call.name])
    return f"{call.name}: arguments break the schema: {errors[0]}" if errors else None


def _mentions(text: str, needle: str) -> bool:
    return needle.lower() in text.lower()


def judge(rule: QualityRule, ex: Exchange) -> list[str]:
    """The reasons the task is not accepted under `rule`; empty: accepted."""
    why: list[str] = []
    text = ex.final or ""
    for call in ex.calls:
        expected = next((c for c in rule.expect_calls if c.name == call.name), None)
        problem = call_problem(call, ex.offered, expected.arguments_schema if expected else None)
        if problem:
            why.append(f"malformed tool call: {problem}")
    called = {c.name for c in ex.calls}
    why += [f"expected a call of {c.name}, none made" for c in rule.expect_calls if c.name not in called]
    if detect_markup(text):
        return why + [f"{detect_markup(text)} tool-call markup instead of an answer"]
    if not text.strip():
        return why + ["empty final answer"]
    if ex.finish_reason == "length":
        why.append("final answer cut by max_tokens (finish_reason length)")
    if rule.final_schema is not None:
        try:
            errors = schema_errors(json.loads(text), rule.final_schema)
            if errors:
                why.append(f"final answer breaks its JSON Schema: {errors[0]}")
        except ValueError as exc:
            why.append(f"final answer is not JSON: {exc}")
    if rule.regex is not None and not re.search(rule.regex, text, re.DOTALL):
        why.append(f"final answer does not match {rule.regex!r}")
    err = rule.tool_error
    if err is not None and ex.error_returned and not ex.retried_after_error:
        invented = [s for s in err.must_not_contain if _mentions(text, s)]
        if invented:
            why.append(f"states {invented} although the tool failed")
        if not any(_mentions(text, s) for s in err.acknowledge_any):
            why.append(f"does not acknowledge the tool error (none of {list(err.acknowledge_any)})")
        return why  # no successful result to use
    for key in rule.uses_result:
        value = ex.last_result.get(key) if isinstance(ex.last_result, Mapping) else None
        if value is None:
            why.append(f"no tool result with {key!r} to use")
        elif not _mentions(text, str(value)):
            why.append(f"does not use the tool result: {key}={value!r} is missing")
    return why
