"""A JSON value as `json.loads` gives it, for the fields that truly hold arbitrary JSON (a tool's parameter schema,
a template's switches, a status file's counters): a type, not `Any`, so a reader narrows what it takes out."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JsonObject", "JsonValue"]

JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
#: a JSON object: its keys are strings, its values JSON
JsonObject: TypeAlias = "dict[str, JsonValue]"
