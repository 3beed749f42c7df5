"""The same task set through every named path: one request format, one retry policy, one quality rule.

Each path runs its tasks in turn (paths never share the machine's attention), `concurrency` tasks at a time,
bounded by `max_requests` (retries included) and `max_duration_s`. Tools run locally as an agent would. A path
that is down, slow or answering 5xx is recorded task by task — a failed task, never a crash. Every request lands
in `paths/requests.jsonl` as soon as it finishes, so a killed run keeps what it measured.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ..agent.scenario import assistant_message, parsed_reply
from ..agent.shapes import ToolDef
from ..agent.tools import execute, result_text
from ...io.chatstream import ToolCall
from ...io.client import ChatClient, ChatRecord, run_sync
from ...core.errors import BadInputError
from ...core.guards import is_loopback_url, require_key_env
from ...io.load import RequestBudget
from ...core.retry import RetryPolicy
from ...core.store import RunStore
from .config import CANCEL_GRACE_S, Endpoint, PathsParams, RequestFormat
from .judge import Exchange, call_problem, judge
from .pricing import token_cost
from .record import (REQUESTS_FILE, RECORD_FILE, EndpointInfo, FixedElement, PathsResult, TaskOutcome,
                     canonical_hash, paired, record_data, summarise)
from .shapes import JsonObject, RequestLine
from .tasks import Task, TaskSet, load_task_set

Sink = Callable[[RequestLine], None]


def check_endpoints(params: PathsParams) -> None:
    """Refuse, before anything is sent, a non-loopback endpoint without `allow_remote` and a missing key."""
    for name, ep in params.paths.endpoints.items():
        if not params.paths.allow_remote and not is_loopback_url(ep.base_url):
            raise BadInputError(f"refusing to send the task set to non-loopback endpoint {ep.base_url}; set "
                                "paths.allow_remote=true if this server is meant to take it",
                                field=f"paths.endpoints.{name}.base_url")
        require_key_env(ep.api_key_env, field=f"paths.endpoints.{name}.api_key_env")


def request_format_value(req: RequestFormat) -> JsonObject:
    return {"api": "OpenAI chat completions (/v1/chat/completions)", **req.model_dump(mode="json"),
            "tool_results": "compact JSON in a tool message, tools executed locally",
            "history": "the assistant message sent back as received (reasoning, tool_calls)"}


def fixed_elements(params: PathsParams, tasks: TaskSet) -> tuple[FixedElement, ...]:
    """The four elements fixed before any result is read, each with the sha256 of its canonical JSON."""
    p = params.paths
    values = {"task_set": tasks.request_part(), "request_format": request_format_value(p.request),
              "retry_policy": p.retry.model_dump(mode="json"), "quality_rule": tasks.quality_part()}
    r = p.retry
    summaries = {
        "task_set": f"{tasks.name} v{tasks.version}: {len(tasks.tasks)} tasks from {tasks.source}",
        "request_format": f"chat completions, stream={p.request.stream}, temperature={p.request.temperature}, "
                          f"max_tokens={p.request.max_tokens}, {p.request.max_tool_rounds} tool rounds",
        "retry_policy": f"{r.max_retries} retries, backoff {r.backoff_s:g} s ×{r.backoff_factor:g}, statuses "
                        f"{list(r.retry_statuses)}{' + unreachable/timeout' if r.retry_unreachable else ''}, "
                        f"timeout {r.timeout_s:g} s",
        "quality_rule": "per task: " + ", ".join(sorted({k for t in tasks.tasks for k, v in
                                                         t.quality.model_dump().items() if v})) or "non-empty answer"}
    origins = {"task_set": params.origin("task_set") if p.task_set != "builtin" else "built-in default",
               "quality_rule": params.origin("quality_rule") if p.task_set != "builtin" else "built-in default"}
    return tuple(FixedElement(name=k, sha256=canonical_hash(v), origin=origins.get(k, params.origin(k)),  # type: ignore[arg-type]
                              summary=summaries[k], value=v) for k, v in values.items())


@dataclass
class _Tally:
    requests: int = 0
    attempts_max: int = 0
    retries: int = 0
    retried_statuses: list[int] = field(default_factory=list)
    timeouts: int = 0
    errors: list[str] = field(default_factory=list)
    ttft_ms: float | None = None
    prompt: list[int | None] = field(default_factory=list)
    cached: list[int | None] = field(default_factory=list)
    completion: list[int | None] = field(default_factory=list)


def retryable(rec: ChatRecord, policy: RetryPolicy) -> bool:
    if rec.cancelled:
        return False
    if rec.http_status is not None and rec.http_status != 200:
        return rec.http_status in policy.retry_statuses
    return policy.retry_unreachable and rec.error_kind in ("TargetUnreachable", "Timeout")


class PathRunner:
    """One path: its client, its budget, its tasks."""

    def __init__(self, name: str, ep: Endpoint, tasks: TaskSet, params: PathsParams, sink: Sink | None = None):
        self.name, self.ep, self.tasks, self.p, self.sink = name, ep, tasks, params.paths, sink
        self.client = ChatClient(ep.base_url, model=ep.model, api_key_env=ep.api_key_env,
                                 timeout_s=self.p.retry.timeout_s, connect_timeout_s=ep.connect_timeout_s,
                                 keep_raw=False)
        self.budget = RequestBudget(self.p.max_requests, 0)
        self.rows: list[TaskOutcome] = []
        self.duration_s = 0.0

    async def run(self) -> list[TaskOutcome]:
        t0 = time.perf_counter_ns()
        self.budget.deadline_ns = t0 + int(self.p.max_duration_s * 1e9)
        sem = asyncio.Semaphore(self.ep.concurrency)

        async def one(task: Task) -> TaskOutcome:
            async with sem:
                return await self.task(task)

        jobs = [asyncio.create_task(one(t)) for t in self.tasks.tasks]
        try:
            done = await asyncio.wait_for(asyncio.gather(*jobs), self.p.max_duration_s + CANCEL_GRACE_S)
        except TimeoutError:
            self.budget.stopped_by = self.budget.stopped_by or "max_duration_s"
            done = [j.result() if j.done() and not j.cancelled() and j.exception() is None
                    else self._not_run(t, "cut by max_duration_s") for j, t in zip(jobs, self.tasks.tasks)]
        finally:
            await self.client.aclose()
        self.duration_s = (time.perf_counter_ns() - t0) / 1e9
        self.rows = list(done)
        return self.rows

    def _not_run(self, task: Task, why: str) -> TaskOutcome:
        return TaskOutcome(path=self.name, task=task.id, category=task.category, status="not-run", accepted=False,
                           reasons=(why,), requests=0, attempts_max=0, retries=0, retried_statuses=(), tool_calls=0,
                           tool_call_errors=0, timeouts=0, errors=(), ttft_ms=None, latency_ms=None,
                           prompt_tokens=None, cached_tokens=None, completion_tokens=None, cost=None)

    async def send(self, body: dict[str, Any], task: Task, rnd: int, tally: _Tally) -> ChatRecord | None:
        """One request under the retry policy; None when the budget stopped it before any attempt."""
        policy = self.p.retry
        rec: ChatRecord | None = None
        for attempt in range(policy.max_retries + 1):
            if not self.budget.take():
                return rec
            rec = await self.client.chat_body(body, strict=False, timeout_s=policy.timeout_s,
                                              deadline_ns=self.budget.deadline_ns,
                                              request_id=f"paths-{self.name}-{task.id}-{rnd}-a{attempt}")
            tally.requests += 1
            tally.attempts_max = max(tally.attempts_max, attempt + 1)
            tally.timeouts += rec.error_kind == "Timeout"
            for bucket, v in ((tally.prompt, rec.prompt_tokens), (tally.cached, rec.cached_tokens),
                              (tally.completion, rec.completion_tokens)):
                bucket.append(v)
            self._log(task, rnd, attempt, rec)
            if rec.ok or not retryable(rec, policy) or attempt == policy.max_retries:
                break
            tally.retries += 1
            if rec.http_status:
                tally.retried_statuses.append(rec.http_status)
            wait = policy.backoff_s * policy.backoff_factor ** attempt
            left = (self.budget.deadline_ns - time.perf_counter_ns()) / 1e9
            await asyncio.sleep(max(0.0, min(wait, left)))
        return rec

    def _log(self, task: Task, rnd: int, attempt: int, rec: ChatRecord) -> None:
        if self.sink is None:
            return
        self.sink({"path": self.name, "task": task.id, "round": rnd, "attempt": attempt, "ok": rec.ok,
                   "http_status": rec.http_status, "error_kind": rec.error_kind, "error": (rec.error or "")[:300],
                   "ttft_ms": rec.ttft_ms, "e2e_ms": rec.e2e_ms, "prompt_tokens": rec.prompt_tokens,
                   "cached_tokens": rec.cached_tokens, "completion_tokens": rec.completion_tokens,
                   "finish_reason": rec.finish_reason, "content": (rec.content or "")[:2000],
                   "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in rec.tool_calls]})

    def _body(self, task: Task, messages: list[dict[str, Any]], tools: list[ToolDef]) -> dict[str, Any]:
        req = self.p.request
        body: dict[str, Any] = {"messages": list(messages), "temperature": req.temperature, "stream": req.stream,
                                "max_tokens": min(task.max_tokens or req.max_tokens, req.max_tokens)}
        if self.client.model is not None:
            body["model"] = self.client.model
        if tools:
            body["tools"] = tools
            if task.tool_choice is not None:
                body["tool_choice"] = task.tool_choice
        if task.response_format is not None:
            body["response_format"] = task.response_format
        return body

    async def task(self, task: Task) -> TaskOutcome:
        offered_specs = self.tasks.offered(task)
        offered = {t.function.name: t.function.parameters for t in offered_specs}
        tools_body = [t.openai() for t in offered_specs]
        messages = [dict(m) for m in task.messages]
        tally = _Tally()
        calls: list[ToolCall] = []
        err_rule = task.quality.tool_error
        error_pending = err_rule is not None
        error_returned = retried = False
        last_result: Any = None
        final: ChatRecord | None = None
        reasons: list[str] = []
        t0 = time.perf_counter_ns()
        for rnd in range(self.p.request.max_tool_rounds + 1):
            rec = await self.send(self._body(task, messages, tools_body), task, rnd, tally)
            if rec is None:
                if tally.requests == 0:
                    return self._not_run(task, f"not sent: the path's {self.budget.stopped_by} was reached")
                reasons.append(f"stopped by the path's {self.budget.stopped_by}")
                break
            if rec.cancelled:  # the path's bound cut it: not evidence about the task either way
                return self._not_run(task, f"cut by the path's {self.budget.stopped_by or 'max_duration_s'}")
            if not rec.ok:
                tally.errors.append(f"{rec.error_kind or 'HTTP'} {rec.http_status or ''}: {(rec.error or '')[:160]}"
                                    .replace("  ", " "))
                reasons.append("no answer: " + tally.errors[-1])
                break
            if tally.ttft_ms is None:
                tally.ttft_ms = rec.ttft_ms if rec.ttft_ms is not None else rec.e2e_ms
            got = [ToolCall.model_validate(c) for c in parsed_reply(rec)["tool_calls"]]
            calls += got
            if not got:
                final = rec
                break
            if rnd == self.p.request.max_tool_rounds:
                reasons.append(f"still calling tools after {rnd} rounds")
                break
            if any(call_problem(c, offered) for c in got):
                break  # a malformed call cannot be executed as received: the quality rule names it
            messages.append(cast(dict[str, Any], assistant_message(rec)))  # the agent axis's ChatMessage
            for c in got:
                spec = next(t for t in offered_specs if t.function.name == c.name)
                expected = {e.name for e in task.quality.expect_calls}
                if error_pending and err_rule is not None and c.name in expected:
                    result, error_pending, error_returned = err_rule.result, False, True
                else:
                    result = execute(c.name, c.parsed, spec.result)
                    retried = retried or error_returned
                    last_result = result
                messages.append({"role": "tool", "tool_call_id": c.id, "content": result_text(result)})
        latency = (time.perf_counter_ns() - t0) / 1e6
        status = "answered" if final is not None else "failed"
        if final is not None or calls:
            reasons += judge(task.quality, Exchange(final=final.content if final else None,
                                                    finish_reason=final.finish_reason if final else None,
                                                    calls=calls, offered=offered, error_returned=error_returned,
                                                    retried_after_error=retried, last_result=last_result))
        reasons = list(dict.fromkeys(reasons))
        tool_errors = sum(call_problem(c, offered) is not None for c in calls)
        cost = self._cost(tally)
        return TaskOutcome(
            path=self.name, task=task.id, category=task.category, status=status,  # type: ignore[arg-type]
            accepted=final is not None and not reasons, reasons=tuple(reasons), requests=tally.requests,
            attempts_max=tally.attempts_max, retries=tally.retries, retried_statuses=tuple(tally.retried_statuses),
            tool_calls=len(calls), tool_call_errors=tool_errors, timeouts=tally.timeouts, errors=tuple(tally.errors),
            ttft_ms=None if tally.ttft_ms is None else round(tally.ttft_ms, 3),
            latency_ms=round(latency, 3), prompt_tokens=_known_sum(tally.prompt),
            cached_tokens=_known_sum(tally.cached), completion_tokens=_known_sum(tally.completion), cost=cost)

    def _cost(self, tally: _Tally) -> float | None:
        """Tokens billed at the path's prices (every attempt that reported usage); None when a price is unknown
        or an answered request reported no usage."""
        pin, pout = self.ep.price_input_per_mtok, self.ep.price_output_per_mtok
        if pin is None or pout is None:
            return None
        prompt, completion = _known_sum(tally.prompt), _known_sum(tally.completion)
        if (prompt is None or completion is None) and tally.errors == [] and tally.requests:
            return None
        cost = token_cost(prompt or 0, _known_sum(tally.cached), completion or 0, pin, pout,
                          self.ep.price_cached_input_per_mtok)
        return None if cost is None else round(cost, 8)


def _known_sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def run_paths(params: PathsParams, store: RunStore, tasks: TaskSet | None = None) -> PathsResult:
    """Every path in the order named, then the record: written atomically through the run store."""
    check_endpoints(params)
    tasks = tasks or load_task_set(params.paths.task_set)
    fixed = fixed_elements(params, tasks)
    store.write_json("paths/params.json", params.model_dump(mode="json"))
    store.write_json("paths/fixed.json", [f.model_dump(mode="json") for f in fixed])  # before any result
    started = _now()

    def sink(line: RequestLine) -> None:
        store.append_jsonl(REQUESTS_FILE, line)

    rows: list[TaskOutcome] = []
    summaries = []
    endpoints = []
    for name, ep in params.paths.endpoints.items():
        runner = PathRunner(name, ep, tasks, params, sink)
        out = run_sync(runner.run())  # a notebook's running loop is fine: run_sync uses a private thread
        rows += out
        summaries.append(summarise(name, len(tasks.tasks), out, runner.budget.stopped_by, runner.duration_s))
        endpoints.append(EndpointInfo(name=name, base_url=ep.base_url, model=runner.client.model,
                                      api_key_env=ep.api_key_env, price_input_per_mtok=ep.price_input_per_mtok,
                                      price_output_per_mtok=ep.price_output_per_mtok, concurrency=ep.concurrency,
                                      price_cached_input_per_mtok=ep.price_cached_input_per_mtok))
    if store.path(REQUESTS_FILE).exists():
        store.adopt(REQUESTS_FILE)
    names = list(params.paths.endpoints)
    ref = "self_hosted" if "self_hosted" in names else names[0]  # every other path is paired with this one
    pairs = tuple(paired(ref, other, rows) for other in names if other != ref)
    result = PathsResult(started=started, finished=_now(), currency=params.paths.currency,
                         task_set=f"{tasks.name} v{tasks.version} ({tasks.source})", fixed=fixed,
                         endpoints=tuple(endpoints), paths=tuple(summaries), pairs=pairs, tasks=tuple(rows))
    store.write_json(RECORD_FILE, record_data(result))
    return result

