"""The live incident drill: kill the engine mid-task, restore it, and answer seed 004's five questions from
what the client and the server show.

Only the OpenAI-compatible HTTP API is used against the target; the kill and restore commands are parameters
(HTTP calls or argv), so the same drill runs against the embedded emulator (its `/_emulator/*` admin paths) and
against a real server (`kubectl delete pod …`, `systemctl restart vllm`, a rollback script).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
from typing import Any, Callable, Literal

import httpx

from .params import CommandStep, DrillParams

Answer = Literal["yes", "no", "unknown"]
QUESTIONS = {
    "detected_automatically": "Is the failure detected automatically?",
    "previous_version_restored": "Can the previous version be restored?",
    "in_flight_resumed_or_cancelled": "Are in-flight tasks resumed or explicitly cancelled?",
    "api_failover_without_contract_change": "Can the agent fail over to the API without changing its contract?",
    "fields_preserved": "Are reasoning, content and tool-call fields kept through the recovery?",
}
_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
_USER = {"role": "user", "content": "What is the weather in Lyon? Use the tool."}


@dataclasses.dataclass(frozen=True)
class DrillAnswer:
    question: str
    answer: Answer
    evidence: str


def _reasoning(msg: dict[str, Any]) -> str | None:
    # vLLM ≥0.12 names the field `reasoning`; earlier releases `reasoning_content`
    return msg.get("reasoning") or msg.get("reasoning_content")


def _fields(msg: dict[str, Any]) -> dict[str, bool]:
    return {"reasoning": bool(_reasoning(msg)), "content": bool(msg.get("content")),
            "tool_calls": bool(msg.get("tool_calls"))}


def run_step(step: CommandStep, base_url: str, client: httpx.Client, timeout_s: float) -> str:
    """One kill/restore step; returns what happened, one line (an HTTP error reply is a result, not a failure)."""
    if step.http is not None:
        url = step.http.path if step.http.path.startswith(("http://", "https://")) else base_url + step.http.path
        try:
            r = client.request(step.http.method, url, json=step.http.json_body, timeout=timeout_s)
            out = f"{step.http.method} {step.http.path} → HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            out = f"{step.http.method} {step.http.path} → {type(exc).__name__}"
    else:
        try:
            done = subprocess.run(list(step.argv or ()), capture_output=True, timeout=timeout_s, check=False)
            out = f"{' '.join(step.argv or ())} → exit {done.returncode}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            out = f"{' '.join(step.argv or ())} → {type(exc).__name__}"
    if step.wait_s:
        time.sleep(step.wait_s)
    return out


class _InFlight(threading.Thread):
    """A long streamed task; records how it ended: finished, explicit error, silent cut, or still hanging."""

    def __init__(self, client: httpx.Client, url: str, body: dict[str, Any], timeout_s: float) -> None:
        super().__init__(daemon=True)
        self.client, self.url, self.body, self.timeout_s = client, url, body, timeout_s
        self.first_chunk = threading.Event()
        self.outcome = "hanging"
        self.detail = ""

    def run(self) -> None:
        try:
            with self.client.stream("POST", self.url, json=self.body, timeout=self.timeout_s) as r:
                if r.status_code != 200:
                    self.outcome, self.detail = "error", f"HTTP {r.status_code} before the first token"
                    self.first_chunk.set()
                    return
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        if self.outcome == "hanging":
                            self.outcome = "cut"
                            self.detail = "[DONE] without a finish_reason"
                        return
                    try:
                        event = json.loads(data)
                    except ValueError:
                        self.outcome, self.detail = "cut", f"unreadable event {data[:60]!r}"
                        return
                    if "error" in event or event.get("object") == "error":
                        err = event.get("error", event)
                        self.outcome = "error"
                        self.detail = f"error event: {err.get('message', err) if isinstance(err, dict) else err}"
                        continue
                    self.first_chunk.set()
                    for ch in event.get("choices") or []:
                        if ch.get("finish_reason"):
                            self.outcome, self.detail = "finished", f"finish_reason {ch['finish_reason']}"
            if self.outcome == "hanging":
                self.outcome, self.detail = "cut", "stream closed without [DONE] or an error"
        except httpx.TimeoutException:
            self.outcome, self.detail = "hanging", f"no end within {self.timeout_s:g} s"
        except httpx.HTTPError as exc:
            self.outcome, self.detail = "cut", f"connection dropped ({type(exc).__name__})"
        finally:
            self.first_chunk.set()


def _wait_health(client: httpx.Client, base_url: str, want_ok: bool, timeout_s: float) -> tuple[bool, float, str]:
    t0 = time.monotonic()
    last = "no reply"
    while time.monotonic() - t0 < timeout_s:
        try:
            status = client.get(f"{base_url}/health", timeout=2.0).status_code
            last = f"HTTP {status}"
            if (status == 200) == want_ok:
                return True, time.monotonic() - t0, last
        except httpx.HTTPError as exc:
            last = type(exc).__name__
            if not want_ok:
                return True, time.monotonic() - t0, last  # refusing connections is a detectable failure too
        time.sleep(0.1)
    return False, time.monotonic() - t0, last


def _chat(client: httpx.Client, base_url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float
          ) -> tuple[int, dict[str, Any]]:
    try:
        r = client.post(f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return 0, {"error": type(exc).__name__}
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {"error": "not JSON"}


def _message(reply: dict[str, Any]) -> dict[str, Any]:
    try:
        return reply["choices"][0]["message"] or {}
    except (KeyError, IndexError, TypeError):
        return {}


def _tool_turn(model: str | None, previous: dict[str, Any]) -> dict[str, Any]:
    """The second turn: the assistant's whole previous message (reasoning and tool calls included, as the Kimi K3
    docs require) followed by the tool result."""
    kept = {k: v for k, v in previous.items() if k in ("role", "content", "reasoning", "reasoning_content",
                                                       "tool_calls") and v is not None}
    call_id = (previous.get("tool_calls") or [{}])[0].get("id", "call-0")
    body = {"messages": [_USER, kept, {"role": "tool", "tool_call_id": call_id, "content": '{"temp_c": 21}'}],
            "tools": [_TOOL], "max_tokens": 128}
    if model:
        body["model"] = model
    return body


def run_drill(base_url: str, drill: DrillParams, *, api_base_url: str | None = None,
              headers: dict[str, str] | None = None, model: str | None = None,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Kill the engine while a task streams, restore it, and answer the five questions. Returns JSON-ready data."""
    headers = headers or {}
    steps: list[str] = []
    note = (log or (lambda s: None))
    t_req = drill.request_timeout_s
    with httpx.Client(headers=headers) as client:
        if model is None:
            try:
                model = client.get(f"{base_url}/v1/models", timeout=t_req).json()["data"][0]["id"]
            except (httpx.HTTPError, ValueError, KeyError, IndexError):
                model = None
        version_before = _version(client, base_url, t_req)
        first = {"messages": [_USER], "tools": [_TOOL], "max_tokens": 256,
                 "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
        if model:
            first["model"] = model
        status, reply = _chat(client, base_url, first, headers, t_req)
        before_msg = _message(reply)
        status2, reply2 = _chat(client, base_url, _tool_turn(model, before_msg), headers, t_req)
        before_fields = {"call": _fields(before_msg), "answer": _fields(_message(reply2))}
        steps.append(f"baseline: tool call HTTP {status}, tool answer HTTP {status2}, fields {before_fields}")
        note(steps[-1])

        inflight_body = {"messages": [{"role": "user", "content": "Write a long report on GPU capacity planning."}],
                         "max_tokens": 2048, "ignore_eos": True, "stream": True}
        if model:
            inflight_body["model"] = model
        task = _InFlight(client, f"{base_url}/v1/chat/completions", inflight_body, drill.recovery_timeout_s)
        task.start()
        task.first_chunk.wait(t_req)
        steps += [f"kill: {run_step(s, base_url, client, t_req)}" for s in drill.kill]
        note("; ".join(steps[-len(drill.kill):]) if drill.kill else "kill: no command given")
        detected, detect_s, health = _wait_health(client, base_url, False, drill.recovery_timeout_s)
        steps.append(f"health after kill: {health} after {detect_s:.1f} s")
        task.join(drill.recovery_timeout_s)
        steps.append(f"in-flight task: {task.outcome} ({task.detail})")
        t0 = time.monotonic()
        steps += [f"restore: {run_step(s, base_url, client, t_req)}" for s in drill.restore]
        restored, _, health_after = _wait_health(client, base_url, True, drill.recovery_timeout_s)
        recovery_s = time.monotonic() - t0
        version_after = _version(client, base_url, t_req)
        steps.append(f"health after restore: {health_after} after {recovery_s:.1f} s; version {version_before} → "
                     f"{version_after}")

        status3, reply3 = _chat(client, base_url, first, headers, t_req) if restored else (0, {})
        after_call = _message(reply3)
        status4, reply4 = _chat(client, base_url, _tool_turn(model, after_call or before_msg), headers, t_req) \
            if restored else (0, {})
        after_fields = {"call": _fields(after_call), "answer": _fields(_message(reply4))}
        # the conversation started before the kill, continued after it with the whole previous message
        status5, reply5 = _chat(client, base_url, _tool_turn(model, before_msg), headers, t_req) if restored else (0, {})
        steps.append(f"after restore: tool call HTTP {status3}, tool answer HTTP {status4}, resumed conversation "
                     f"HTTP {status5}, fields {after_fields}")

        failover = None
        if api_base_url:
            # the identical request bodies, only the base URL changes: the agent's contract is untouched
            api_first = _chat(client, api_base_url, first, headers, t_req)
            api_turn = _chat(client, api_base_url, _tool_turn(model, before_msg), headers, t_req)
            failover = {"call": (api_first[0], _fields(_message(api_first[1]))),
                        "answer": (api_turn[0], _fields(_message(api_turn[1])))}
            steps.append(f"fail-over to {api_base_url}: tool call HTTP {api_first[0]}, tool answer HTTP {api_turn[0]}")

    answers = {
        "detected_automatically": DrillAnswer(
            QUESTIONS["detected_automatically"], "yes" if detected else "no",
            f"/health went to {health} {detect_s:.1f} s after the kill" if detected
            else f"/health still {health} {drill.recovery_timeout_s:g} s after the kill"),
        "previous_version_restored": DrillAnswer(
            QUESTIONS["previous_version_restored"],
            "unknown" if not drill.restore else
            "yes" if restored and version_after == version_before and status3 == 200 else "no",
            "no restore command in the parameters" if not drill.restore else
            f"healthy again after {recovery_s:.1f} s, version {version_before} → {version_after}, "
            f"first request HTTP {status3}"),
        "in_flight_resumed_or_cancelled": DrillAnswer(
            QUESTIONS["in_flight_resumed_or_cancelled"],
            # a task that outlived an engine that never went down says nothing about recovery
            "unknown" if not detected else "yes" if task.outcome in ("error", "finished") else "no",
            f"the engine was never seen down; the streamed task: {task.outcome} ({task.detail})" if not detected
            else f"the streamed task ended with: {task.detail}" if task.outcome != "hanging"
            else f"the streamed task was left hanging ({task.detail})"),
        "api_failover_without_contract_change": DrillAnswer(
            QUESTIONS["api_failover_without_contract_change"],
            "unknown" if failover is None else
            "yes" if failover["call"][0] == 200 and failover["answer"][0] == 200
            and failover["call"][1]["tool_calls"] and failover["answer"][1]["content"] else "no",
            "no API base URL configured (review.drill.api_base_url)" if failover is None else
            f"the same request bodies on the API: tool call HTTP {failover['call'][0]} with fields "
            f"{failover['call'][1]}, tool answer HTTP {failover['answer'][0]} with fields {failover['answer'][1]}"),
        "fields_preserved": DrillAnswer(
            QUESTIONS["fields_preserved"],
            "yes" if restored and status5 == 200 and after_fields == before_fields
            and before_fields["call"]["reasoning"] and before_fields["call"]["tool_calls"] else "no",
            f"before {before_fields}, after {after_fields}; the pre-kill conversation resumed with its reasoning "
            f"and tool calls: HTTP {status5}"),
    }
    n_yes = sum(a.answer == "yes" for a in answers.values())
    return {"target": base_url, "api": api_base_url, "answers": {k: dataclasses.asdict(a) for k, a in answers.items()},
            "steps": steps, "recovery_s": round(recovery_s, 2),
            "summary": f"{n_yes}/5 questions answered yes"
            + "".join(f"; {k}: {a.answer}" for k, a in answers.items() if a.answer != "yes")}


def _version(client: httpx.Client, base_url: str, timeout_s: float) -> str | None:
    try:
        r = client.get(f"{base_url}/version", timeout=timeout_s)
        return r.json().get("version") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
