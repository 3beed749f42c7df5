"""The emulated model's tool-calling policy, schema-valid argument synthesis, and kimi_k3 markup.

Policy (deterministic, so tests and the agent axis can rely on it):
- `tool_choice` naming a function → that function is called; `"required"` → the best-matching tool (the
  first tool when none matches); `"none"` → no call.
- `"auto"` (or omitted, with auto tool choice on): if the last message is a `tool` result, no call — the
  model answers using the result. Otherwise a tool is called when the last user message mentions its name
  or a word (≥ 4 letters) of its name split on `_`/`-`/`.` (e.g. "weather" → `get_weather`); every
  matching tool is called (only the first when `parallel_tool_calls` is false), in the order offered.
- Arguments: an instance of the tool's JSON Schema with all properties (required first), enums and
  consts honoured, nested objects/arrays filled, strings taken from capitalised or quoted words of the
  user message where the schema allows any string.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9]+")


def tool_name(tool: dict) -> str:
    return str((tool.get("function") or {}).get("name") or tool.get("name") or "")


def tool_schema(tool: dict) -> dict:
    schema = (tool.get("function") or {}).get("parameters") or tool.get("parameters")
    return schema if isinstance(schema, dict) else {"type": "object", "properties": {}}


def _keywords(name: str) -> set[str]:
    words = {w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if len(w) >= 4}
    return words | {name.lower()}


def choose_tools(tools: Sequence[dict], tool_choice: Any, user_text: str, *, last_role: str,
                 parallel: bool = True) -> list[dict]:
    """Which tools the emulated model calls for this turn (see the module docstring)."""
    if not tools or tool_choice == "none":
        return []
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
        return [t for t in tools if tool_name(t) == wanted][:1]
    text = user_text.lower()
    matches = [t for t in tools if any(k in text for k in _keywords(tool_name(t)))]
    if tool_choice == "required":
        return (matches or list(tools))[: (None if parallel else 1)]
    if last_role == "tool":
        return []
    return matches[: (None if parallel else 1)]


def string_hints(user_text: str) -> list[str]:
    quoted = re.findall(r'"([^"]{1,60})"', user_text)
    words = user_text.split()
    caps = [w.strip(".,;:!?()'\"") for w in words[1:] if w[:1].isupper()]
    return [h for h in quoted + caps if h] or ["example"]


def _resolve(schema: dict, root: dict) -> dict:
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 20:
        ref = schema["$ref"]
        node: Any = root
        for part in ref.lstrip("#/").split("/") if ref.startswith("#") else []:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        schema = node if isinstance(node, dict) else {}
        seen += 1
    return schema


def instance_for(schema: Any, hints: list[str], root: dict | None = None, *, depth: int = 0,
                 key: str = "", context: str = "") -> Any:
    """A value valid against `schema` (the common JSON Schema keywords), deterministic in its inputs."""
    root = root if root is not None else (schema if isinstance(schema, dict) else {})
    if not isinstance(schema, dict) or depth > 8:
        return "example"
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        low = (context or " ".join(hints)).lower()
        for option in schema["enum"]:
            if isinstance(option, str) and option.lower() in low:
                return option
        return schema["enum"][0]
    for combo in ("anyOf", "oneOf"):
        if schema.get(combo):
            options = [s for s in schema[combo] if _resolve(s, root).get("type") != "null"] or schema[combo]
            return instance_for(options[0], hints, root, depth=depth + 1, key=key, context=context)
    if schema.get("allOf"):
        merged: dict = {}
        for part in schema["allOf"]:
            part = _resolve(part, root)
            merged.setdefault("properties", {}).update(part.get("properties", {}))
            merged.setdefault("required", []).extend(part.get("required", []))
            merged.setdefault("type", part.get("type", "object"))
        return instance_for(merged, hints, root, depth=depth + 1, key=key, context=context)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required", []) if k in props] + \
                   [k for k in schema.get("required", []) if k not in props]
        order = required + [k for k in props if k not in required]
        out = {}
        for i, name in enumerate(order):
            sub = props.get(name, {"type": "string"})
            out[name] = instance_for(sub, hints[i % len(hints):] + hints[:i % len(hints)], root,
                                     depth=depth + 1, key=name, context=context)
        return out
    if kind == "array":
        n = max(int(schema.get("minItems", 1)), 1)
        if "maxItems" in schema:
            n = min(n, int(schema["maxItems"]))
        items = schema.get("items", {"type": "string"})
        values = [instance_for(items, hints[i % len(hints):] + hints[:i % len(hints)], root, depth=depth + 1,
                               key=key, context=context) for i in range(n)]
        if schema.get("uniqueItems"):
            values = values[:1]
        return values
    if kind == "integer":
        return _number(schema, 1, integer=True)
    if kind == "number":
        return _number(schema, 1.5, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema, hints)


def _number(schema: dict, default: float, *, integer: bool) -> float | int:
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    if schema.get("exclusiveMinimum") is not None and not isinstance(schema.get("exclusiveMinimum"), bool):
        lo = schema["exclusiveMinimum"] + (1 if integer else 0.5)
    if schema.get("exclusiveMaximum") is not None and not isinstance(schema.get("exclusiveMaximum"), bool):
        hi = schema["exclusiveMaximum"] - (1 if integer else 0.5)
    value = default
    if lo is not None:
        value = max(value, lo)
    if hi is not None:
        value = min(value, hi)
    mult = schema.get("multipleOf")
    if mult:
        value = mult * math.ceil(value / mult - 1e-9)   # the smallest multiple not below the lower bound
    return int(value) if integer else float(value)


def _string(schema: dict, hints: list[str]) -> str:
    fmt = schema.get("format")
    value = {"date": "2026-08-13", "date-time": "2026-08-13T09:00:00Z", "time": "09:00:00",
             "email": "ops@example.com", "uri": "https://example.com/", "url": "https://example.com/",
             "uuid": "00000000-0000-4000-8000-000000000000", "ipv4": "192.0.2.1"}.get(fmt or "")
    if value is None:
        value = hints[0] if hints else "example"
        if schema.get("pattern"):
            try:
                if not re.search(schema["pattern"], value):
                    value = "example" if re.search(schema["pattern"], "example") else value
            except re.error:
                pass
    lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
    if len(value) < lo:
        value = value + "x" * (lo - len(value))
    if hi is not None:
        value = value[: int(hi)]
    return value


def break_arguments(args: dict, schema: dict, draw: float) -> str:
    """A defective arguments string (bad-tool-args): truncated JSON, or JSON that breaks the schema."""
    text = json.dumps(args, ensure_ascii=False)
    if draw < 0.5 or not args:
        return text[:-1] if len(text) > 2 else '{"'          # unterminated object: invalid JSON
    required = [k for k in schema.get("required", []) if k in args]
    broken = dict(args)
    if required:
        del broken[required[0]]                              # a required field missing
    else:
        first = next(iter(broken))
        broken[first] = [] if not isinstance(broken[first], list) else "oops"   # wrong type
    return json.dumps(broken, ensure_ascii=False)


def loosen_arguments(args: dict, schema: dict) -> dict:
    """Forced-call arguments as vLLM 0.32's kimi_k3 structural tag lets them through (loose-strict-args): the first
    required key missing, a key the schema does not know added."""
    loose = dict(args)
    required = [k for k in schema.get("required", []) if k in loose]
    if required:
        del loose[required[0]]
    loose["unexpected_key"] = "extra"
    return loose


def kimi_k3_markup(calls: Sequence[tuple[str, dict]]) -> str:
    """The raw kimi_k3 (XTML) tool-call section the model emits; leaks into content when the parser misses it."""
    out = ["<|open|>tools<|sep|>\n"]
    for index, (name, args) in enumerate(calls, start=1):
        out.append(f'  <|open|>call tool="{name}" index="{index}"<|sep|>\n')
        for key, value in args.items():
            kind = {str: "string", bool: "boolean", int: "integer", float: "number"}.get(type(value), "json")
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            out.append(f'    <|open|>argument key="{key}" type="{kind}"<|sep|>{text}<|close|>argument<|sep|>\n')
        out.append("  <|close|>call<|sep|>\n")
    out.append("<|close|>tools<|sep|>")
    return "".join(out)
