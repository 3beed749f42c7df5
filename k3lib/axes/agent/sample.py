"""The reference agent sample: tools, cases and turns with their contracts, validated when read.

The packaged sample is `k3lib/data/agent_sample.yaml`; a user may give their own file (YAML or JSON) through
`axes.agent.sample`. It is untrusted input: a malformed file is one `BadInputError` line naming the field.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from ...core.errors import BadInputError
from ...core.yamlsafe import safe_load as yaml_load
from ...core.layering import validate_model
from .shapes import JsonObject, ToolDef
from .tools import BUILTIN_TOOLS

PACKAGED_SAMPLE = "agent_sample.yaml"
ToolChoice = Literal["auto", "required", "none"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_schema(schema: JsonObject, what: str) -> JsonObject:
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"{what} is not a valid JSON Schema: {exc.message}") from None
    return schema


def check_response_format(v: JsonObject | None) -> JsonObject | None:
    """A request's `response_format` (the agent sample's and the paths task set's rule)."""
    if v is None:
        return v
    if v.get("type") not in ("json_schema", "json_object", "text"):
        raise ValueError("response_format.type is json_schema, json_object or text")
    if v["type"] == "json_schema":
        schema = _member(v.get("json_schema"), "schema")
        if not isinstance(schema, dict):
            raise ValueError("response_format json_schema needs json_schema.schema (an object)")
        _check_schema(schema, "response_format json_schema.schema")
    return v


def _member(v: JsonValue, key: str) -> JsonValue:
    """`v[key]` where `v` is an object that has it; None otherwise (also where `v` is null or empty)."""
    return v.get(key) if isinstance(v, dict) else None


class ToolFunction(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]  # OpenAI's function-name rule
    description: str = ""
    parameters: JsonObject

    @field_validator("parameters")
    @classmethod
    def _schema(cls, v: JsonObject) -> JsonObject:
        if v.get("type", "object") != "object":
            raise ValueError("tool parameters must be a JSON Schema of type object")
        return _check_schema(v, "tool parameters")


class ToolSpec(_Strict):
    type: Literal["function"] = "function"
    function: ToolFunction
    result: Any = None  # canned result for a tool with no built-in implementation

    def openai(self) -> ToolDef:
        """The tool as sent in the request body."""
        f = self.function
        return {"type": "function", "function": {"name": f.name, "description": f.description,
                                                 "parameters": f.parameters}}


class FinalSpec(_Strict):
    """What the answer that ends a turn must satisfy (a json_schema `response_format` is checked too)."""

    non_empty: bool = True
    contains_any: tuple[str, ...] = ()  # case-insensitive; one of them must appear
    uses_result: tuple[str, ...] = ()  # keys of the turn's last successful tool result whose values must appear


class FallbackSpec(_Strict):
    """The planned client behaviour after a tool error: one more call (a retry) or a plain acknowledgement."""

    max_retries: Annotated[int, Field(ge=0, le=5)] = 1
    acknowledge_any: Annotated[tuple[str, ...], Field(min_length=1)]
    must_not_contain: tuple[str, ...] = ()  # what an answer can only hold if it invented the failed result


class TurnSpec(_Strict):
    user: str | tuple[JsonObject, ...]  # text, or content parts ({type: text, text} / {type: image_url, ...})
    expect_tool: str | None = None
    tool_error: JsonObject | None = None  # the first execution of the expected tool returns this instead
    fallback: FallbackSpec | None = None
    response_format: JsonObject | None = None
    final: FinalSpec = FinalSpec()
    filler: bool = False  # grow the context here with deterministic log text (long exchanges)

    @field_validator("user")
    @classmethod
    def _parts(cls, v: Any) -> Any:
        if isinstance(v, tuple):
            for part in v:
                kind = part.get("type")
                if kind == "text" and isinstance(part.get("text"), str):
                    continue
                if kind == "image_url" and isinstance(_member(part.get("image_url"), "url"), str):
                    continue
                raise ValueError("a content part is {type: text, text: ...} or {type: image_url, image_url: {url}}")
        elif not v.strip():
            raise ValueError("the user message is empty")
        return v

    @field_validator("response_format")
    @classmethod
    def _response_format(cls, v: JsonObject | None) -> JsonObject | None:
        return check_response_format(v)

    @model_validator(mode="after")
    def _error_needs_plan(self) -> "TurnSpec":
        if self.tool_error is not None and (self.expect_tool is None or self.fallback is None):
            raise ValueError("a turn with tool_error needs expect_tool and its planned fallback")
        return self

    @property
    def image_parts(self) -> int:
        return sum(1 for p in self.user if p.get("type") == "image_url") if isinstance(self.user, tuple) else 0

    def final_schema(self) -> JsonObject | None:
        """The JSON Schema the final answer's content must validate against, if any."""
        rf = self.response_format or {}
        schema = _member(rf.get("json_schema"), "schema") if rf.get("type") == "json_schema" else None
        return schema if isinstance(schema, dict) else None


class CaseSpec(_Strict):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
    title: str = ""
    tools: Literal["all", "none"] | tuple[str, ...] = "all"
    tool_choice: ToolChoice | None = None  # None: the sample's default
    temperature: float | None = None
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    requires_images: bool = False
    turns: Annotated[tuple[TurnSpec, ...], Field(min_length=1)]


class DefaultsSpec(_Strict):
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.0
    max_tokens: Annotated[int, Field(gt=0)] = 1024
    tool_choice: ToolChoice | None = "auto"  # None: the field is not sent


class AgentSample(_Strict):
    name: str
    version: int | str = 1
    system_prompt: Annotated[str, Field(min_length=1)]
    defaults: DefaultsSpec = DefaultsSpec()
    tools: Annotated[tuple[ToolSpec, ...], Field(min_length=1)]
    cases: Annotated[tuple[CaseSpec, ...], Field(min_length=1)]

    @model_validator(mode="after")
    def _consistent(self) -> "AgentSample":
        names = [t.function.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names repeat: {names}")
        for t in self.tools:
            if t.result is None and t.function.name not in BUILTIN_TOOLS:
                raise ValueError(f"tool {t.function.name!r} has no built-in implementation "
                                 f"({', '.join(sorted(BUILTIN_TOOLS))}); give it a canned `result:`")
        ids = [c.id for c in self.cases]
        if len(set(ids)) != len(ids):
            raise ValueError(f"case ids repeat: {ids}")
        for case in self.cases:
            offered = self.offered(case)
            for turn in case.turns:
                if turn.expect_tool is not None and turn.expect_tool not in offered:
                    raise ValueError(f"case {case.id!r} expects {turn.expect_tool!r}, which it does not offer "
                                     f"(offered: {offered})")
            if isinstance(case.tools, tuple) and set(case.tools) - set(names):
                raise ValueError(f"case {case.id!r} offers unknown tools {sorted(set(case.tools) - set(names))}")
        return self

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.function.name == name), None)

    def offered(self, case: CaseSpec) -> list[str]:
        if case.tools == "all":
            return [t.function.name for t in self.tools]
        if case.tools == "none":
            return []
        return list(case.tools)

    def tool_choice(self, case: CaseSpec) -> ToolChoice | None:
        return case.tool_choice if case.tool_choice is not None else self.defaults.tool_choice


def packaged_sample_path() -> Path:
    return Path(str(resources.files("k3lib") / "data" / PACKAGED_SAMPLE))


def parse_sample(data: Any, source: str) -> AgentSample:
    """Validate an already-parsed sample; BadInputError names the first bad field."""
    if not isinstance(data, dict):
        raise BadInputError(f"expected a mapping (name:, system_prompt:, tools:, cases:), got {type(data).__name__}",
                            source=source)
    return validate_model(AgentSample, data, source=source, reference="k3lib/data/agent_sample.yaml")


def load_sample(path: str | Path | None = None) -> AgentSample:
    """The packaged reference sample, or the user's YAML/JSON file at `path`."""
    p = packaged_sample_path() if path is None else Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError("file not found; expected an agent sample (YAML or JSON)", source=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read: {exc}", source=str(p)) from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise BadInputError(f"{where}not valid {'JSON' if p.suffix == '.json' else 'YAML'}"
                            f" ({getattr(exc, 'problem', None) or getattr(exc, 'msg', None) or 'unreadable'})",
                            source=str(p)) from None
    return parse_sample(data, str(p))
