"""The scenario runner: plays the sample as an agent would, at each concurrency level, bounded in requests and time.

Tools run locally; the assistant message goes back with its `reasoning`/`reasoning_content` and `tool_calls`
exactly as received. Every request becomes one step (request body, limits, raw reply, parse, checks, the
client's decision) handed to `sink` as soon as it finishes, so a killed run keeps what it measured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, cast

from ...core import progress
from ...core.errors import TargetError
from ...core.record import Record
from ...io.chatstream import ToolCall
from ...io.client import ChatClient, ChatRecord
from ...io.load import RequestBudget
from . import checks as C
from .config import CANCEL_GRACE_S, MAX_FILLER_LINES, TOKENS_PER_LINE_GUESS
from .filler import filler_lines
from .rate import turns_needed
from ..shapes import Reply
from .sample import AgentSample, CaseSpec, TurnSpec
from .shapes import ChatBody, ChatMessage, JsonObject, LevelRun, ParsedReply, SkippedCase, Step, StoredCall, ToolDef
from .tools import execute, result_text

Sink = Callable[[Step], None]


class RunSettings(Record):
    """The resolved knobs of one agent run (parameters + contract + the recipe's sampling), kept in the evidence as
    they were used."""

    levels: tuple[int, ...]
    repetitions: int
    stream_modes: tuple[str, ...]  # "non-stream" / "stream": repetition r runs in stream_modes[r % len]
    max_requests: int
    max_duration_s: float
    request_timeout_s: float
    max_tool_rounds: int
    context_limit: int
    max_output_tokens: int
    images_served: bool
    long_context_tokens: int
    min_pass_rate: float
    sample_source: str
    history: str = "full"
    # the recipe's sampling (null: the sample's defaults, the server's for top_p and thinking)
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    thinking: bool | None = None
    # the tool-turn series: how many independent tool turns, and the failure rate they must bound
    tool_turns: int = 0
    tool_turns_needed: int = 0
    max_tool_call_failure_rate: float = 0.01
    contract_check: bool = True
    client_stream_modes: tuple[str, ...] = ("non-stream", "stream")
    client_reasoning_field: str | None = None
    sampling_pinned: bool = False
    client_idle_timeout_s: float | None = None
    gateway_timeout_s: float | None = None
    e2e_p95_ms: float | None = None
    spec_decode_min_acceptance_length: float | None = None

    @classmethod
    def from_params(cls, params: Any, sample_source: str) -> RunSettings:
        a, contract, sampling = params.axes.agent, params.contract, params.recipe.sampling
        levels = tuple(sorted(set(a.concurrency_levels or (1, contract.planned_concurrency))))
        modes = tuple(contract.client_stream_modes) if a.stream is None else (("stream",) if a.stream
                                                                                 else ("non-stream",))
        needed = turns_needed(contract.max_tool_call_failure_rate)
        return cls(levels=levels, repetitions=a.repetitions, stream_modes=modes, max_requests=a.max_requests,
                   max_duration_s=a.max_duration_s, request_timeout_s=a.request_timeout_s,
                   max_tool_rounds=a.max_tool_rounds, context_limit=contract.max_context_tokens,
                   max_output_tokens=contract.max_output_tokens, images_served=contract.images_served,
                   long_context_tokens=int(contract.max_context_tokens * a.long_context_fraction),
                   min_pass_rate=a.min_pass_rate, sample_source=sample_source, history=a.history,
                   temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
                   thinking=sampling.thinking, tool_turns=a.tool_turns or needed, tool_turns_needed=needed,
                   max_tool_call_failure_rate=contract.max_tool_call_failure_rate, contract_check=a.contract_check,
                   client_stream_modes=tuple(contract.client_stream_modes),
                   client_reasoning_field=contract.client_reasoning_field, sampling_pinned=contract.sampling_pinned,
                   client_idle_timeout_s=contract.client_idle_timeout_s,
                   gateway_timeout_s=contract.gateway_timeout_s, e2e_p95_ms=contract.e2e_p95_ms,
                   spec_decode_min_acceptance_length=params.recipe.spec_decode_min_acceptance_length)

    def stream_for(self, repetition: int) -> bool:
        """The stream mode of repetition `repetition`: the modes alternate, so two repetitions cover both."""
        return self.stream_modes[repetition % len(self.stream_modes)] == "stream"

    def sampled(self, body: ChatBody, *, temperature: float | None, max_tokens: int) -> ChatBody:
        """`body` with the run's sampling: the recipe's temperature, top_p, max_tokens and thinking switch where it
        sets them (a case's own temperature still wins), `max_tokens` capped by the contract."""
        temp = temperature if temperature is not None else self.temperature
        body["max_tokens"] = min(self.max_tokens or max_tokens, self.max_output_tokens)
        if temp is not None:
            body["temperature"] = temp
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.thinking is not None:
            # vLLM's Kimi K3 renderer reads chat_template_kwargs.thinking (alias enable_thinking)
            body["chat_template_kwargs"] = {"thinking": self.thinking}
        return body


class _Stop(Exception):
    """The case cannot go on (the reply cannot be acted upon, or the level's budget is spent)."""

    def __init__(self, budget: bool = False) -> None:
        self.budget = budget


def assistant_message(rec: ChatRecord) -> ChatMessage:
    """The assistant turn to send back, as received: reasoning under the field name(s) the server used and
    the tool calls untouched (ids, argument strings), so the server's template sees its own output again."""
    raw = rec.raw_json
    if not rec.stream and isinstance(raw, dict):
        choice = next((c for c in raw.get("choices") or () if isinstance(c, dict) and c.get("index", 0) == 0), None)
        msg = (choice or {}).get("message")
        if isinstance(msg, dict):
            out: ChatMessage = {"role": "assistant", "content": msg.get("content")}
            for key in ("reasoning", "reasoning_content"):
                if msg.get(key) is not None:
                    out[key] = msg[key]
            if msg.get("tool_calls"):
                out["tool_calls"] = msg["tool_calls"]
            return out
    out = {"role": "assistant", "content": rec.content}
    if rec.reasoning is not None:
        field = rec.reasoning_field or "reasoning"  # "reasoning", "reasoning_content" or "both"
        if field in ("reasoning", "both"):
            out["reasoning"] = rec.reasoning
        if field in ("reasoning_content", "both"):
            out["reasoning_content"] = rec.reasoning
    if rec.tool_calls:
        out["tool_calls"] = [tc.to_openai() for tc in rec.tool_calls]
    return out


def history_message(message: ChatMessage, mode: str) -> ChatMessage:
    """The reply as the client sends it back: whole ("full"), or without what a lossy client drops."""
    out = message.copy()
    if mode == "drop-reasoning":
        out.pop("reasoning", None)
        out.pop("reasoning_content", None)
    elif mode == "drop-tool-calls":
        out.pop("tool_calls", None)
    elif mode != "full":
        raise KeyError(mode)
    return out


def stored_call(call: ToolCall) -> StoredCall:
    """A call as the agent and paths records store it: its fields and their parse."""
    return cast(StoredCall, call.model_dump())


def parsed_reply(rec: ChatRecord) -> ParsedReply:
    """The reply as the client reads it: calls parsed from the raw message when there is one (an `arguments`
    object is then seen as such), from the reassembled stream otherwise."""
    calls: list[ToolCall]
    raw = rec.raw_json
    if not rec.stream and isinstance(raw, dict) and rec.ok:
        choice = next((c for c in raw.get("choices") or () if isinstance(c, dict) and c.get("index", 0) == 0), {})
        calls = C.calls_of_message(choice.get("message"))
    else:
        calls = [tc.model_copy(update={"index": i}) for i, tc in enumerate(rec.tool_calls)]
    return {"content": rec.content, "reasoning": rec.reasoning, "reasoning_field": rec.reasoning_field,
            "finish_reason": rec.finish_reason, "tool_calls": [stored_call(c) for c in calls],
            "leaked_markup": C.leaked_family(rec.content, rec.reasoning),
            "prompt_tokens": rec.prompt_tokens, "completion_tokens": rec.completion_tokens,
            "usage_present": rec.usage_present, "longest_silence_s": silence_of(rec)}


def reply_record(rec: ChatRecord) -> Reply:
    """The request as the agent's records keep it: the client's whole record, raw reply included."""
    return cast(Reply, rec.model_dump())


def silence_of(rec: ChatRecord) -> float | None:
    """A streamed reply's longest silence (send → first byte, between output events, last output → end), s."""
    if not rec.stream:
        return None
    s = C.longest_silence_s([rec.sent_ns, rec.first_byte_ns, *rec.output_chunk_ns, rec.done_ns])
    return None if s is None else round(s, 4)


class ScenarioRunner:
    """Runs the sample's cases against one target; `run()` covers every concurrency level in turn."""

    def __init__(self, client: ChatClient, sample: AgentSample, settings: RunSettings, sink: Sink | None = None):
        self.client = client
        self.sample = sample
        self.s = settings
        self.sink = sink
        self.steps: list[Step] = []
        self.levels: list[LevelRun] = []

    def skipped_cases(self) -> list[SkippedCase]:
        return [{"case": c.id, "reason": "contract.images_served is false: the multimodal case is not run"}
                for c in self.sample.cases if c.requires_images and not self.s.images_served]

    def _per_repetition(self) -> int:
        """Requests one repetition takes from a model that does as the sample expects (progress only)."""
        return sum(1 + (1 if t.expect_tool else 0) for c in self._cases() for t in c.turns)

    def _cases(self) -> list[CaseSpec]:
        return [c for c in self.sample.cases if not (c.requires_images and not self.s.images_served)]

    async def run(self) -> None:
        try:
            await self.client.resolve_model()
        except TargetError:
            pass  # each request then asks /v1/models itself and records why it failed: a finding, not a crash
        for level in self.s.levels:
            self.levels.append(await self.run_level(level))

    async def run_level(self, level: int) -> LevelRun:
        # fewer repetitions than the level would never reach it, fewer than the stream modes would miss one
        reps = max(self.s.repetitions, level, len(self.s.stream_modes))
        progress.phase(f"level {self.s.levels.index(level) + 1} of {len(self.s.levels)}: concurrency {level}, the "
                       f"scenario {reps} times", requests=min(self.s.max_requests, reps * self._per_repetition()),
                       duration_s=self.s.max_duration_s)
        t0 = time.perf_counter_ns()
        budget = RequestBudget(self.s.max_requests, t0 + int(self.s.max_duration_s * 1e9))
        pending = iter(range(reps))
        done: list[int] = []

        async def worker() -> None:
            for rep in pending:
                if budget.stopped_by:
                    return
                if await self._repetition(level, rep, budget):
                    done.append(rep)

        tasks = [asyncio.create_task(worker()) for _ in range(min(level, reps))]
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), self.s.max_duration_s + CANCEL_GRACE_S)
        except TimeoutError:
            budget.stopped_by = budget.stopped_by or "max_duration_s"
        return {"level": level, "in_flight": min(level, reps), "repetitions_planned": reps,
                "repetitions_completed": len(done), "requests": budget.sent, "stopped_by": budget.stopped_by,
                "duration_s": round((time.perf_counter_ns() - t0) / 1e9, 3)}

    async def _repetition(self, level: int, rep: int, budget: RequestBudget) -> bool:
        seq = [0]
        for case in self._cases():
            try:
                await self._case(level, rep, case, budget, seq)
            except _Stop as stop:
                if stop.budget:
                    return False
        return True

    # -- one case ---------------------------------------------------------------------------------------------

    async def _case(self, level: int, rep: int, case: CaseSpec, budget: RequestBudget, seq: list[int]) -> None:
        sample = self.sample
        offered = sample.offered(case)
        schemas = {n: sample.tool(n).function.parameters for n in offered}  # type: ignore[union-attr]
        tools_body = [sample.tool(n).openai() for n in offered]  # type: ignore[union-attr]
        messages: list[ChatMessage] = [{"role": "system", "content": sample.system_prompt}]
        growth = {"context": 0, "tokens_per_line": TOKENS_PER_LINE_GUESS,
                  "fillers_left": sum(1 for t in case.turns if t.filler)}
        kept: list[tuple[ChatMessage, ChatMessage]] = []  # (reply as received, as sent back), in order
        for t, turn in enumerate(case.turns):
            user = turn.user if isinstance(turn.user, str) else [dict(p) for p in turn.user]
            lines = 0
            if turn.filler:
                lines = self._filler_size(growth)
                user = f"{user}\n\n{filler_lines(f'{case.id}:{t}', lines)}"
                growth["fillers_left"] -= 1
            messages.append({"role": "user", "content": user})
            before = growth["context"]
            await self._turn(level, rep, case, t, turn, messages, offered, schemas, tools_body, budget, seq, growth,
                             kept)
            if turn.filler and lines and growth["context"] > before:
                growth["tokens_per_line"] = max(4, (growth["context"] - before) // lines)

    def _filler_size(self, growth: dict[str, int]) -> int:
        room = self.s.long_context_tokens - growth["context"]
        if room <= 0:
            return 0
        per_turn = room / max(1, growth["fillers_left"])
        return max(1, min(MAX_FILLER_LINES, int(per_turn / max(1, growth["tokens_per_line"]))))

    async def _turn(self, level: int, rep: int, case: CaseSpec, t: int, turn: TurnSpec, messages: list[ChatMessage],
                    offered: list[str], schemas: Mapping[str, JsonObject], tools_body: list[ToolDef],
                    budget: RequestBudget, seq: list[int], growth: dict[str, int],
                    kept: list[tuple[ChatMessage, ChatMessage]]) -> None:
        error_pending = turn.tool_error is not None
        after_error = False
        retries = 0
        last_result: Any = None
        for rnd in range(self.s.max_tool_rounds + 1):
            body = self._body(case, turn, messages, tools_body, self.s.stream_for(rep))
            if not budget.take():
                raise _Stop(budget=True)
            rec = await self.client.chat_body(body, strict=False, timeout_s=self.s.request_timeout_s,
                                              deadline_ns=budget.deadline_ns,
                                              request_id=f"agent-c{level}-r{rep}-{case.id}-t{t}-{rnd}")
            step = self._step(level, rep, case, t, rnd, "after-error" if after_error else
                              ("initial" if rnd == 0 else "after-tool"), body, turn, schemas, rec, seq)
            outcomes: list[C.CheckResult] = [C.check_history(kept, self.s.history)] if kept else []
            if rec.cancelled:
                self._stop(step, outcomes, f"stop: the level's budget ({budget.stopped_by or 'deadline'}) ended the "
                                           "request", budget=True)
            env = C.environment_refusal(rec.http_status, rec.error)
            if env is None:  # a refusal for missing server flags is the environment finding, not a failed request
                outcomes.append(C.check_request(rec.ok, rec.http_status, rec.error))
            if not rec.ok:
                step["environment"] = env
                self._stop(step, outcomes, "stop case: the server refuses tool calls (" + env + " flags missing)"
                           if env else f"stop case: request failed ({(rec.error or '')[:120]})")
            if rec.prompt_tokens is not None:
                growth["context"] = rec.prompt_tokens + (rec.completion_tokens or 0)
            calls = [ToolCall.model_validate(c) for c in step["parsed"]["tool_calls"]]
            leaked = step["parsed"]["leaked_markup"]
            outcomes += self._reply_outcomes(rec, calls, leaked, turn.expect_tool if rnd == 0 else None, offered,
                                             schemas)
            if after_error and turn.fallback is not None and turn.expect_tool:
                outcomes.append(C.check_fallback(calls, rec.content, turn.expect_tool, turn.fallback, retries,
                                                 sent=turn.tool_error))
            if not calls:
                if rnd == 0 and turn.expect_tool:
                    self._stop(step, outcomes, "stop case: required tool call missing" +
                               (f" ({leaked} markup in the text)" if leaked else ""))
                self._send_back(messages, kept, rec)
                if after_error:
                    fb = outcomes[-1]
                    step["decision"] = ("fallback accepted: " if fb.passed else "fallback rejected: ") + fb.detail
                else:
                    fin = C.check_final(rec.content, rec.finish_reason, turn.final, turn.final_schema(), last_result)
                    outcomes.append(fin)
                    step["decision"] = "answer accepted" if fin.passed else f"answer rejected: {fin.detail}"
                self._emit(step, outcomes)
                return
            broken = [o for o in outcomes if o.check == "executable" and not o.passed]
            if broken:
                self._stop(step, outcomes, f"stop case: call not executable ({broken[0].detail})")
            if after_error and not outcomes[-1].passed:
                self._stop(step, outcomes, f"stop case: {outcomes[-1].detail}")
            if rnd == self.s.max_tool_rounds:
                why = f"still calling tools after {self.s.max_tool_rounds} rounds"
                self._stop(step, [*outcomes, C.CheckResult("final_answer", False, why)], f"stop case: {why}")
            if after_error:
                retries += 1
            self._send_back(messages, kept, rec)
            actions, error_pending, next_after_error, last_result = self._answer_calls(
                calls, turn, messages, error_pending, last_result)
            step["decision"] = "; ".join(actions)
            step["tool_results"] = messages[-len(calls):]
            self._emit(step, outcomes)
            after_error = next_after_error

    def _reply_outcomes(self, rec: ChatRecord, calls: list[ToolCall], leaked: Any, required: str | None,
                        offered: list[str], schemas: Mapping[str, JsonObject]) -> list[C.CheckResult]:
        """The checks every reply gets: the required call (first round only), markup, reasoning, and each call's
        name, arguments and executability."""
        outcomes = [C.check_required_call(calls, required, leaked)] if required else []
        outcomes.append(C.check_markup(rec.content, rec.reasoning, calls))
        outcomes += C.check_reasoning(self.s.thinking, rec.finish_reason, rec.content, rec.reasoning)
        ids = [c.id for c in calls]
        for i, call in enumerate(calls):
            outcomes.append(C.check_name(call, offered))
            outcomes.append(C.check_arguments(call, schemas.get(call.name) if isinstance(call.name, str) else None))
            outcomes.append(C.check_executable(call, schemas, ids[:i] + ids[i + 1:]))
        return outcomes

    def _answer_calls(self, calls: list[ToolCall], turn: TurnSpec, messages: list[ChatMessage],
                      error_pending: bool, last_result: Any) -> tuple[list[str], bool, bool, Any]:
        """Run the calls' tools and append their results; the turn's planned error answers its first expected call.

        Returns what was done, whether the planned error is still to send, whether it was sent now, and the last
        result a tool really returned."""
        actions, sent_error = [], False
        for call in calls:
            spec = self.sample.tool(call.name)
            if error_pending and call.name == turn.expect_tool:
                result, error_pending, sent_error = turn.tool_error, False, True
                actions.append(f"{call.name}: planned error returned")
            else:
                result = execute(call.name, call.parsed, spec.result if spec else None)
                last_result = result
                actions.append(f"{call.name}: executed")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result_text(result)})
        return actions, error_pending, sent_error, last_result

    def _stop(self, step: Step, outcomes: list[C.CheckResult], decision: str, *, budget: bool = False) -> NoReturn:
        """Record the step with the decision that ends the case (or, for the budget, the repetition)."""
        step["decision"] = decision
        self._emit(step, outcomes)
        raise _Stop(budget=budget)

    def _send_back(self, messages: list[ChatMessage], kept: list[tuple[ChatMessage, ChatMessage]],
                   rec: ChatRecord) -> None:
        got = assistant_message(rec)
        sent = history_message(got, self.s.history)
        kept.append((got, sent))
        messages.append(sent)

    def _body(self, case: CaseSpec, turn: TurnSpec, messages: list[ChatMessage],
              tools_body: list[ToolDef], stream: bool) -> ChatBody:
        d = self.sample.defaults
        body: ChatBody = {"model": self.client.model, "messages": list(messages), "stream": stream}
        self.s.sampled(body, temperature=case.temperature if case.temperature is not None
                       else (None if self.s.temperature is not None else d.temperature),
                       max_tokens=case.max_tokens or d.max_tokens)
        if body["model"] is None:
            del body["model"]  # /v1/models did not answer: the request asks again and records why it failed
        if tools_body:
            body["tools"] = tools_body
            choice = self.sample.tool_choice(case)
            if choice is not None:
                body["tool_choice"] = choice
        if turn.response_format is not None:
            body["response_format"] = turn.response_format
        return body

    def _step(self, level: int, rep: int, case: CaseSpec, t: int, rnd: int, phase: str, body: ChatBody,
              turn: TurnSpec, schemas: Mapping[str, JsonObject], rec: ChatRecord, seq: list[int]) -> Step:
        seq[0] += 1
        parsed: ParsedReply = parsed_reply(rec) if rec.ok else {"content": rec.content, "reasoning": rec.reasoning,
                                                   "reasoning_field": rec.reasoning_field,
                                                   "finish_reason": rec.finish_reason, "tool_calls": [],
                                                   "leaked_markup": None, "prompt_tokens": None,
                                                   "completion_tokens": None}
        called = [c["name"] for c in parsed["tool_calls"] if isinstance(c.get("name"), str)]
        wanted = [n for n in dict.fromkeys([*([turn.expect_tool] if turn.expect_tool else []), *called])
                  if n in schemas]
        return {"level": level, "repetition": rep, "seq": seq[0], "case": case.id, "turn": t, "round": rnd,
                "phase": phase, "request": body, "max_tokens": body.get("max_tokens"),
                "context_limit": self.s.context_limit, "temperature": body.get("temperature"),
                "tool_choice": body.get("tool_choice"), "tools": [x["function"]["name"] for x in body.get("tools", [])],
                "tool_schema": {n: schemas[n] for n in wanted},
                "response_format": body.get("response_format"),
                "reply": reply_record(rec), "parsed": parsed, "decision": "", "checks": [],
                "environment": None}

    def _emit(self, step: Step, outcomes: list[C.CheckResult]) -> None:
        step["checks"] = C.check_rows(outcomes)
        self.steps.append(step)
        if self.sink is not None:
            self.sink(step)
