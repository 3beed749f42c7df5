"""Tool calls, reasoning and structured output as vLLM serves them with the kimi_k3 parsers."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest

from k3lib.emulator import EmulatorConfig, start_emulator
from k3lib.emulator.toolcalls import instance_for

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}
BOOKING = {"type": "function", "function": {
    "name": "book_meeting",
    "parameters": {"type": "object", "required": ["title", "attendees", "slot", "priority"], "properties": {
        "title": {"type": "string", "minLength": 3, "maxLength": 40},
        "attendees": {"type": "array", "minItems": 2, "items": {"type": "string", "format": "email"}},
        "slot": {"type": "object", "required": ["start", "minutes"], "properties": {
            "start": {"type": "string", "format": "date-time"},
            "minutes": {"type": "integer", "minimum": 15, "maximum": 120}}},
        "priority": {"enum": ["low", "high"]},
        "room": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/room"}]}},
        "$defs": {"room": {"type": "object", "properties": {"floor": {"type": "integer"}}, "required": ["floor"]}},
        "additionalProperties": False}}}


@pytest.fixture(scope="module")
def client():
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02)) as h, \
            httpx.Client(base_url=h.url, timeout=20) as c:
        yield c


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_auto_tool_call_is_schema_valid(client):
    body = {"messages": [user("What is the weather in Oslo, in fahrenheit?")], "tools": [WEATHER, BOOKING],
            "tool_choice": "auto"}
    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    # vLLM 0.32's kimi_k3 parser gives each call a random id (tests/test_conformance_k3.py, on a real server)
    assert call["type"] == "function" and re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", call["id"]), call["id"]
    args = json.loads(call["function"]["arguments"])
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    assert args == {"city": "Oslo", "unit": "fahrenheit"}
    assert choice["message"]["content"] is None and choice["message"]["reasoning"]


@pytest.mark.parametrize("tool", [pytest.param(WEATHER, id="flat"), pytest.param(BOOKING, id="nested-ref-enum")])
def test_required_tool_choice_args_validate(client, tool):
    body = {"messages": [user("Please do it for the Board Review")], "tools": [tool], "tool_choice": "required"}
    call = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == tool["function"]["name"]
    jsonschema.validate(json.loads(call["function"]["arguments"]), tool["function"]["parameters"])


def test_named_tool_choice_reports_stop(client):
    body = {"messages": [user("anything")], "tools": [WEATHER, BOOKING],
            "tool_choice": {"type": "function", "function": {"name": "book_meeting"}}}
    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["book_meeting"]
    assert choice["finish_reason"] == "stop"


def test_no_matching_tool_gives_text(client):
    body = {"messages": [user("Say hello")], "tools": [WEATHER]}
    msg = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    # vLLM 0.32+ leaves `tool_calls` out of a reply without calls (seen on a real server)
    assert "tool_calls" not in msg and msg["content"]


def test_parallel_calls_get_distinct_random_ids(client):
    history = [user("weather in Rome?"),
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "functions.get_weather:0", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
               {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
               user("Now the weather in Lima and book meeting with the team")]
    msg = client.post("/v1/chat/completions", json={"messages": history, "tools": [WEATHER, BOOKING]}).json()[
        "choices"][0]["message"]
    ids = [c["id"] for c in msg["tool_calls"]]
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather", "book_meeting"]
    assert len(set(ids)) == 2 and all(re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", i) for i in ids), ids
    one = client.post("/v1/chat/completions", json={"messages": history, "tools": [WEATHER, BOOKING],
                                                    "parallel_tool_calls": False}).json()
    assert len(one["choices"][0]["message"]["tool_calls"]) == 1


def test_final_answer_uses_tool_result(client):
    msgs = [user("weather in Oslo?"),
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "functions.get_weather:0", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "{\"temp_c\": -3, \"sky\": \"snow\"}"}]
    choice = client.post("/v1/chat/completions", json={"messages": msgs, "tools": [WEATHER]}).json()["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert '"temp_c": -3' in choice["message"]["content"]


def _stream(client, body) -> list[dict]:
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
        return [json.loads(l[6:]) for l in resp.iter_lines() if l.startswith("data: {")]


def test_streamed_tool_calls_reassemble_to_non_streamed(client):
    body = {"messages": [user("weather in Oslo and book meeting for the Board")], "tools": [WEATHER, BOOKING]}
    full = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    calls: dict[int, dict] = {}
    finish = None
    for chunk in _stream(client, body):
        choice = chunk["choices"][0]
        finish = choice["finish_reason"] or finish
        for d in choice["delta"].get("tool_calls", []):
            if "id" in d:   # the first delta of a call carries id, type and name
                assert d["type"] == "function" and d["function"]["name"]
                calls[d["index"]] = {"id": d["id"], "type": "function",
                                     "function": {"name": d["function"]["name"], "arguments": ""}}
            calls[d["index"]]["function"]["arguments"] += d["function"].get("arguments", "")
    # ids are random per reply (as vLLM's kimi_k3 parser draws them): everything else is the same
    def no_id(cs):
        return [{k: v for k, v in c.items() if k != "id"} for c in cs]
    assert no_id([calls[i] for i in sorted(calls)]) == no_id(full["message"]["tool_calls"])
    assert all(re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", c["id"]) for c in calls.values())
    assert finish == full["finish_reason"] == "tool_calls"


def test_response_format_json_schema(client):
    schema = {"type": "object", "required": ["verdict", "score", "tags"], "properties": {
        "verdict": {"enum": ["go", "no-go"]}, "score": {"type": "number", "minimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}}}
    body = {"messages": [user("Decide: no-go or go?")],
            "response_format": {"type": "json_schema", "json_schema": {"name": "decision", "schema": schema}}}
    content = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(content), schema)


def test_thinking_off_drops_reasoning(client):
    body = {"messages": [user("hi")], "chat_template_kwargs": {"thinking": False}}
    msg = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert msg["reasoning"] is None and msg["content"]


def test_image_parts_cost_fixed_tokens(client):
    text_only = [{"role": "user", "content": [{"type": "text", "text": "describe"}]}]
    with_image = [{"role": "user", "content": [{"type": "text", "text": "describe"},
                                               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]}]
    a = client.post("/tokenize", json={"messages": text_only}).json()["count"]
    b = client.post("/tokenize", json={"messages": with_image}).json()["count"]
    assert b - a == 64   # the demo profile counts an image as 64 prompt tokens


@pytest.mark.parametrize("schema", [
    pytest.param({"type": "integer", "exclusiveMinimum": 10, "multipleOf": 5}, id="int-bounds"),
    pytest.param({"type": ["null", "string"], "pattern": "^[a-z]+$"}, id="nullable-pattern"),
    pytest.param({"allOf": [{"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}]},
                 id="allOf"),
    pytest.param({"type": "object", "properties": {"x": {"const": 7}}, "required": ["x"]}, id="const"),
])
def test_instance_for_is_valid(schema):
    jsonschema.validate(instance_for(schema, ["Oslo"]), schema)
