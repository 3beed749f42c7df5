"""The live incident drill: kill the engine mid-task, restore it, and answer seed 004's five questions from
what the client and the server show.

Every answer rests on an observation: "yes" only when the drill saw it happen, "no" when it saw the opposite,
"not shown" when the drill could not show it either way — a kill that took nothing down, a restore that brought
back the same version (a restart, not a rollback), a server that reports no version, a baseline reply without
the fields whose preservation is asked. "not shown" is never counted as yes.

Only the OpenAI-compatible HTTP API is used against the target; the kill and restore commands are parameters
(HTTP calls or argv), so the same drill runs against the embedded emulator (its `/_emulator/*` admin paths) and
against a real server (`kubectl delete pod …`, `systemctl restart vllm`, a rollback script).

The answers speak for the reviewed deployment only when the drill touched it (`for_deployment`): a drill against
the embedded emulator, or a server serving another model or at another address, answers "not shown" to all five
questions about it — what it saw there is kept apart, as `deployment.observed`.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
from typing import Callable, Mapping, cast
from urllib.parse import urlsplit

import httpx

from ..axes.environment.values import parse_version
from ..core.numbers import figure
from ..io.chatstream import sse_payloads
from ..io.shapes import ChatBody, ChatMessage, ToolDef
from .drillshapes import ChatReply, DrillAnswerData, FailoverData, RenewalDrillData
from .params import CommandStep, DrillParams
from .results import Answer, DrillAnswer

NOT_SHOWN: Answer = "not shown"
QUESTIONS = {
    "detected_automatically": "Is the failure detected automatically?",
    "previous_version_restored": "Can the previous version be restored?",
    "in_flight_resumed_or_cancelled": "Are in-flight tasks resumed or explicitly cancelled?",
    "api_failover_without_contract_change": "Can the agent fail over to the API without changing its contract?",
    "fields_preserved": "Are reasoning, content and tool-call fields kept through the recovery?",
}
_TOOL: ToolDef = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
_USER: ChatMessage = {"role": "user", "content": "What is the weather in Lyon? Use the tool."}


def _reasoning(msg: ChatMessage) -> str | None:
    # vLLM ≥0.12 names the field `reasoning`; earlier releases `reasoning_content`
    return msg.get("reasoning") or msg.get("reasoning_content")


def _fields(msg: ChatMessage) -> dict[str, bool]:
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

    def __init__(self, client: httpx.Client, url: str, body: ChatBody, timeout_s: float) -> None:
        super().__init__(daemon=True)
        self.client, self.url, self.body, self.timeout_s = client, url, body, timeout_s
        self.first_chunk = threading.Event()
        self.chunks = 0  # streamed events received: the request is in flight while it has some and no end
        self.outcome = "hanging"
        self.detail = ""

    def in_flight(self) -> bool:
        """Streaming now: started, at least one event received, not ended."""
        return self.is_alive() and self.chunks > 0 and self.outcome == "hanging"

    def run(self) -> None:
        try:
            with self.client.stream("POST", self.url, json=self.body, timeout=self.timeout_s) as r:
                if r.status_code != 200:
                    self.outcome, self.detail = "error", f"HTTP {r.status_code} before the first token"
                    self.first_chunk.set()
                    return
                for payload in sse_payloads(r.iter_lines()):
                    if self._take(payload.strip()):
                        return
            if self.outcome == "hanging":
                self.outcome, self.detail = "cut", "stream closed without [DONE] or an error"
        except httpx.TimeoutException:
            self.outcome, self.detail = "hanging", f"no end within {figure(self.timeout_s)} s"
        except httpx.HTTPError as exc:
            self.outcome, self.detail = "cut", f"connection dropped ({type(exc).__name__})"
        finally:
            self.first_chunk.set()

    def _take(self, data: str) -> bool:
        """Read one SSE payload into the outcome; whether the stream is over ([DONE], or an unreadable event)."""
        if data == "[DONE]":
            if self.outcome == "hanging":
                self.outcome = "cut"
                self.detail = "[DONE] without a finish_reason"
            return True
        try:
            event = json.loads(data)
        except ValueError:
            self.outcome, self.detail = "cut", f"unreadable event {data[:60]!r}"
            return True
        if "error" in event or event.get("object") == "error":
            err = event.get("error", event)
            self.outcome = "error"
            self.detail = f"error event: {err.get('message', err) if isinstance(err, dict) else err}"
            return False
        self.chunks += 1
        self.first_chunk.set()
        for ch in event.get("choices") or []:
            if ch.get("finish_reason"):
                self.outcome, self.detail = "finished", f"finish_reason {ch['finish_reason']}"
        return False


def _failover(client: httpx.Client, api_base_url: str | None, bodies: list[ChatBody], headers: dict[str, str],
              timeout_s: float, steps: list[str]) -> FailoverData | None:
    """The identical request bodies (the tool call, then the tool answer) sent to the API: only the base URL changes,
    so the agent's contract is untouched. None: no API configured."""
    if not api_base_url:
        return None
    call, answer = (_chat(client, api_base_url, body, headers, timeout_s) for body in bodies)
    steps.append(f"fail-over to {api_base_url}: tool call HTTP {call[0]}, tool answer HTTP {answer[0]}")
    return {"call": (call[0], _fields(_message(call[1]))), "answer": (answer[0], _fields(_message(answer[1])))}


def _kill(drill: DrillParams, task: _InFlight, base_url: str, client: httpx.Client, timeout_s: float,
          steps: list[str]) -> bool:
    """Run the kill steps; True when the streamed task was in flight as the last of them began (a kill whose
    earlier steps only wait, or that comes after the stream ended, shows nothing about in-flight tasks)."""
    in_flight = task.in_flight()
    for n, step in enumerate(drill.kill):
        if n == len(drill.kill) - 1:
            in_flight = task.in_flight()
            steps.append(f"streamed task as the last kill step began: "
                         f"{'in flight' if in_flight else task.outcome} ({task.chunks} event(s) received)")
        steps.append(f"kill: {run_step(step, base_url, client, timeout_s)}")
    return in_flight


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


def _chat(client: httpx.Client, base_url: str, body: ChatBody, headers: dict[str, str], timeout_s: float
          ) -> tuple[int, ChatReply]:
    try:
        r = client.post(f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return 0, {"error": type(exc).__name__}
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {"error": "not JSON"}


def _message(reply: ChatReply) -> ChatMessage:
    try:
        return reply["choices"][0]["message"] or cast(ChatMessage, {})
    except (KeyError, IndexError, TypeError):
        return cast(ChatMessage, {})  # no message: every field read from it is absent


def _tool_turn(model: str | None, previous: ChatMessage) -> ChatBody:
    """The second turn: the assistant's whole previous message (reasoning and tool calls included, as the Kimi K3
    docs require) followed by the tool result."""
    kept = cast(ChatMessage, {k: v for k, v in previous.items() if k in ("role", "content", "reasoning", "reasoning_content",
                                                       "tool_calls") and v is not None})
    calls = previous.get("tool_calls") or []
    call_id = calls[0].get("id", "call-0") if calls else "call-0"
    body: ChatBody = {"messages": [_USER, kept, {"role": "tool", "tool_call_id": call_id, "content": '{"temp_c": 21}'}],
            "tools": [_TOOL], "max_tokens": 128}
    if model:
        body["model"] = model
    return body


def run_drill(base_url: str, drill: DrillParams, *, api_base_url: str | None = None,
              headers: dict[str, str] | None = None, model: str | None = None,
              log: Callable[[str], None] | None = None) -> RenewalDrillData:
    """Kill the engine while a task streams, restore it, and answer the five questions. Returns JSON-ready data."""
    headers = headers or {}
    steps: list[str] = []
    note = (log or (lambda s: None))
    t_req = drill.request_timeout_s
    with httpx.Client(headers=headers) as client:
        served = _served_models(client, base_url, t_req)
        if model is None:
            model = served[0] if served else None
        version_before = _version(client, base_url, t_req)
        first: ChatBody = {"messages": [_USER], "tools": [_TOOL], "max_tokens": 256,
                 "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
        if model:
            first["model"] = model
        status, reply = _chat(client, base_url, first, headers, t_req)
        before_msg = _message(reply)
        status2, reply2 = _chat(client, base_url, _tool_turn(model, before_msg), headers, t_req)
        before_fields = {"call": _fields(before_msg), "answer": _fields(_message(reply2))}
        steps.append(f"baseline: tool call HTTP {status}, tool answer HTTP {status2}, fields {before_fields}")
        note(steps[-1])

        inflight_body: ChatBody = {"messages": [{"role": "user", "content": "Write a long report on GPU capacity planning."}],
                         "max_tokens": 2048, "ignore_eos": True, "stream": True}
        if model:
            inflight_body["model"] = model
        task = _InFlight(client, f"{base_url}/v1/chat/completions", inflight_body, drill.recovery_timeout_s)
        task.start()
        task.first_chunk.wait(t_req)
        in_flight_at_kill = _kill(drill, task, base_url, client, t_req, steps)
        note("; ".join(steps[-len(drill.kill):]) if drill.kill else "kill: no command given")
        detected, detect_s, health = _wait_health(client, base_url, False, drill.recovery_timeout_s)
        steps.append(f"health after kill: {health} after {figure(detect_s)} s")
        task.join(drill.recovery_timeout_s)
        # what the task showed in the failure window, read now: closing the client later cuts a stream still open
        task_outcome, task_detail = (task.outcome, task.detail) if not task.is_alive() else \
            ("hanging", f"still open {figure(drill.recovery_timeout_s)} s after the kill")
        steps.append(f"in-flight task: {task_outcome} ({task_detail})")
        t0 = time.monotonic()
        steps += [f"restore: {run_step(s, base_url, client, t_req)}" for s in drill.restore]
        restored, _, health_after = _wait_health(client, base_url, True, drill.recovery_timeout_s)
        recovery_s = time.monotonic() - t0
        version_after = _version(client, base_url, t_req)
        steps.append(f"health after restore: {health_after} after {figure(recovery_s, ' s')}; "
                     f"version {version_before} → {version_after}")

        status3, reply3 = _chat(client, base_url, first, headers, t_req) if restored else (0, {})
        after_call = _message(reply3)
        status4, reply4 = _chat(client, base_url, _tool_turn(model, after_call or before_msg), headers, t_req) \
            if restored else (0, {})
        after_fields = {"call": _fields(after_call), "answer": _fields(_message(reply4))}
        # the conversation started before the kill, continued after it with the whole previous message
        status5, reply5 = _chat(client, base_url, _tool_turn(model, before_msg), headers, t_req) if restored else (0, {})
        steps.append(f"after restore: tool call HTTP {status3}, tool answer HTTP {status4}, resumed conversation "
                     f"HTTP {status5}, fields {after_fields}")

        failover = _failover(client, api_base_url, [first, _tool_turn(model, before_msg)], headers, t_req, steps)

    seen = DrillObservation(
        detected=detected, detect_s=detect_s, health_after_kill=health, task_outcome=task_outcome,
        task_detail=task_detail, restore_steps=len(drill.restore), restored=restored, recovery_s=recovery_s,
        version_before=version_before, version_after=version_after, previous_version=drill.previous_version,
        first_after_status=status3, resumed_status=status5, before_fields=before_fields, after_fields=after_fields,
        failover=failover, timeout_s=drill.recovery_timeout_s, in_flight_at_kill=in_flight_at_kill)
    answers = answer_questions(seen)
    return {"target": base_url, "api": api_base_url, "answers": {
        k: DrillAnswerData(question=a.question, answer=a.answer, evidence=a.evidence) for k, a in answers.items()},
            # until for_deployment checks the target against the reviewed deployment, the answers speak for no one
            "deployment": {"is_deployment": False, "why": "not checked against the reviewed deployment"},
            "served_models": served, "in_flight_at_kill": in_flight_at_kill,
            "steps": steps, "recovery_s": round(recovery_s, 2), "went_down": seen.went_down,
            "versions": {"before": version_before, "after_restore": version_after,
                         "expected_previous": drill.previous_version},
            "summary": _summary(answers)}


def _summary(answers: Mapping[str, DrillAnswer | DrillAnswerData]) -> str:
    def answer(a: DrillAnswer | DrillAnswerData) -> str:
        return a.answer if isinstance(a, DrillAnswer) else a["answer"]

    n_yes = sum(answer(a) == "yes" for a in answers.values())
    return f"{n_yes}/5 questions answered yes" + "".join(f"; {k}: {answer(a)}" for k, a in answers.items()
                                                         if answer(a) != "yes")


def _served_models(client: httpx.Client, base_url: str, timeout_s: float) -> list[str]:
    try:
        data = client.get(f"{base_url}/v1/models", timeout=timeout_s).json()["data"]
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def is_deployment(result: RenewalDrillData, *, emulator: bool, model_name: str | None,
                  instances: tuple[str, ...] = (), addresses: tuple[str, ...] = ()) -> tuple[bool, str]:
    """Did the drill touch the reviewed deployment? Not when it ran against the embedded emulator; otherwise its
    target must serve the deployment's model (GET /v1/models) and, when the deployment names its instances, be
    reached at one of them (`addresses`: the target's base and metrics URLs)."""
    if emulator:
        return False, "the drill ran against the embedded emulator, not the reviewed deployment"
    served = result.get("served_models") or []
    if model_name is None or model_name not in served:
        return False, (f"{result['target']} serves {', '.join(served) or 'no model it would name'}, not the reviewed "
                       f"model {model_name}")
    if instances:
        reached = sorted({_host_port(a) for a in addresses})
        if not set(reached) & set(instances):
            return False, (f"{result['target']} is reached at {', '.join(reached)}, none of the deployment's "
                           f"instances {', '.join(instances)}")
    return True, f"{result['target']} serves the reviewed model {model_name}" + (
        f" at one of its instances ({', '.join(instances)})" if instances else "")


def for_deployment(result: RenewalDrillData, proves: bool, why: str) -> RenewalDrillData:
    """The drill's result as evidence about the reviewed deployment: its answers kept when the drill touched it;
    otherwise every answer "not shown" (why, and what was observed on the drill's target, kept apart)."""
    if proves:
        return {**result, "deployment": {"is_deployment": True, "why": why}}
    observed = result["answers"]
    answers: dict[str, DrillAnswerData] = {q: {"question": a["question"], "answer": NOT_SHOWN,
                   "evidence": f"{why}: it answers nothing about the deployment (observed there: {a['answer']})"}
               for q, a in observed.items()}
    return {**result, "answers": answers, "summary": f"0/5 about the reviewed deployment — {why} (on its target: "
            f"{result['summary']})", "deployment": {"is_deployment": False, "why": why, "observed": observed}}


def not_run(why: str) -> RenewalDrillData:
    """The drill's record when it was not run against the reviewed deployment (no deployment URL, the drill
    disabled): every answer "not shown" with the reason — the drill premise is not shown, never drilled elsewhere."""
    answers: dict[str, DrillAnswerData] = {q: {"question": text, "answer": NOT_SHOWN, "evidence": f"the drill was not run: {why}"}
               for q, text in QUESTIONS.items()}
    return {"target": "none", "api": None, "answers": answers,
            "deployment": {"is_deployment": False, "why": f"the drill was not run: {why}"},
            "steps": [], "recovery_s": 0.0, "went_down": False,
            "versions": {"before": None, "after_restore": None, "expected_previous": None},
            "summary": f"0/5 about the reviewed deployment — the drill was not run: {why}"}


@dataclasses.dataclass(frozen=True)
class DrillObservation:
    """What the drill saw, and nothing else: the five answers are read from these fields only."""

    detected: bool  # /health left 200 (or the connection was refused) after the kill
    detect_s: float
    health_after_kill: str
    task_outcome: str  # the streamed task: finished, error, cut or hanging
    task_detail: str
    restore_steps: int
    restored: bool  # /health back to 200 after the restore steps
    recovery_s: float
    version_before: str | None
    version_after: str | None
    previous_version: str | None  # the version the rollback must bring back (parameters); None: any older one
    first_after_status: int  # the tool-call request after the restore
    resumed_status: int  # the pre-kill conversation continued after the restore
    before_fields: dict[str, dict[str, bool]]
    after_fields: dict[str, dict[str, bool]]
    failover: FailoverData | None
    timeout_s: float
    in_flight_at_kill: bool  # a streamed request was in flight (events received, no end) when the kill ran

    @property
    def went_down(self) -> bool:
        """The engine was seen failing: /health left 200, or the task streaming through the kill broke."""
        return self.detected or self.task_outcome in ("error", "cut")


def _rollback(seen: DrillObservation) -> tuple[Answer, str]:
    """Was the previous version served again? Yes only when the version after the restore is the named previous
    version (or, none named, an older release than the one before), and the server answers again."""

    before, after, want = seen.version_before, seen.version_after, seen.previous_version
    if not seen.restore_steps:
        return NOT_SHOWN, "no restore command in the parameters (review.drill.restore)"
    if not seen.went_down:
        return NOT_SHOWN, (f"nothing went down (health {seen.health_after_kill}, the streamed task "
                           f"{seen.task_outcome}): a restore of a running engine shows no rollback")
    if not seen.restored or seen.first_after_status != 200:
        return "no", (f"not serving again within {figure(seen.timeout_s, ' s')} of the restore "
                      f"(health back: {seen.restored}, first request HTTP {seen.first_after_status}); "
                      f"version {before} → {after}")
    trail = f"version {before} before the drill → {after} after the restore, first request HTTP 200"
    if before is None or after is None:
        return NOT_SHOWN, f"the server reports no version (GET /version): {trail}"
    if after == before:
        return NOT_SHOWN, f"{trail}: the same version came back — a restart, not a rollback to the previous version"
    if want is not None:
        if after == want:
            return "yes", f"{trail}: the named previous version {want} is served again"
        return "no", f"{trail}: expected the named previous version {want}"
    v_before, v_after = parse_version(before), parse_version(after)
    if v_before is None or v_after is None:
        return NOT_SHOWN, (f"{trail}: the versions are not comparable; name the previous one "
                           "(review.drill.previous_version)")
    if v_after < v_before:
        return "yes", f"{trail}: an older release than the one before is served again"
    return "no", f"{trail}: a newer release, not the previous version"


def answer_questions(seen: DrillObservation) -> dict[str, DrillAnswer]:
    """The five answers, each from what was observed; nothing that went unseen answers yes."""
    down = seen.went_down
    if seen.detected:
        detected: tuple[Answer, str] = ("yes", f"/health went to {seen.health_after_kill} {figure(seen.detect_s)} s "
                                               "after the kill")
    elif down:
        detected = ("no", f"the streamed task broke ({seen.task_detail}) while /health stayed "
                          f"{seen.health_after_kill} for {figure(seen.timeout_s)} s")
    else:
        detected = (NOT_SHOWN, f"nothing went down: /health stayed {seen.health_after_kill} and the streamed task "
                               f"{seen.task_outcome} ({seen.task_detail})")
    if not seen.in_flight_at_kill:
        in_flight: tuple[Answer, str] = (NOT_SHOWN, f"no request was observed in flight when the kill ran; the "
                                                    f"streamed task: {seen.task_outcome} ({seen.task_detail})")
    elif not down:
        in_flight = (NOT_SHOWN, f"the engine was never seen down; the streamed task: "
                                f"{seen.task_outcome} ({seen.task_detail})")
    elif seen.task_outcome in ("error", "finished"):
        in_flight = ("yes", f"the streamed task ended with: {seen.task_detail}")
    elif seen.task_outcome == "hanging":
        in_flight = ("no", f"the streamed task was left hanging ({seen.task_detail})")
    else:
        in_flight = ("no", f"the streamed task was cut without an explicit error ({seen.task_detail})")
    fo = seen.failover
    if fo is None:
        failover: tuple[Answer, str] = (NOT_SHOWN, "no API base URL configured (review.drill.api_base_url)")
    else:
        ok = fo["call"][0] == 200 and fo["answer"][0] == 200 and fo["call"][1]["tool_calls"] \
            and fo["answer"][1]["content"]
        failover = ("yes" if ok else "no",
                    f"the same request bodies on the API: tool call HTTP {fo['call'][0]} with fields "
                    f"{fo['call'][1]}, tool answer HTTP {fo['answer'][0]} with fields {fo['answer'][1]}")
    trail = (f"before {seen.before_fields}, after {seen.after_fields}; the pre-kill conversation resumed with its "
             f"reasoning and tool calls: HTTP {seen.resumed_status}")
    base_call = seen.before_fields.get("call", {})
    if not down:
        fields: tuple[Answer, str] = (NOT_SHOWN, f"nothing went down, so nothing was recovered: {trail}")
    elif not (base_call.get("reasoning") and base_call.get("tool_calls")):
        fields = (NOT_SHOWN, f"the reply before the kill carried no reasoning or no tool call to keep: {trail}")
    elif seen.restored and seen.resumed_status == 200 and seen.after_fields == seen.before_fields:
        fields = ("yes", trail)
    else:
        fields = ("no", trail)
    found = {"detected_automatically": detected, "previous_version_restored": _rollback(seen),
             "in_flight_resumed_or_cancelled": in_flight, "api_failover_without_contract_change": failover,
             "fields_preserved": fields}
    return {q: DrillAnswer(question=QUESTIONS[q], answer=found[q][0], evidence=found[q][1]) for q in QUESTIONS}


def _version(client: httpx.Client, base_url: str, timeout_s: float) -> str | None:
    try:
        r = client.get(f"{base_url}/version", timeout=timeout_s)
        return r.json().get("version") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
