"""The sample's tools, run locally: small deterministic Python functions the client executes as an agent would.

Results depend only on the arguments (a blake2b hash, never `hash()`, which is salted per process), so every
repetition of the scenario gets the same result for the same call and a final answer can be checked against it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ...core.jsonvalue import JsonValue

from ..shapes import JsonObject


def _stable_int(text: str, modulo: int) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big") % modulo


def lookup_order(order_id: str, include_items: bool = False) -> JsonObject:
    # the value a final answer must quote comes first: a reply cut by max_tokens still carries it
    out: JsonObject = {"tracking_code": f"ZX-{10000 + _stable_int(order_id, 90000)}", "order_id": order_id,
                           "status": "shipped", "carrier": "DHL"}
    if include_items:
        out["items"] = ["USB-C cable", "desk lamp"]
    return out


def get_weather(location: Mapping[str, JsonValue], unit: str) -> JsonObject:
    return {"conditions": "light rain", "temperature": 7 if unit == "celsius" else 44.6, "unit": unit,
            "city": str(location.get("city", ""))}


def create_ticket(title: str, priority: str, customer: Mapping[str, JsonValue], tags: Any = ()) -> JsonObject:
    return {"ticket_id": f"TCK-{1000 + _stable_int(title, 9000)}", "status": "open", "priority": priority}


BUILTIN_TOOLS: Mapping[str, Callable[..., Any]] = MappingProxyType({
    "lookup_order": lookup_order,
    "get_weather": get_weather,
    "create_ticket": create_ticket,
})


def execute(name: str, arguments: Mapping[str, JsonValue], canned: Any = None) -> Any:
    """Run one tool on already-validated arguments: the canned result when the sample gives one, else the
    built-in. A built-in that raises becomes an error result, the way an agent framework reports it."""
    if canned is not None:
        return canned
    fn = BUILTIN_TOOLS[name]
    try:
        return fn(**arguments)
    except Exception as exc:  # noqa: BLE001 — a tool failure is a result the model must see, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"}


def result_text(result: Any) -> str:
    """The tool message content: compact JSON, as most agent frameworks send it."""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
