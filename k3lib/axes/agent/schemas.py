"""The JSON Schema suite of the vendor contract check: tool parameter schemas in the shapes Kimi-Vendor-Verifier's
K3 suite covers (alternatives, `$defs`/`$ref`, numeric ranges, enums and consts, nested arrays, type arrays), written
for this kit. Each is offered as a `strict` tool under `tool_choice: "required"`; the arguments that come back must
validate (Draft 2020-12, formats checked). No `pattern`: the point is the grammar's schema coverage and the
argument encoding, not a regular-expression engine.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .shapes import JsonObject, ToolDef

#: The tool every suite case is offered as (one tool, forced: the call must come and must validate).
TOOL_NAME = "record_case"  # names no kit: the contract check looks like any client's request


def _object(properties: JsonObject, defs: JsonObject | None = None) -> JsonObject:
    out: JsonObject = {"type": "object", "properties": properties, "required": list(properties),
                       "additionalProperties": False}
    if defs is not None:
        out["$defs"] = defs
    return out


SCHEMA_SUITE: Mapping[str, JsonObject] = MappingProxyType({
    "any_of": _object({
        "target": {"anyOf": [{"type": "string", "minLength": 3, "maxLength": 40}, {"type": "integer", "minimum": 1}]},
        "note": {"anyOf": [{"type": "string", "maxLength": 80}, {"type": "null"}]},
    }),
    "defs_ref": _object({
        "ship_to": {"$ref": "#/$defs/address"},
        "bill_to": {"$ref": "#/$defs/address"},
    }, defs={"address": _object({
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "country": {"type": "string", "minLength": 2, "maxLength": 2},
    })}),
    "ranges": _object({
        "quantity": {"type": "integer", "minimum": 1, "maximum": 12},
        "discount": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "step": {"type": "integer", "minimum": 10, "multipleOf": 5},
    }),
    "enums": _object({
        "priority": {"enum": ["urgent", "normal", "minor"]},
        "channel": {"type": "string", "enum": ["email", "sms", "pager"]},
        "level": {"type": "integer", "enum": [1, 2, 3]},
        "source": {"const": "catalog"},
    }),
    "nested_arrays": _object({
        "matrix": {"type": "array", "minItems": 2, "maxItems": 3,
                   "items": {"type": "array", "minItems": 2, "maxItems": 4, "items": {"type": "integer"}}},
        "labels": {"type": "array", "minItems": 1, "maxItems": 4,
                   "items": _object({"key": {"type": "string", "minLength": 1}, "value": {"type": "string"}})},
    }),
    "type_arrays": _object({
        "count": {"type": ["integer", "null"]},
        "label": {"type": ["string"], "minLength": 1},
        "flags": {"type": "array", "items": {"type": ["boolean"]}, "maxItems": 3},
    }),
})


def suite_tool(schema: JsonObject) -> ToolDef:
    """One suite case as a strict tool."""
    return {"type": "function", "function": {"name": TOOL_NAME, "strict": True, "parameters": dict(schema),
                                             "description": "Record one structured case; every argument is "
                                                            "required and must satisfy the schema."}}
