"""The tool-turn series: independent tool turns at production sampling, enough of them to bound the tool-call failure
rate the contract tolerates (`k3lib.axes.agent.rate`).

Each turn is one of the sample's opening turns that must call a tool (a system prompt, the offered tools, the user
turn), sent at the planned concurrency, the stream modes alternating. A turn fails when the required call is
missing, misnamed, its arguments break the schema, or a leak shows (markup, a K3 control token, reasoning out of its
field). A failed turn is sent once more, as vLLM's Kimi K3 blog tells clients to do; whether that retry recovered it
is kept apart. The series stops early once, after at least 30 turns, its failures put the rate above the contract's at 99.9 % (a
failure is decided; a pass never is). Every turn lands in `evidence/agent/tool_turns.jsonl` (`judge.TURNS_FILE`) as it finishes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

from ...core.stats import wilson_interval
from ...io.chatstream import ToolCall
from ...io.client import ChatClient, ChatRecord
from ...io.load import RequestBudget
from . import checks as C
from .config import CANCEL_GRACE_S
from .scenario import RunSettings, parsed_reply, reply_record
from .sample import AgentSample, CaseSpec, TurnSpec
from .shapes import ChatBody, JsonObject, ParsedReply, SeriesSummary, TurnRow

#: The z of the bound the series stops early on (99.9 %, two-sided): a rate already above the contract's there fails.
EARLY_Z = 3.29
#: ... and never before this many turns: looking after every turn would otherwise stop on a first unlucky failure.
MIN_EARLY_TURNS = 30
#: The checks a turn's reply is judged on; the leak checks among them are also counted with the scenario's.
TURN_CHECKS = ("tool_calls_present", "function_name", "arguments_valid", "no_markup_leak", "no_reasoning_leak",
               "reasoning_present")


def opening_tool_turns(sample: AgentSample, images_served: bool) -> list[tuple[CaseSpec, TurnSpec]]:
    """The sample's first turns that must call a tool: each stands alone (no earlier reply to send back)."""
    return [(c, c.turns[0]) for c in sample.cases
            if c.turns[0].expect_tool and not (c.requires_images and not images_served)]


def turn_outcomes(rec: ChatRecord, turn: TurnSpec, offered: Sequence[str], schemas: Mapping[str, JsonObject],
                  thinking: bool | None) -> tuple[list[C.CheckResult], ParsedReply]:
    """The outcomes of one tool turn's reply and its parse."""
    if not rec.ok:
        return [C.check_request(rec.ok, rec.http_status, rec.error)], {}
    parsed = parsed_reply(rec)
    calls = [ToolCall.model_validate(c) for c in parsed["tool_calls"]]
    outcomes = [C.check_required_call(calls, str(turn.expect_tool), parsed["leaked_markup"])]
    for call in calls:
        outcomes.append(C.check_name(call, offered))
        outcomes.append(C.check_arguments(call, schemas.get(call.name) if isinstance(call.name, str) else None))
    outcomes.append(C.check_markup(rec.content, rec.reasoning, calls))
    outcomes += C.check_reasoning(thinking, rec.finish_reason, rec.content, rec.reasoning)
    return outcomes, parsed


def failure_of(outcomes: Sequence[C.CheckResult]) -> str | None:
    """The first failing outcome as the turn's failure ("<check>: <detail>"), None when every one held. A reply
    without its reasoning field still carries a usable call: that is `reasoning_present`'s finding, not a failed
    tool turn."""
    bad = next((o for o in outcomes if not o.passed and o.check != "reasoning_present"), None)
    return None if bad is None else f"{bad.check}: {bad.detail}"


class ToolTurnSeries:
    """Sends `settings.tool_turns` tool turns at `concurrency`, bounded in requests and seconds."""

    def __init__(self, client: ChatClient, sample: AgentSample, settings: RunSettings, concurrency: int,
                 sink: Callable[[TurnRow], None] | None = None) -> None:
        self.client = client
        self.sample = sample
        self.s = settings
        self.concurrency = max(1, concurrency)
        self.sink = sink
        self.turns: list[TurnRow] = []
        self.summary: SeriesSummary = {}

    async def run(self) -> None:
        pool = opening_tool_turns(self.sample, self.s.images_served)
        planned = self.s.tool_turns if pool else 0
        t0 = time.perf_counter_ns()
        budget = RequestBudget(2 * planned, t0 + int(self.s.max_duration_s * 1e9))
        pending = iter(range(planned))

        async def worker() -> None:
            for i in pending:
                if budget.stopped_by or self.failed_already():
                    return
                case, turn = pool[i % len(pool)]
                await self._turn(i, case, turn, budget)

        tasks = [asyncio.create_task(worker()) for _ in range(min(self.concurrency, planned))]
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), self.s.max_duration_s + CANCEL_GRACE_S)
        except TimeoutError:
            budget.stopped_by = budget.stopped_by or "max_duration_s"
        self.summary = {"planned": planned, "completed": sum(1 for t in self.turns if t["failure"] != "cancelled"),
                        "concurrency": self.concurrency, "requests": budget.sent, "stopped_by": budget.stopped_by,
                        "failed_early": self.failed_already(),
                        "duration_s": round((time.perf_counter_ns() - t0) / 1e9, 3),
                        "turns_from": [c.id for c, _ in pool]}

    def failed_already(self) -> bool:
        """Whether the turns so far (at least `MIN_EARLY_TURNS`) already put the failure rate above the contract's
        at 99.9 % (`EARLY_Z`): the series stops there, and the rate is judged at 95 % over every turn sent (the
        stricter bound keeps looking after each turn from making a failure out of chance). A pass is never decided
        early."""
        done = [t for t in self.turns if t["failure"] != "cancelled"]
        bounds = wilson_interval(sum(1 for t in done if t["failure"]), len(done), z=EARLY_Z)
        return len(done) >= MIN_EARLY_TURNS and bounds is not None and bounds[0] > self.s.max_tool_call_failure_rate

    def _body(self, case: CaseSpec, turn: TurnSpec, stream: bool) -> ChatBody:
        offered = self.sample.offered(case)
        d = self.sample.defaults
        body: ChatBody = {"model": self.client.model, "stream": stream,
                                "messages": [{"role": "system", "content": self.sample.system_prompt},
                                             {"role": "user", "content": turn.user if isinstance(turn.user, str)
                                              else [dict(p) for p in turn.user]}],
                                "tools": [self.sample.tool(n).openai() for n in offered]}  # type: ignore[union-attr]
        if body["model"] is None:
            del body["model"]
        choice = self.sample.tool_choice(case)
        if choice is not None:
            body["tool_choice"] = choice
        return self.s.sampled(body, temperature=case.temperature if case.temperature is not None
                              else (None if self.s.temperature is not None else d.temperature),
                              max_tokens=case.max_tokens or d.max_tokens)

    async def _send(self, body: ChatBody, rid: str, budget: RequestBudget) -> ChatRecord | None:
        if not budget.take():
            return None
        return await self.client.chat_body(body, strict=False, timeout_s=self.s.request_timeout_s,
                                           deadline_ns=budget.deadline_ns, request_id=rid)

    async def _turn(self, i: int, case: CaseSpec, turn: TurnSpec, budget: RequestBudget) -> None:
        stream = self.s.stream_for(i)
        offered = self.sample.offered(case)
        schemas = {n: self.sample.tool(n).function.parameters for n in offered}  # type: ignore[union-attr]
        body = self._body(case, turn, stream)
        rec = await self._send(body, f"agent-turn-{i}", budget)
        if rec is None or rec.cancelled:
            return  # the budget ended before this turn was answered: not a turn
        outcomes, parsed = turn_outcomes(rec, turn, offered, schemas, self.s.thinking)
        failure = failure_of(outcomes)
        step: TurnRow = {"turn": i, "case": case.id, "mode": "stream" if stream else "non-stream",
                         "level": self.concurrency, "request": body, "reply": reply_record(rec),
                         "parsed": parsed, "checks": C.check_rows(outcomes), "failure": failure,
                         "retry": None, "recovered": None}
        if failure is not None:
            again = await self._send(body, f"agent-turn-{i}-retry", budget)
            if again is not None and not again.cancelled:
                r_outcomes, r_parsed = turn_outcomes(again, turn, offered, schemas, self.s.thinking)
                r_failure = failure_of(r_outcomes)
                step["retry"] = {"reply": reply_record(again), "parsed": r_parsed,
                                 "checks": C.check_rows(r_outcomes), "failure": r_failure}
                step["recovered"] = r_failure is None
            else:
                step["recovered"] = False
        self.turns.append(step)
        if self.sink is not None:
            self.sink(step)
