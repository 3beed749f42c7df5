"""The task set both paths run, and each task's quality rule — validated when read, one line per bad field.

A task set file is YAML (`name:`, optional `tools:` shared by its tasks, `tasks:`) or JSONL (one task per line).
A task is one chat request (messages, the tools it offers, `tool_choice`, `response_format`) plus the rule that
decides whether its final answer is accepted: a JSON Schema of the final answer, the tool calls expected with their
argument schemas, a regex, and/or "a tool error must be acknowledged". The built-in set is the acceptance axis'
reference agent sample (`k3lib/data/agent_sample.yaml`), one task per answered turn.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..agent.sample import AgentSample, ToolSpec, _check_schema, check_response_format, load_sample
from ...core.errors import BadInputError
from ...core.yamlsafe import safe_load as yaml_load
from ...core.layering import validate_model
from .shapes import JsonObject, TaskSetRequest

BUILTIN = "builtin"
REFERENCE = "k3lib/data/agent_sample.yaml (the built-in task set)"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExpectedCall(_Strict):
    """A tool the task must call; every call of it must carry arguments valid against `arguments_schema`
    (default: the tool's own parameter schema)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    arguments_schema: JsonObject | None = None

    @field_validator("arguments_schema")
    @classmethod
    def _schema(cls, v: JsonObject | None) -> JsonObject | None:
        return v if v is None else _check_schema(v, "arguments_schema")


class ToolErrorRule(_Strict):
    """The first execution of an expected tool returns `result` (an error); the final answer must then either
    acknowledge it (one of `acknowledge_any`, none of `must_not_contain`) or come after a successful retry."""

    result: JsonObject
    acknowledge_any: Annotated[tuple[str, ...], Field(min_length=1)]
    must_not_contain: tuple[str, ...] = ()


class QualityRule(_Strict):
    """What makes a task's final answer accepted; every part given must hold (a non-empty, complete answer always)."""

    final_schema: JsonObject | None = None  # the final answer, parsed as JSON, validates against it
    expect_calls: tuple[ExpectedCall, ...] = ()
    regex: str | None = None  # re.search over the final answer (DOTALL)
    uses_result: tuple[str, ...] = ()  # keys of the last successful tool result whose values must appear
    tool_error: ToolErrorRule | None = None

    @field_validator("final_schema")
    @classmethod
    def _schema(cls, v: JsonObject | None) -> JsonObject | None:
        return v if v is None else _check_schema(v, "final_schema")

    @field_validator("regex")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _error_needs_call(self) -> "QualityRule":
        if self.tool_error is not None and not self.expect_calls:
            raise ValueError("a tool_error rule needs expect_calls (which tool fails)")
        return self


class Task(_Strict):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
    category: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")] = "default"
    title: str = ""
    messages: Annotated[tuple[JsonObject, ...], Field(min_length=1)]
    tools: Literal["all", "none"] | tuple[str | ToolSpec, ...] = "none"
    tool_choice: Literal["auto", "required", "none"] | None = None
    response_format: JsonObject | None = None
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    quality: QualityRule = QualityRule()

    @field_validator("messages")
    @classmethod
    def _messages(cls, v: tuple[JsonObject, ...]) -> tuple[JsonObject, ...]:
        for i, m in enumerate(v):
            if m.get("role") not in ("system", "user", "assistant", "tool"):
                raise ValueError(f"message {i}: role is system, user, assistant or tool")
            if not isinstance(m.get("content"), (str, list)):
                raise ValueError(f"message {i}: content is a string or a list of parts")
        if v[-1].get("role") != "user":
            raise ValueError("the last message is the user's request")
        return v

    @field_validator("response_format")
    @classmethod
    def _rf(cls, v: JsonObject | None) -> JsonObject | None:
        return check_response_format(v)


class TaskSetFile(_Strict):
    name: str
    version: int | str = 1
    tools: tuple[ToolSpec, ...] = ()
    tasks: Annotated[tuple[Task, ...], Field(min_length=1)]


class TaskSet(_Strict):
    """A validated set: tasks with their offered tools resolved to full specs."""

    name: str
    version: int | str
    source: str
    tools: tuple[ToolSpec, ...]
    tasks: tuple[Task, ...]

    def offered(self, task: Task) -> list[ToolSpec]:
        by_name = {t.function.name: t for t in self.tools}
        if task.tools == "all":
            return list(self.tools)
        if task.tools == "none":
            return []
        return [t if isinstance(t, ToolSpec) else by_name[t] for t in task.tools]

    def request_part(self) -> TaskSetRequest:
        """What the paths are asked (hashed as the task set): tasks without their quality rules."""
        return {"name": self.name, "version": self.version,
                "tools": [t.model_dump(mode="json") for t in self.tools],
                "tasks": [t.model_dump(mode="json", exclude={"quality"}) for t in self.tasks]}

    def quality_part(self) -> dict[str, JsonObject]:
        """What decides acceptance (hashed as the quality rule): every task's rule."""
        return {t.id: t.quality.model_dump(mode="json") for t in self.tasks}


def _resolve(raw: TaskSetFile, source: str) -> TaskSet:
    shared = {t.function.name: t for t in raw.tools}
    reference = {t.function.name: t for t in load_sample().tools}
    ids = [t.id for t in raw.tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise BadInputError(f"task id {dup!r} repeats; expected unique ids", source=source, field="tasks")
    tools = dict(shared)
    for task in raw.tasks:
        if isinstance(task.tools, tuple):
            for t in task.tools:
                name = t.function.name if isinstance(t, ToolSpec) else t
                spec = t if isinstance(t, ToolSpec) else shared.get(t) or reference.get(t)
                if spec is None:
                    raise BadInputError(f"offers unknown tool {t!r}; expected a tool of the file's tools: list "
                                        f"{sorted(shared)} or of the reference sample {sorted(reference)}",
                                        source=source, field=f"task {task.id}: tools")
                tools.setdefault(name, spec)
        names = {t.function.name for t in (raw.tools if task.tools == "all" else [])} | \
            ({(t.function.name if isinstance(t, ToolSpec) else t) for t in task.tools}
             if isinstance(task.tools, tuple) else set())
        for call in task.quality.expect_calls:
            if call.name not in names:
                raise BadInputError(f"expects a call of {call.name!r}, which the task does not offer "
                                    f"(offered: {sorted(names)})", source=source, field=f"task {task.id}: quality")
        for name in names:
            spec = tools.get(name)
            if spec is not None and spec.result is None and name not in reference:
                raise BadInputError(f"tool {name!r} has no built-in implementation; give it a canned result:",
                                    source=source, field=f"task {task.id}: tools")
    resolved = [t if isinstance(t, ToolSpec) else tools[t] for t in tools.values()]
    return TaskSet(name=raw.name, version=raw.version, source=source, tools=tuple(resolved), tasks=raw.tasks)


def parse_task_set(data: Any, source: str) -> TaskSet:
    """Validate an already-parsed set (a mapping, or a list of tasks from JSONL)."""
    if isinstance(data, list):
        tasks = []
        for n, item in enumerate(data, 1):
            if not isinstance(item, dict):
                raise BadInputError(f"expected a JSON object (one task), got {type(item).__name__}",
                                    source=f"{source}: line {n}")
            tid = item.get("id", f"line {n}")
            tasks.append(validate_model(Task, item, source=f"{source}: task {tid}", reference="a task set file"))
        data = {"name": Path(source).stem, "tasks": [t.model_dump(mode="json") for t in tasks]}
    if not isinstance(data, dict):
        raise BadInputError(f"expected a mapping (name:, tools:, tasks:) or JSONL tasks, got {type(data).__name__}",
                            source=source)
    for item in data.get("tasks") or () if isinstance(data.get("tasks"), list) else ():
        if isinstance(item, dict):  # name the task, not its index, in the error line
            validate_model(Task, item, source=f"{source}: task {item.get('id', '?')}", reference="a task set file")
    raw = validate_model(TaskSetFile, data, source=source, reference="a task set file")
    return _resolve(raw, source)


def load_task_set(path: str | Path) -> TaskSet:
    """`builtin` (the reference agent sample) or a YAML / JSONL task set file."""
    if str(path) == BUILTIN:
        return builtin_task_set()
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError("file not found; expected a task set (YAML or JSONL) or `builtin`",
                            source=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read: {exc}", source=str(p)) from None
    if p.suffix == ".jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BadInputError(f"not valid JSON ({exc.msg}); expected one task object per line",
                                    source=f"{p}: line {n}") from None
        if not items:
            raise BadInputError("no tasks; expected one task object per line", source=str(p))
        return parse_task_set(items, str(p))
    try:
        data = yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise BadInputError(f"{'line ' + str(mark.line + 1) + ': ' if mark else ''}not valid YAML"
                            f" ({getattr(exc, 'problem', None) or 'unreadable'})",
                            source=str(p)) from None
    return parse_task_set(data, str(p))


def builtin_task_set(sample: AgentSample | None = None) -> TaskSet:
    """The reference agent sample as a task set: one task per turn that is not context filler or an image
    (the live comparison sends each turn on its own, after the system prompt), its contract as the quality rule."""
    sample = sample or load_sample()
    tasks = []
    for case in sample.cases:
        if case.requires_images:
            continue
        answered = [(i, t) for i, t in enumerate(case.turns) if not t.filler]
        for i, turn in answered:
            if isinstance(turn.user, tuple):
                continue
            offered = sample.offered(case)
            expect = ((ExpectedCall(name=turn.expect_tool),) if turn.expect_tool else ())
            err = None
            if turn.tool_error is not None and turn.fallback is not None:
                err = ToolErrorRule(result=turn.tool_error, acknowledge_any=turn.fallback.acknowledge_any,
                                    must_not_contain=turn.fallback.must_not_contain)
            quality = QualityRule(final_schema=turn.final_schema(), expect_calls=expect,
                                  uses_result=turn.final.uses_result, tool_error=err)
            tasks.append(Task(id=case.id if len(answered) == 1 else f"{case.id}.t{i}", category=case.id,
                              title=case.title, tools=tuple(offered) if offered else "none",
                              messages=({"role": "system", "content": sample.system_prompt},
                                        {"role": "user", "content": turn.user}),
                              tool_choice=sample.tool_choice(case) if offered else None,
                              response_format=turn.response_format, max_tokens=case.max_tokens, quality=quality))
    return TaskSet(name=sample.name, version=sample.version, source=BUILTIN, tools=sample.tools, tasks=tuple(tasks))
