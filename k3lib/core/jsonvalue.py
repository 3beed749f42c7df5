"""A JSON value as `json.loads` gives it, for the fields that truly hold arbitrary JSON (a tool's parameter schema,
a template's switches, a status file's counters, a server's body): a type, not `Any`, so a reader narrows what it
takes out. pydantic's `JsonValue`, so that a record's field of this type validates as JSON too."""

from __future__ import annotations

from pydantic import JsonValue

__all__ = ["JsonObject", "JsonValue"]

#: a JSON object: its keys are strings, its values JSON
JsonObject = dict[str, JsonValue]
