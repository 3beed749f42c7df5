"""The emulator's Kimi K3 agent path held to real vLLM 0.32.0 serving the tiny K3-format model with the kimi_k3
tool-call and reasoning parsers (scripts/realvllm.sh serve-k3, `make realvllm-k3`).

The same agent requests from the reference scenario (a required call, the answer after its result, a structured
turn, named and required tool choice), whole and streamed, go to both servers; what the kit relies on is compared:
the tool-call ids and their form, how the arguments arrive in a stream (whole or in pieces, in which delta), the
reasoning field's name and where it sits, `finish_reason`, the usage fields, and error statuses and texts. The
models differ (the emulator plans its reply, the fixture was trained), so texts are never compared, only forms.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

import httpx
import pytest

from k3lib.axes.agent import load_sample
from realvllm import K3_SERVED_NAME, VLLM_VERSION, RealVllm

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]

TIMEOUT = httpx.Timeout(120.0, connect=5.0)
ID_FORMS = (("chatcmpl-tool-<16 hex>", re.compile(r"chatcmpl-tool-[0-9a-f]{16}")),
            ("functions.<name>:<n>", re.compile(r"functions\.[\w-]+:\d+")))


def id_form(value: Any) -> str:
    for name, pattern in ID_FORMS:
        if isinstance(value, str) and pattern.fullmatch(value):
            return name
    return f"other ({value!r})"


def usage_form(usage: Any) -> Any:
    """Which usage fields are set (numbers as "n"), and whether reasoning tokens are counted."""
    if not isinstance(usage, dict):
        return usage
    out: dict[str, Any] = {}
    for key, value in sorted(usage.items()):
        out[key] = usage_form(value) if isinstance(value, dict) else ("n" if isinstance(value, int) else value)
    details = usage.get("completion_tokens_details") or {}
    out["reasoning_tokens>0"] = bool(details.get("reasoning_tokens"))
    return out


def message_form(body: dict[str, Any]) -> dict[str, Any]:
    choice = body["choices"][0]
    msg = choice["message"]
    calls = msg.get("tool_calls") or []
    return {"finish_reason": choice["finish_reason"],
            "fields set": sorted(k for k, v in msg.items() if v not in (None, []) and k != "content"),
            "reasoning field": [k for k in ("reasoning", "reasoning_content") if msg.get(k)],
            # a string (empty or not: the text is the model's) or null
            "content when calling": (None if not calls else "null" if msg.get("content") is None else "string"),
            "calls": [{"id": id_form(c.get("id")), "type": c.get("type"),
                       "arguments": type(json.loads(c["function"]["arguments"])).__name__} for c in calls],
            "usage": usage_form(body.get("usage"))}


def stream_form(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]
    usage = [c["usage"] for c in chunks if c.get("usage") and not c.get("choices")]
    calls: dict[int, list[dict[str, Any]]] = {}
    for d in deltas:
        for tc in d.get("tool_calls") or ():
            calls.setdefault(tc["index"], []).append(tc)
    call_forms = []
    for _, parts in sorted(calls.items()):
        first = parts[0]
        args = [p.get("function", {}).get("arguments") for p in parts]
        call_forms.append({"deltas": "one" if len(parts) == 1 else "several",
                           "first delta": sorted(k for k, v in first.items() if v is not None)
                           + sorted(f"function.{k}" for k, v in (first.get("function") or {}).items() if v),
                           "arguments": "whole in the first delta" if args[0] and json.loads(args[0]) is not None
                           and all(not a for a in args[1:]) else "in pieces",
                           "id": id_form(first.get("id"))})
    return {"finish_reason": finish[-1:] or None,
            "delta fields": sorted({k for d in deltas for k, v in d.items() if v not in (None, "", [])}),
            "reasoning field": sorted({k for d in deltas for k in ("reasoning", "reasoning_content") if d.get(k)}),
            "calls": call_forms, "usage": usage_form(usage[-1]) if usage else None}


# Requests the vendor contract check sends that a server must refuse with 400 (None: the key is left out).
REFUSED = (("required without tools", {"tools": None, "tool_choice": "required"}),
           ("empty tools", {"tools": [], "tool_choice": "required"}),
           ("invalid tool_choice", {"tool_choice": "bogus"}),
           ("json_schema without json_schema", {"tools": None, "tool_choice": None,
                                                "response_format": {"type": "json_schema"}}),
           ("unknown response_format type", {"tools": None, "tool_choice": None, "response_format": {"type": "bogus"}}),
           ("schema not an object", {"tools": None, "tool_choice": None, "response_format": {
               "type": "json_schema", "json_schema": {"name": "x", "schema": "not a schema"}}}))


def error_form(reply: Any) -> Any:
    """An error reply as compared: the message whole, or for a request-model validation failure the location of
    its first error (the list of alternatives pydantic tried is not the kit's concern)."""
    if not isinstance(reply, dict) or "error" not in reply:
        return "not an error"
    message = str(reply["error"].get("message"))
    loc = re.search(r"'loc': '([^']+)'", message)
    return f"validation error at {loc.group(1)}" if "validation error" in message and loc else message


class Side:
    """One server and the scenario's requests against it."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=TIMEOUT)
        sample = load_sample(None)
        self.system = sample.system_prompt
        self.tools = [t.openai() for t in sample.tools]
        self.cases = {c.id: c for c in sample.cases}

    def body(self, messages: list[dict[str, Any]], stream: bool = False, **extra: Any) -> dict[str, Any]:
        out = {"model": K3_SERVED_NAME, "messages": [{"role": "system", "content": self.system}, *messages],
               "max_tokens": 160, "temperature": 0, "tools": self.tools, "tool_choice": "auto", **extra}
        if stream:
            out |= {"stream": True, "stream_options": {"include_usage": True}}
        return out

    def post(self, body: dict[str, Any]) -> tuple[int, Any]:
        if not body.get("stream"):
            r = self.client.post("/v1/chat/completions", json=body)
            return r.status_code, r.json()
        chunks = []
        with self.client.stream("POST", "/v1/chat/completions", json=body) as r:
            status = r.status_code
            if status != 200:
                r.read()
                return status, r.json()
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[len("data: "):]))
        return status, chunks

    def observe(self) -> dict[str, Any]:
        user = {"role": "user", "content": self.cases["tool-call"].turns[0].user}
        out: dict[str, Any] = {}
        status, call = self.post(self.body([user]))
        out["call"] = {"status": status, **message_form(call)}
        status, chunks = self.post(self.body([user], stream=True))
        out["call-stream"] = {"status": status, **stream_form(chunks)}
        # the answer after the tool result: the reply goes back whole, as the kit's agent client sends it
        msg = call["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        back = {"role": "assistant", "content": msg.get("content"),
                **{k: msg[k] for k in ("reasoning", "reasoning_content", "tool_calls") if msg.get(k)}}
        history = [user, back]
        if calls:
            history.append({"role": "tool", "tool_call_id": calls[0]["id"],
                            "content": json.dumps({"tracking_code": "ZX-12345", "status": "shipped"})})
        status, body = self.post(self.body(history))
        out["answer"] = {"status": status, **message_form(body)}
        status, chunks = self.post(self.body(history, stream=True))
        out["answer-stream"] = {"status": status, **stream_form(chunks)}
        turn = self.cases["structured"].turns[0]
        structured = self.body([{"role": "user", "content": turn.user}], response_format=turn.response_format)
        del structured["tools"], structured["tool_choice"]
        status, body = self.post(structured)
        out["structured"] = {"status": status, **message_form(body)}
        # the vendor contract's request validation (k3lib.axes.agent.contract): refused before any work, and how
        for name, extra in REFUSED:
            body = {**self.body([user], **extra)}
            for key in ("tools", "tool_choice"):
                if extra.get(key, "") is None:
                    del body[key]
            status, reply = self.post(body)
            out[f"refused {name}"] = {"status": status, "error": error_form(reply)}
        for name, choice in (("named", {"type": "function", "function": {"name": "lookup_order"}}),
                             ("required", "required")):
            status, body = self.post(self.body([user], tool_choice=choice))
            out[name] = {"status": status, **(message_form(body) if status == 200 else
                                             {"error": (body.get("error") or {}).get("message", body)})}
        return out


@pytest.fixture(scope="module")
def emulated() -> Iterator[str]:
    """The emulator as vLLM 0.32.0 serving what scripts/realvllm.sh serve-k3 serves (kimi_k3 parsers)."""
    from k3lib.emulator import EmulatorConfig, start_emulator

    cfg = EmulatorConfig.from_profile("demo", vllm_version=VLLM_VERSION, served_model_name=K3_SERVED_NAME,
                                      model="models/vllm-tiny-k3", block_size=128, max_model_len=2048,
                                      tool_call_parser="kimi_k3", reasoning_parser="kimi_k3", time_scale=0.02)
    with start_emulator(cfg, host="127.0.0.1", port=0) as handle:
        yield handle.url


@pytest.fixture(scope="module")
def both(real_vllm_k3: RealVllm, emulated: str) -> dict[str, dict[str, Any]]:
    return {"vllm": Side(real_vllm_k3.base_url).observe(), "emulator": Side(emulated).observe()}


# Differences seen and kept, each with its reason (an entry that matches nothing any more fails the test too). The
# fixture's generation prompt opens the think channel as Kimi K3's does (issue 47), so a streamed answer after a
# history carrying reasoning keeps its reasoning field on vLLM as on the emulator: that difference is gone. Its
# calls follow their (empty) response channel as Kimi K3's do, so under vLLM's forced-call grammar named and required
# calls come back parsed, as the emulator plans them: that difference is gone too.
KNOWN: dict[str, str] = {}


def differences(both: dict[str, dict[str, Any]]) -> list[str]:
    real, emu = both["vllm"], both["emulator"]
    out = []
    for probe in real:
        for key in sorted(set(real[probe]) | set(emu[probe])):
            if real[probe].get(key) != emu[probe].get(key):
                out.append(f"{probe} {key}: {real[probe].get(key)!r} in vLLM, {emu[probe].get(key)!r} in the emulator")
    return out


@pytest.mark.timeout(900)
def test_the_k3_model_speaks_through_the_kimi_k3_parsers(both):
    """The real side is what the comparison needs: a parsed call with reasoning, then a parsed answer."""
    real = both["vllm"]
    assert real["call"]["status"] == 200 and real["call"]["finish_reason"] == "tool_calls", real["call"]
    assert real["call"]["reasoning field"] == ["reasoning"], real["call"]
    assert real["call-stream"]["calls"] and real["call-stream"]["finish_reason"] == ["tool_calls"], real["call-stream"]
    assert real["answer"]["finish_reason"] == "stop" and not real["answer"]["calls"], real["answer"]


@pytest.mark.timeout(900)
def test_emulator_k3_agent_path_conforms_to_vllm(both):
    import fnmatch

    found = [d for d in differences(both) if not any(fnmatch.fnmatchcase(d, k) for k in KNOWN)]
    stale = [k for k in KNOWN if not any(fnmatch.fnmatchcase(d, k) for d in differences(both))]
    assert not stale, f"known differences that are gone (remove them): {stale}"
    assert not found, "the emulator's K3 agent path differs from vLLM 0.32.0 (vLLM is right):\n" + "\n".join(found)
