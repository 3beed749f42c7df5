"""The vendor contract check: Moonshot's Kimi-Vendor-Verifier pre-flight for K3, as a user can run it against any
target — the `tool_choice` matrix, `response_format` strict and malformed, forced strict calls over the JSON Schema
suite (`k3lib.axes.agent.schemas`), sampling pinning, the reasoning field's name, streamed usage, and the previous
turn's reasoning proven to reach the model through `prompt_tokens`.

Each request is sent at the run's sampling, in each stream mode where the reply's shape depends on it, one at a
time; each becomes one row (`evidence/agent/contract.jsonl`) that `k3lib.axes.agent.contract_judge` turns into
findings. A wrong target answer is a row, never an exception.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Literal

from typing_extensions import Unpack

from ...io.chatstream import ToolCall
from ...io.client import ChatClient, ChatRecord
from ...io.prompts import RUN_SALT
from ...io.shapes import ToolCallJson
from . import checks as C
from .scenario import RunSettings, parsed_reply, reply_record
from .sample import AgentSample
from .shapes import BodyExtras, ChatBody, ChatMessage, ContractRow, JsonObject, ObservedValue, ToolDef
from .schemas import SCHEMA_SUITE, TOOL_NAME, suite_tool
from .tools import execute, result_text

#: Sampling values Moonshot's API refuses for K3 (Kimi-Vendor-Verifier's parameter suite, a subset).
UNPINNED: tuple[tuple[Literal["temperature", "top_p", "presence_penalty", "frequency_penalty"], float], ...] = (
    ("temperature", 1.1), ("top_p", 0.8), ("presence_penalty", 0.5), ("frequency_penalty", 0.5))
#: Malformed `response_format` values a server must refuse with 400.
MALFORMED_FORMATS: tuple[tuple[str, JsonObject], ...] = (("no json_schema", {"type": "json_schema"}),
                     ("unknown type", {"type": "bogus"}),
                     ("schema not an object", {"type": "json_schema",
                                               "json_schema": {"name": "x", "schema": "not a schema"}}))
HISTORY_REASONING = ("The user wants the tracking code of one order. I called lookup_order with the order id and "
                     "will quote the tracking code from its result, nothing else.")


class ContractCheck:
    """Sends the contract's requests in turn; `rows` holds one dict per request (or per pair)."""

    def __init__(self, client: ChatClient, sample: AgentSample, settings: RunSettings,
                 sink: Callable[[ContractRow], None] | None = None) -> None:
        self.client = client
        self.sample = sample
        self.s = settings
        self.sink = sink
        self.rows: list[ContractRow] = []
        self.deadline_ns: int | None = None  # set by run(): the check ends by axes.agent.max_duration_s, as each level
        self.modes = tuple(m == "stream" for m in self.s.stream_modes)
        opening = next((c for c in sample.cases if c.turns[0].expect_tool and not c.requires_images), None)
        self.case = opening
        self.user = str(opening.turns[0].user) if opening else "Call one of the tools."
        self.expect = str(opening.turns[0].expect_tool) if opening else None
        self.tools: list[ToolDef] = ([sample.tool(n).openai() for n in sample.offered(opening)]  # type: ignore[union-attr]
                      if opening else [t.openai() for t in sample.tools])

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _body(self, messages: list[ChatMessage], stream: bool, **extra: Unpack[BodyExtras]) -> ChatBody:
        body: ChatBody = {"model": self.client.model, "messages": messages, "stream": stream}
        if body["model"] is None:
            del body["model"]
        self.s.sampled(body, temperature=None if self.s.temperature is not None else self.sample.defaults.temperature,
                       max_tokens=self.sample.defaults.max_tokens)
        body.update(extra)
        return body

    def _messages(self, user: str | None = None) -> list[ChatMessage]:
        return [{"role": "system", "content": self.sample.system_prompt}, {"role": "user", "content": user or self.user}]

    async def _send(self, item: str, body: ChatBody, tag: str) -> ChatRecord:
        return await self.client.chat_body(body, strict=False, timeout_s=self.s.request_timeout_s,
                                           deadline_ns=self.deadline_ns, request_id=f"agent-contract-{item}-{tag}")

    def _row(self, item: str, mode: str, passed: bool | None, detail: str, body: ChatBody | None,
             rec: ChatRecord | None, **observed: ObservedValue) -> None:
        if rec is not None and rec.cancelled:  # its time bound (or a stop) ended it: not a reply to judge
            passed, detail = None, (f"not judged: the contract check ended at its bound (axes.agent.max_duration_s "
                                    f"{self.s.max_duration_s:g} s) or was stopped before this reply")
        row: ContractRow = {"id": item, "mode": mode, "passed": passed, "detail": detail, "request": body,
                            "http_status": rec.http_status if rec else None,
                            "reply": reply_record(rec) if rec else None, "observed": observed}
        self.rows.append(row)
        if self.sink is not None:
            self.sink(row)

    def planned_requests(self) -> int:
        """The requests `run` sends, counted from the same items (what the plan shows the operator)."""
        modes = len(self.modes)
        json_turn = any(t.final_schema() is not None and not c.requires_images
                        for c in self.sample.cases for t in c.turns)
        opening = 3 * modes + 3 + modes if self.expect is not None else 0  # tool_choice; history (3 + a reply each)
        return (opening + 3 + (modes if json_turn else 0) + len(MALFORMED_FORMATS)
                + len(SCHEMA_SUITE) * modes + len(UNPINNED))

    @staticmethod
    def _mode(stream: bool) -> str:
        return "stream" if stream else "non-stream"

    async def run(self) -> None:
        """Every item in turn, within `axes.agent.max_duration_s` like each level and the tool-turn series: against a
        stalled target the check ends by its bound, the items it did not reach left open."""
        self.deadline_ns = time.perf_counter_ns() + int(self.s.max_duration_s * 1e9)
        await self.tool_choice()
        await self.tool_choice_validation()
        await self.response_format()
        await self.schema_suite()
        await self.sampling()
        await self.history()

    # -- tool_choice --------------------------------------------------------------------------------------------

    async def tool_choice(self) -> None:
        if self.expect is None:
            self._row("tool_choice_required", "-", None, "the sample has no opening turn that must call a tool",
                      None, None)
            return
        named: JsonObject = {"type": "function", "function": {"name": self.expect}}
        for stream in self.modes:
            mode = self._mode(stream)
            for item, choice in (("tool_choice_required", "required"), ("tool_choice_named", named)):
                body = self._body(self._messages(), stream, tools=self.tools, tool_choice=choice)
                rec = await self._send(item, body, mode)
                passed, detail, calls = self._forced(rec, None if choice == "required" else self.expect)
                self._row(item, mode, passed, detail, body, rec, finish_reason=rec.finish_reason, calls=calls,
                          reasoning_field=rec.reasoning_field, usage_present=rec.usage_present,
                          prompt_tokens=rec.prompt_tokens)
                if rec.ok and calls:
                    fin_ok = rec.finish_reason == "tool_calls"
                    self._row("forced_finish_reason", mode, fin_ok,
                              f"{'required' if choice == 'required' else 'named'} call ended with finish_reason "
                              f"{rec.finish_reason!r}" + ("" if fin_ok else ": a client that waits for "
                                                          "'tool_calls' misses the call"), None, None)
            body = self._body(self._messages(), stream, tools=self.tools, tool_choice="none")
            rec = await self._send("tool_choice_none", body, mode)
            parsed = parsed_reply(rec) if rec.ok else {}
            markup = C.leaked_family(rec.content, rec.reasoning)
            if not rec.ok:
                passed, detail = False, f"HTTP {rec.http_status}: {(rec.error or '')[:160]}"
            elif parsed.get("tool_calls") or markup:
                passed, detail = False, ("a call came back although tool_choice is none" if parsed.get("tool_calls")
                                         else f"leak: {markup} tool-call markup in the reply under tool_choice none")
            else:
                passed, detail = True, "no call and no call markup"
            self._row("tool_choice_none", mode, passed, detail, body, rec, finish_reason=rec.finish_reason)

    def _forced(self, rec: ChatRecord, name: str | None) -> tuple[bool, str, list[str]]:
        """A forced call: present (named as asked), not returned as text."""
        if not rec.ok:
            return False, f"HTTP {rec.http_status}: {(rec.error or '')[:160]}", []
        calls = [ToolCall.model_validate(c) for c in parsed_reply(rec)["tool_calls"]]
        names = [str(c.name) for c in calls]
        leak = C.leaked_family(rec.content, rec.reasoning) or C.detect_k3_leak(rec.content)
        if not calls:
            if leak:
                return False, f"forced call returned as text: {leak} markup in the reply, no tool_calls " \
                              f"(finish_reason {rec.finish_reason!r}; vllm#51355)", names
            return False, f"no tool_calls although the call was forced (finish_reason {rec.finish_reason!r})", names
        if name is not None and name not in names:
            return False, f"called {names}, not the named {name}", names
        return True, f"called {', '.join(names)} (finish_reason {rec.finish_reason!r})", names

    async def tool_choice_validation(self) -> None:
        cases: tuple[tuple[str, BodyExtras], ...] = (("required without tools", {"tool_choice": "required"}),
                 ("an empty tools array", {"tools": [], "tool_choice": "required"}),
                 ("tool_choice 'bogus'", {"tools": self.tools, "tool_choice": "bogus"}))
        for what, extra in cases:
            body = self._body(self._messages(), False, **extra)
            body["max_tokens"] = min(body.get("max_tokens") or 16, 16)  # refused before generating, if the server is right
            rec = await self._send("tool_choice_validation", body, what.replace(" ", "-"))
            passed = rec.http_status == 400
            self._row("tool_choice_validation", what, passed,
                      f"{what}: HTTP {rec.http_status}" + ("" if passed else ", expected 400"), body, rec)

    # -- response_format ----------------------------------------------------------------------------------------

    async def response_format(self) -> None:
        turn = next((t for c in self.sample.cases for t in c.turns if t.final_schema() is not None
                     and not c.requires_images), None)
        if turn is None:
            self._row("response_format_strict", "-", None, "the sample has no json_schema turn", None, None)
        else:
            schema = turn.final_schema() or {}
            for stream in self.modes:
                mode = self._mode(stream)
                body = self._body(self._messages(str(turn.user)), stream, response_format=turn.response_format)
                rec = await self._send("response_format_strict", body, mode)
                passed, detail = _valid_json(rec, schema)
                self._row("response_format_strict", mode, passed, detail, body, rec, finish_reason=rec.finish_reason)
        for what, rf in MALFORMED_FORMATS:
            body = self._body(self._messages(), False, response_format=rf)
            body["max_tokens"] = min(body.get("max_tokens") or 16, 16)
            rec = await self._send("response_format_validation", body, what.replace(" ", "-"))
            passed = rec.http_status == 400
            self._row("response_format_validation", what, passed,
                      f"response_format with {what}: HTTP {rec.http_status}" + ("" if passed else ", expected 400"),
                      body, rec)

    # -- the JSON Schema suite ----------------------------------------------------------------------------------

    async def schema_suite(self) -> None:
        user = (f"Call {TOOL_NAME} once. Fill every argument with a value that satisfies its schema exactly: "
                "respect types, ranges, enums and array sizes, and add no other argument.")
        for name, schema in SCHEMA_SUITE.items():
            for stream in self.modes:
                mode = self._mode(stream)
                body = self._body(self._messages(user), stream, tools=[suite_tool(schema)], tool_choice="required")
                rec = await self._send("schema_suite", body, f"{name}-{mode}")
                passed, detail, _ = self._forced(rec, TOOL_NAME)
                if passed:
                    call = ToolCall.model_validate(parsed_reply(rec)["tool_calls"][0])
                    outcome = C.check_arguments(call, schema)
                    passed, detail = outcome.passed, f"{name}: {outcome.detail}"
                else:
                    detail = f"{name}: {detail}"
                self._row("schema_suite", mode, passed, detail, body, rec, schema=name,
                          finish_reason=rec.finish_reason)

    # -- sampling, reasoning field, usage ------------------------------------------------------------------------

    async def sampling(self) -> None:
        for param, value in UNPINNED:
            body = self._body(self._messages(), False)
            body[param] = value
            body["max_tokens"] = min(body.get("max_tokens") or 16, 16)
            rec = await self._send("sampling_pinned", body, param)
            refused = rec.http_status == 400
            self._row("sampling_pinned", f"{param}={value}", refused,
                      f"{param} {value}: " + ("refused (400)" if refused else f"accepted (HTTP {rec.http_status})"),
                      body, rec)

    # -- history reasoning ---------------------------------------------------------------------------------------

    def _history(self, field: Literal["reasoning", "reasoning_content"] | None) -> list[ChatMessage]:
        """The opening turn, the model's call (with reasoning under `field`, or none), its result: the next request
        of the same turn, where an agent needs its own reasoning back."""
        name = self.expect or "lookup_order"
        args = {"order_id": "A-1042"} if name == "lookup_order" else {}
        call: ToolCallJson = {"id": f"call-{RUN_SALT}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}
        assistant: ChatMessage = {"role": "assistant", "content": "", "tool_calls": [call]}
        if field is not None:
            assistant[field] = HISTORY_REASONING
        result = execute(name, args) if name == "lookup_order" else {"ok": True}
        return [*self._messages(), assistant,
                {"role": "tool", "tool_call_id": call["id"], "content": result_text(result)}]

    async def history(self) -> None:
        if self.expect is None:
            return
        counts: dict[str, int | None] = {}
        for field in ("reasoning", "reasoning_content", None):
            body = self._body(self._history(field), False, tools=self.tools)
            body["max_tokens"] = 1  # only the prompt is counted
            rec = await self._send("history_reasoning", body, str(field))
            counts[str(field)] = rec.prompt_tokens if rec.ok else None
        base = counts["None"]
        for field in ("reasoning", "reasoning_content"):
            with_it = counts[field]
            if with_it is None or base is None:
                passed, detail = None, "prompt_tokens missing: the comparison cannot be made"
            elif with_it > base:
                passed, detail = True, (f"history with `{field}`: {with_it} prompt tokens, without: {base}: "
                                        "the previous reasoning reaches the model")
            else:
                passed, detail = False, (f"history with `{field}`: {with_it} prompt tokens, without: {base}: the "
                                         "previous reasoning never reached the model (dropped by a gateway, an SDK "
                                         "or the chat template)")
            self._row("history_reasoning", field, passed, detail, None, None, with_reasoning=with_it, without=base)
        for stream in self.modes:
            mode = self._mode(stream)
            body = self._body(self._history("reasoning"), stream, tools=self.tools)
            rec = await self._send("history_reply", body, mode)
            passed, detail = self._clean_reply(rec)
            self._row("history_reply", mode, passed, detail, body, rec, reasoning_field=rec.reasoning_field,
                      finish_reason=rec.finish_reason)

    def _clean_reply(self, rec: ChatRecord) -> tuple[bool, str]:
        if not rec.ok:
            return False, f"HTTP {rec.http_status}: {(rec.error or '')[:160]}"
        calls = [ToolCall.model_validate(c) for c in parsed_reply(rec)["tool_calls"]]
        bad = [o for o in [C.check_markup(rec.content, rec.reasoning, calls),
                           *C.check_reasoning(self.s.thinking, rec.finish_reason, rec.content, rec.reasoning)]
               if not o.passed]
        if bad:
            return False, bad[0].detail
        return True, "reasoning in its field, no leak"


def _valid_json(rec: ChatRecord, schema: JsonObject) -> tuple[bool, str]:
    if not rec.ok:
        return False, f"HTTP {rec.http_status}: {(rec.error or '')[:160]}"
    try:
        value = json.loads(rec.content or "")
    except ValueError as exc:
        cut = " (cut by max_tokens)" if rec.finish_reason == "length" else ""
        return False, f"the answer is not JSON{cut}: {exc}"
    errors = C.schema_errors(value, schema)
    if errors:
        return False, "the answer breaks its schema: " + "; ".join(errors[:3])
    return True, "valid JSON, valid against its schema"
