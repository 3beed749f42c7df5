"""The tool-call contract as pure checks: one reply (or one repetition) in, `CheckResult` values out, never raises.

Each check answers one question of the seed's pass list; `rates` folds outcomes into pass rates per check and
per concurrency level, with their counts.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import jsonschema
from pydantic import computed_field

from ...core.jsonvalue import JsonValue

from ...core.record import Record
from ...io.chatstream import ToolCall
from ...io.readers.tool_markup import detect_k3_leak, detect_markup
from .config import ECHO_WORDS
from .sample import FallbackSpec, FinalSpec
from .shapes import ChatMessage, CheckRow, JsonObject, Step

# Check ids, in the order the seed lists the pass conditions; the rule id of a finding is `agent.<id>`.
CHECKS: Mapping[str, str] = {
    "requests_ok": "the request is answered (HTTP 200, a complete reply)",
    "tool_calls_present": "`tool_calls` present when the turn requires a call",
    "function_name": "the function name is exactly one of the offered tools",
    "arguments_valid": "arguments are a JSON string valid against the tool's schema",
    "executable": "the client can execute the call with no transformation",
    "final_answer": "the final answer meets its contract",
    "tool_error_fallback": "a tool error triggers the planned fallback (retry or acknowledgement)",
    "structure_stable": "repetitions give a compatible structure (same tools, same argument keys)",
    "no_markup_leak": "no tool-call markup or Kimi K3 control token leaked into content or reasoning, no think "
                      "channel left in content",
    "history_kept": "each earlier reply goes back whole in later turns (its reasoning and tool calls)",
    "no_reasoning_leak": "with thinking on, no reasoning cut by max_tokens comes back as content",
    "reasoning_present": "with thinking on, every answered reply carries its reasoning field",
}
#: Checks that apply only when the recipe turns thinking on (`recipe.sampling.thinking`): no finding without it.
THINKING_CHECKS = ("no_reasoning_leak", "reasoning_present")

# vLLM's exact 400 texts when the server was started without the tool flags (every version 0.10–0.33).
AUTO_TOOL_CHOICE_TEXT = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
PARSER_REQUIRED_TEXT = "requires --tool-call-parser to be set"


class CheckResult(Record):
    """One check of the tool-call contract on one reply, as the steps and turns files store it."""

    check: str
    passed: bool
    detail: str

    def __init__(self, check: str, passed: bool, detail: str) -> None:
        super().__init__(check=check, passed=passed, detail=detail)


def check_rows(outcomes: Iterable[CheckResult]) -> list[CheckRow]:
    """The outcomes as a step or a turn stores them."""
    return [cast(CheckRow, o.model_dump()) for o in outcomes]


#: The kit's one tool-call record (`parsed`, `json_error` read from its arguments); the name stays for the
#: agent package's public API.
ParsedCall = ToolCall


def parse_call(index: int, raw: JsonObject) -> ToolCall:
    """A `{"id", "type", "function": {"name", "arguments"}}` dict → ToolCall."""
    return ToolCall.from_openai(index, raw)


def calls_of_message(message: JsonValue) -> list[ToolCall]:
    """The calls of a reply's message as received (any JSON: what is not a call is left out)."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return [parse_call(i, c) for i, c in enumerate(calls if isinstance(calls, list) else []) if isinstance(c, dict)]


def environment_refusal(status: int | None, message: str | None) -> str | None:
    """'auto-tool-choice' / 'tool-parser' when a 400 says the server lacks its tool flags, else None."""
    if status != 400 or not message:
        return None
    if AUTO_TOOL_CHOICE_TEXT in message:
        return "auto-tool-choice"
    if PARSER_REQUIRED_TEXT in message:
        return "tool-parser"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Per-reply checks


def check_request(ok: bool, status: int | None, error: str | None) -> CheckResult:
    if ok:
        return CheckResult("requests_ok", True, f"HTTP {status}")
    return CheckResult("requests_ok", False, (error or f"HTTP {status}")[:300])


def check_required_call(calls: Sequence[ToolCall], expect_tool: str, leaked: str | None) -> CheckResult:
    names = [c.name for c in calls]
    if expect_tool in names:
        return CheckResult("tool_calls_present", True, f"{expect_tool} called")
    if not calls:
        why = f"; {leaked} tool markup in the text instead" if leaked else ""
        return CheckResult("tool_calls_present", False, f"no tool_calls; {expect_tool} was required{why}")
    return CheckResult("tool_calls_present", False, f"called {names}, not the required {expect_tool}")


def check_name(call: ToolCall, offered: Sequence[str]) -> CheckResult:
    if isinstance(call.name, str) and call.name in offered:
        return CheckResult("function_name", True, call.name)
    near = ""
    if isinstance(call.name, str):
        stripped = call.name.strip().removeprefix("functions.").split(":")[0]
        if stripped in offered:
            near = f" (would need rewriting to {stripped!r})"
    return CheckResult("function_name", False, f"{call.name!r} is not one of {list(offered)}{near}")


def schema_errors(instance: Any, schema: Mapping[str, JsonValue]) -> list[str]:
    """jsonschema's messages with their paths, best match first; empty when valid (formats are checked)."""
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(instance), key=jsonschema.exceptions.relevance)
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in errors]


def check_arguments(call: ToolCall, schema: Mapping[str, JsonValue] | None) -> CheckResult:
    if call.json_error:
        return CheckResult("arguments_valid", False, call.json_error[:300])
    if schema is None:
        return CheckResult("arguments_valid", False, f"no schema: {call.name!r} was not offered")
    errors = schema_errors(call.parsed, schema)
    if errors:
        return CheckResult("arguments_valid", False, "schema: " + "; ".join(errors[:3])[:300])
    return CheckResult("arguments_valid", True, "valid JSON, valid against the schema")


def check_executable(call: ToolCall, schemas: Mapping[str, JsonObject], other_ids: Sequence[Any]) -> CheckResult:
    """What an agent framework needs to run the call as is: no renaming, no re-parsing, no guessing."""
    problems = []
    if call.type != "function":
        problems.append(f"type is {call.type!r}, not 'function'")
    if not isinstance(call.id, str) or not call.id.strip():
        problems.append("no call id to answer with a tool message")
    elif call.id in other_ids:
        problems.append(f"call id {call.id!r} repeats within the message")
    if not (isinstance(call.name, str) and call.name in schemas):
        problems.append(f"function {call.name!r} is not offered as named")
    if call.json_error:
        problems.append("arguments do not parse")
    elif isinstance(call.parsed, str):
        problems.append("arguments are JSON-encoded twice (a string holding JSON)")
    elif not isinstance(call.parsed, dict):
        problems.append(f"arguments are a JSON {type(call.parsed).__name__}, not an object")
    elif isinstance(call.name, str) and call.name in schemas and schema_errors(call.parsed, schemas[call.name]):
        problems.append("arguments break the schema")
    if problems:
        return CheckResult("executable", False, "; ".join(problems))
    return CheckResult("executable", True, f"{call.name}(**arguments) runs as received")


# A think channel the server did not parse out: what content holds when vLLM runs without --reasoning-parser.
REASONING_MARKUP: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("kimi_k3", re.compile(r"<\|open\|>\s*think\s*<\|sep\|>|<\|close\|>\s*think\s*<\|sep\|>")),
    ("<think>", re.compile(r"</?think>")),
)


def detect_reasoning_markup(text: str | None) -> str | None:
    for family, pattern in REASONING_MARKUP:
        if text and pattern.search(text):
            return family
    return None


def check_markup(content: str | None, reasoning: str | None, calls: Sequence[ToolCall]) -> CheckResult:
    """Every leak a parser lets through, named as a leak: tool-call markup (by family), a think channel left in
    content, any Kimi K3 control token or stripped call header."""
    for where, text in (("content", content), ("reasoning", reasoning),
                        *(("function name", c.name) for c in calls if isinstance(c.name, str))):
        family = detect_markup(text)
        if family:
            hint = (" (the call stayed in the think channel: vllm#53246)" if where == "reasoning" and
                    family == "kimi_k3" else "")
            return CheckResult("no_markup_leak", False, f"leak: {family} tool-call markup in {where}{hint}")
    family = detect_reasoning_markup(content)
    if family:
        return CheckResult("no_markup_leak", False, f"leak: {family} think channel in content: the reasoning was not "
                                                "parsed out (no --reasoning-parser on the server, or its streaming "
                                                "path missed the channel?)")
    for where, text in (("content", content), ("reasoning", reasoning)):
        token = detect_k3_leak(text)
        if token:
            return CheckResult("no_markup_leak", False, f"leak: Kimi K3 control token {token!r} in {where}: the parser "
                                                    "missed a channel terminator (vllm#54273, #51399)")
    return CheckResult("no_markup_leak", True, "none")


def check_reasoning(thinking: bool | None, finish_reason: str | None, content: str | None,
                    reasoning: str | None) -> list[CheckResult]:
    """With thinking on (the recipe's sampling), the chain of thought stays in its field: a reply cut by
    max_tokens that holds content and no reasoning is the reasoning leaked to the user (vllm#50258, #56850,
    #57353), and a reply with no reasoning at all lost it (no reasoning parser, or a gateway that strips it)."""
    if not thinking:
        return []
    if reasoning is None and finish_reason == "length" and (content or "").strip():
        return [CheckResult("no_reasoning_leak", False,
                        "leak: reasoning truncated into content (finish_reason length, content set, no reasoning "
                        "field: vllm#50258): the chain of thought reaches the user as the answer")]
    out = [CheckResult("no_reasoning_leak", True, "no truncated reasoning in content")]
    if reasoning is None:
        out.append(CheckResult("reasoning_present", False, "thinking is on but the reply has no reasoning field (no "
                                                       "--reasoning-parser, or a gateway strips it)"))
    else:
        out.append(CheckResult("reasoning_present", True, "reasoning field present"))
    return out


def longest_silence_s(marks: Sequence[int | None]) -> float | None:
    """The longest gap between successive byte-carrying moments of a streamed reply (perf marks in ns: send, each
    output event, end), in seconds: what a client's idle (read) timeout sees. None with fewer than two marks."""
    ns = [m for m in marks if m is not None]
    if len(ns) < 2:
        return None
    return max(b - a for a, b in zip(ns, ns[1:])) / 1e9


def leaked_family(content: str | None, reasoning: str | None) -> str | None:
    return detect_markup(content) or detect_markup(reasoning)


def _mentions(text: str, needle: str) -> bool:
    return needle.lower() in text.lower()


def check_final(content: str | None, finish_reason: str | None, final: FinalSpec,
                schema: Mapping[str, JsonValue] | None, result: Any) -> CheckResult:
    """The answer that ends a turn: present, complete, valid against the response schema, using the result."""
    text = content or ""
    if detect_markup(text):
        return CheckResult("final_answer", False, f"{detect_markup(text)} tool-call markup instead of an answer")
    if final.non_empty and not text.strip():
        return CheckResult("final_answer", False, "empty answer")
    if finish_reason == "length":
        return CheckResult("final_answer", False, "answer cut by max_tokens (finish_reason length)")
    if schema is not None:
        try:
            value = json.loads(text)
        except ValueError as exc:
            return CheckResult("final_answer", False, f"structured answer is not JSON: {exc}")
        errors = schema_errors(value, schema)
        if errors:
            return CheckResult("final_answer", False, "structured answer breaks its schema: " + "; ".join(errors[:3]))
    if final.contains_any and not any(_mentions(text, s) for s in final.contains_any):
        return CheckResult("final_answer", False, f"mentions none of {list(final.contains_any)}")
    for key in final.uses_result:
        value = result.get(key) if isinstance(result, Mapping) else None
        if value is None:
            return CheckResult("final_answer", False, f"no tool result with {key!r} to use")
        if not _mentions(text, str(value)):
            return CheckResult("final_answer", False, f"does not use the tool result: {key}={value!r} is missing")
    return CheckResult("final_answer", True, "meets its contract" + (" (schema-valid)" if schema is not None else ""))


_WORD = re.compile(r"\w+")


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
    elif value is not None:
        yield str(value)


def own_words(text: str, sent: Any) -> str:
    """What of `text` the model wrote itself: every run of `ECHO_WORDS` or more words copied in order from what the
    kit sent (`sent`: the tool error, as text or JSON), and every copied identifier (a word with `_` or a digit,
    such as an error code), replaced by " … ". Case and punctuation are ignored when matching."""
    if sent is None or not text:
        return text
    sent_words = [w.lower() for chunk in [json.dumps(sent, ensure_ascii=False) if not isinstance(sent, str) else sent,
                                          *_strings(sent)] for w in _WORD.findall(chunk)]
    grams = {tuple(sent_words[i:i + ECHO_WORDS]) for i in range(len(sent_words) - ECHO_WORDS + 1)}
    idents = {w for w in sent_words if "_" in w or any(c.isdigit() for c in w)}
    words = list(_WORD.finditer(text))
    low = [m.group().lower() for m in words]
    copied = [w in idents for w in low]
    for i in range(len(low) - ECHO_WORDS + 1):
        if tuple(low[i:i + ECHO_WORDS]) in grams:
            copied[i:i + ECHO_WORDS] = [True] * ECHO_WORDS
    out, pos = [], 0
    for m, c in zip(words, copied):
        if c:
            out.append(text[pos:m.start()])
            out.append(" … ")
            pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def check_history(pairs: Sequence[tuple[ChatMessage, ChatMessage]], mode: str) -> CheckResult:
    """`pairs`: (the assistant message as received, as sent back in this request) for each earlier reply of the
    case. Multi-turn agents need the whole previous reply, reasoning and tool calls included."""
    for n, (got, sent) in enumerate(pairs, 1):
        lost = []
        for key in ("reasoning", "reasoning_content"):
            if got.get(key) is not None and sent.get(key) != got.get(key):
                lost.append("reasoning")
                break
        if got.get("tool_calls") and sent.get("tool_calls") != got.get("tool_calls"):
            lost.append("tool calls")
        if lost:
            return CheckResult("history_kept", False, f"reply {n} of {len(pairs)} went back without its "
                                                  f"{' and '.join(lost)} (axes.agent.history: {mode})")
    return CheckResult("history_kept", True, f"{len(pairs)} earlier replies went back whole")


def check_fallback(calls: Sequence[ToolCall], content: str | None, tool: str, fallback: FallbackSpec,
                   retries_done: int, sent: Any = None) -> CheckResult:
    """The reply right after the tool returned its planned error (`sent`, what the kit put in the tool message).
    A retry is the model's own call; an answer acknowledges the failure only in the model's own words: the
    acknowledgement is looked for in what is left once every echo of `sent` is taken out (see `own_words`), so a
    reply that repeats the kit's error text verbatim does not count."""
    if calls:
        names = [c.name for c in calls]
        if tool in names and retries_done < fallback.max_retries:
            return CheckResult("tool_error_fallback", True, f"retried {tool} ({retries_done + 1}/{fallback.max_retries})")
        if tool in names:
            return CheckResult("tool_error_fallback", False,
                           f"called {tool} again beyond the {fallback.max_retries} planned retries")
        return CheckResult("tool_error_fallback", False, f"called {names} instead of retrying or acknowledging")
    text = content or ""
    invented = [s for s in fallback.must_not_contain if _mentions(text, s)]
    if invented:
        return CheckResult("tool_error_fallback", False, f"answer states {invented} although the tool failed")
    mine = own_words(text, sent)
    if not any(_mentions(mine, s) for s in fallback.acknowledge_any):
        if any(_mentions(text, s) for s in fallback.acknowledge_any):
            return CheckResult("tool_error_fallback", False,
                           "answer only echoes the tool error the kit sent: no acknowledgement in the model's own "
                           f"words (none of {list(fallback.acknowledge_any)} outside the copied text)")
        return CheckResult("tool_error_fallback", False,
                       f"answer does not acknowledge the failure (none of {list(fallback.acknowledge_any)})")
    return CheckResult("tool_error_fallback", True, "answer acknowledges the tool failure in its own words")


# ---------------------------------------------------------------------------------------------------------------
# Across repetitions and levels


def step_signature(step: Step) -> tuple[Any, ...]:
    """The structure of one reply, blind to its text: which tools, which argument keys — or text, or an error."""
    where = (step.get("case"), step.get("turn"), step.get("round"))
    if not (step.get("reply") or {}).get("ok"):
        return (*where, "error", (step.get("reply") or {}).get("http_status"))
    calls = (step.get("parsed") or {}).get("tool_calls") or []
    if calls:
        shape = sorted((str(c.get("name")), tuple(sorted(args)) if isinstance(args := c.get("parsed"), dict)
                        else ("<unparsable>",)) for c in calls)
        return (*where, "calls", tuple(shape))
    return (*where, "markup" if (step.get("parsed") or {}).get("leaked_markup") else "text")


def stability_outcomes(steps: Iterable[Step]) -> list[tuple[int, int, CheckResult]]:
    """(level, repetition, outcome): each repetition compared with the most common structure at its level."""
    by_rep: dict[tuple[int, int], list[Step]] = {}
    for s in steps:
        by_rep.setdefault((int(s["level"]), int(s["repetition"])), []).append(s)
    signatures = {key: tuple(step_signature(s) for s in sorted(group, key=lambda s: s["seq"]))
                  for key, group in by_rep.items()}
    out = []
    for level in sorted({k[0] for k in signatures}):
        sigs = {k: v for k, v in signatures.items() if k[0] == level}
        modal, count = Counter(sigs.values()).most_common(1)[0]
        for (lvl, rep), sig in sorted(sigs.items()):
            if sig == modal:
                out.append((lvl, rep, CheckResult("structure_stable", True,
                                              f"same structure as {count} of {len(sigs)} repetitions")))
            else:
                out.append((lvl, rep, CheckResult("structure_stable", False, _difference(sig, modal))))
    return out


def _difference(sig: tuple[Any, ...], modal: tuple[Any, ...]) -> str:
    for a, b in zip(sig, modal):
        if a != b:
            return f"differs from the usual structure at (case, turn, round) {a[:3]}: {a[3:]} instead of {b[3:]}"
    if len(sig) < len(modal):
        return f"stops before {modal[len(sig)][:3]}, where the usual run goes on"
    return f"goes on to {sig[len(modal)][:3]}: {sig[len(modal)][3:]}, where the usual run stops"


class RateRow(Record):
    """One check's pass count at one concurrency level; `model_dump()` is the row the record keeps (`rate` rounded
    to 4 places there, `pass_rate` whole for the judgement)."""

    level: int
    check: str
    passed: int
    failed: int
    total: int

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.total if self.total else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rate(self) -> float | None:
        return None if self.pass_rate is None else round(self.pass_rate, 4)


def rates(outcomes: Iterable[tuple[int, CheckResult]], levels: Sequence[int]) -> list[RateRow]:
    """Pass counts per (level, check) for every check and level, zero-count rows included."""
    passed: Counter[tuple[int, str]] = Counter()
    total: Counter[tuple[int, str]] = Counter()
    for level, o in outcomes:
        total[(level, o.check)] += 1
        passed[(level, o.check)] += int(o.passed)
    return [RateRow(level=level, check=check, passed=passed[(level, check)],
                    failed=total[(level, check)] - passed[(level, check)], total=total[(level, check)])
            for level in levels for check in CHECKS]
