"""What the emulated model answers: a token-by-token plan of reasoning, content and tool calls.

The plan is fixed before the request enters the engine (the engine only decides *when* each token comes
out), so a streamed reply and a non-streamed one are the same tokens, and `max_tokens` cuts both alike.
Faults that change the model's output (`tool-markup-leak`, `bad-tool-args`) are applied here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

from . import toolcalls
from .faults import FaultSet
from .tokenizer import Tokenizer

_LEXICON = ("the", "server", "cache", "request", "tokens", "model", "answer", "prefix", "engine", "latency",
            "queue", "memory", "batch", "stream", "result", "blocks", "context", "value", "check", "steady",
            "reply", "plan", "load", "GPU", "time", "field", "schema", "tool", "output", "input")


@dataclass(frozen=True)
class OutToken:
    id: int
    piece: str
    kind: str        # "reasoning" | "content" | "call" (header markup) | "args" | "markup"
    call: int = -1   # index of the tool call this token belongs to


@dataclass(frozen=True)
class PlannedCall:
    id: str
    name: str
    arguments: str
    end: int         # the call is complete once this many plan tokens were emitted


@dataclass(frozen=True)
class ReplyPlan:
    tokens: tuple[OutToken, ...]
    calls: tuple[PlannedCall, ...]
    named_choice: bool = False
    # the output faults this reply drew, which the reply's assembly applies (e.g. "reasoning-as-content")
    marks: frozenset[str] = frozenset()

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]


def _digest(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


def filler_text(seed: int, key: str, n_words: int) -> str:
    h = _digest(seed, key)
    words = []
    for _ in range(n_words):
        h = (h * 6364136223846793005 + 1442695040888963407) % 2**64
        words.append(_LEXICON[(h >> 33) % len(_LEXICON)])
    text = " ".join(words)
    return text[:1].upper() + text[1:] + "."


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _tokens(tok: Tokenizer, text: str, kind: str, call: int = -1) -> list[OutToken]:
    return [OutToken(tid, tok.piece_of(tid), kind, call) for tid in tok.encode(text)]


def _structured_schema(body: dict) -> tuple[str | None, dict | None]:
    rf = body.get("response_format")
    if isinstance(rf, dict):
        if rf.get("type") == "json_schema":
            js = rf.get("json_schema") or {}
            return "json_schema", js.get("schema") or js.get("json_schema") or {}
        if rf.get("type") == "json_object":
            return "json_object", None
    so = body.get("structured_outputs")
    if isinstance(so, dict) and so.get("json") is not None:
        schema = so["json"]
        return "json_schema", json.loads(schema) if isinstance(schema, str) else schema
    return None, None


def tool_failed(content: Any) -> bool:
    """Whether a tool message reports a failure: a JSON object with an `error` (or `errors`) member, or a text
    that starts with "error" — how tools and agent frameworks commonly return one."""
    text = _text_of(content).strip()
    try:
        value = json.loads(text)
    except ValueError:
        return text.lower().startswith("error")
    return isinstance(value, dict) and bool(value.get("error") or value.get("errors"))


# What the emulated model says after a failed tool call: its own words, never a copy of the tool's error text (the
# kit judges a fallback on what the model wrote, and an echo of the error it sent does not count).
FAILED_TOOL_ANSWER = ("The tool I called did not return a usable result, so I cannot answer this reliably right "
                      "now and I will not guess. Please try again in a moment.")


def sampled_draw(body: dict, reply_no: int) -> str:
    """What a sampled reply draws: "" when the request decodes greedily (temperature 0) or fixes its `seed` (the same
    seed, the same reply), else a draw of its own — vLLM samples each request anew at temperature > 0, so two replies
    to one question differ in their free text. A request without a temperature decodes greedily here (the emulated
    model has no generation_config)."""
    temperature = body.get("temperature")
    if not isinstance(temperature, (int, float)) or temperature <= 0:
        return ""
    seed = body.get("seed")
    return f"|seed={seed}" if isinstance(seed, int) else f"|draw={reply_no}"


def plan_chat(body: dict, *, cfg, tok: Tokenizer, faults: FaultSet, reply_no: int, auto_tools: bool) -> ReplyPlan:
    """The reply to a chat request; `reply_no` numbers replies so fault shares draw reproducibly."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    last_role = str(last.get("role", "user"))
    user_text = next((_text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    if choice is None:
        choice = "auto" if auto_tools else "none"
    elif choice == "auto" and not auto_tools:
        choice = "none"
    chosen = toolcalls.choose_tools(tools, choice, user_text, last_role=last_role,
                                    parallel=body.get("parallel_tool_calls", True) is not False)
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = kwargs.get("thinking", kwargs.get("enable_thinking", True)) is not False \
        and body.get("include_reasoning", True) is not False
    drawn = sampled_draw(body, reply_no)
    key = json.dumps(messages[-1:], sort_keys=True, default=str) + drawn
    marks = _marks(faults, reply_no, choice, bool(chosen), thinking and bool(cfg.reasoning_parser),
                   cfg.tool_call_parser == "kimi_k3")

    out: list[OutToken] = []
    if thinking:
        long_by = int(body.get("max_tokens") or 64) + 8 if "reasoning-as-content" in marks else 0
        said = " ".join(x for x in (filler_text(cfg.seed, key + "sampled", 8) if drawn else "",
                                    filler_text(cfg.seed, key + "think", long_by) if long_by else "") if x)
        out += _think_tokens(cfg, tok, user_text, last, [toolcalls.tool_name(t) for t in chosen], bool(tools), said)

    calls: list[PlannedCall] = []
    if chosen:
        history = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
        hints = toolcalls.string_hints(user_text)
        made = []
        for i, tool in enumerate(chosen):
            name = toolcalls.tool_name(tool)
            schema = toolcalls.tool_schema(tool)
            args = toolcalls.instance_for(schema, hints, context=user_text)
            if not isinstance(args, dict):
                args = {}
            n = reply_no * 16 + i
            if "loose-strict-args" in marks:
                args = toolcalls.loosen_arguments(args, schema)
            text = (toolcalls.break_arguments(args, schema, faults.draw("bad-tool-args-kind", n))
                    if faults.share_hit("bad-tool-args", n) else json.dumps(args, ensure_ascii=False))
            made.append((name, args, text))
        if "call-in-reasoning" in marks:
            # no think terminator: the parser takes the whole turn, its call section included, for reasoning
            out += _tokens(tok, toolcalls.kimi_k3_markup([(n, a) for n, a, _ in made]), "reasoning")
        elif faults.share_hit("tool-markup-leak", reply_no) or "required-as-text" in marks:
            # The parser missed the section: the raw markup is the content and no tool_calls come back.
            out += _tokens(tok, toolcalls.kimi_k3_markup([(n, a) for n, a, _ in made]), "content")
        else:
            out += _tokens(tok, "<|open|>tools<|sep|>", "markup")
            for i, (name, _args, text) in enumerate(made):
                out += _tokens(tok, f'<|open|>call tool="{name}" index="{i + 1}"<|sep|>', "call", i)
                out += _tokens(tok, text, "args", i)
                out += _tokens(tok, "<|close|>call<|sep|>", "markup", i)
                # kimi_k2 numbers its calls; vLLM 0.32's kimi_k3 parser gives each call a random id (seen on a
                # real server, tests/test_conformance_k3.py), as the generic parsers do
                call_id = f"functions.{name}:{history + i}" if cfg.tool_call_parser == "kimi_k2" \
                    else f"chatcmpl-tool-{_digest(cfg.seed, reply_no, i):016x}"
                calls.append(PlannedCall(call_id, name, text, len(out)))
            out += _tokens(tok, "<|close|>tools<|sep|>", "markup")
    else:
        mode, structured = _structured_schema(body)
        if mode == "json_schema":
            value = toolcalls.instance_for(structured or {}, toolcalls.string_hints(user_text), context=user_text)
            out += _tokens(tok, json.dumps(value, ensure_ascii=False), "content")
        elif mode == "json_object":
            out += _tokens(tok, json.dumps({"answer": filler_text(cfg.seed, key, 8)}), "content")
        elif last_role == "tool" and tool_failed(last.get("content")):
            out += _tokens(tok, FAILED_TOOL_ANSWER, "content")
        elif last_role == "tool":
            result = _text_of(last.get("content")).strip()
            out += _tokens(tok, f"According to the tool result, {result[:400]}", "content")
        else:
            n_words = 16 + _digest(cfg.seed, key) % 33
            out += _tokens(tok, filler_text(cfg.seed, key, n_words), "content")
    return ReplyPlan(tuple(out), tuple(calls), named_choice=isinstance(choice, dict), marks=marks)


def _think_tokens(cfg, tok: Tokenizer, user_text: str, last: dict, chosen: list[str], offered: bool,
                  longer: str) -> list[OutToken]:
    """The think channel: why the model acts as it does (`longer`: K3 thinking on past max_tokens), in the
    reasoning field with a reasoning parser, else where vLLM leaves it without one."""
    last_role = str(last.get("role", "user"))
    if chosen:
        why = f"I should call {', '.join(chosen)} with the needed arguments."
    elif last_role == "tool" and tool_failed(last.get("content")):
        why = "The tool reported a failure; I will say so instead of guessing."
    elif last_role == "tool":
        why = "The tool returned its result; I will answer with it."
    else:
        why = "I can answer directly."
    gist = " ".join(user_text.split()[:12])
    reasoning = f"The user asks: {gist}. {why}" + (f" {longer}" if longer else "")
    if cfg.reasoning_parser:
        return _tokens(tok, reasoning, "reasoning")
    if cfg.tool_call_parser == "kimi_k3":
        # no reasoning parser: vLLM's kimi_k3 tool parser keeps the think channel as content before a call and
        # when no tools were offered; an answer with tools offered is unwrapped to its response channel alone
        if chosen or not offered:
            return _tokens(tok, f"<|open|>think<|sep|>{reasoning}<|close|>think<|sep|>", "content")
        return []
    return _tokens(tok, f"<think>{reasoning}</think>", "content")  # no reasoning parser: the raw model output


def _marks(faults: FaultSet, reply_no: int, choice: Any, calling: bool, parsed_thinking: bool,
           kimi_k3: bool) -> frozenset[str]:
    """The output faults this reply draws (each at its share, reproducibly from the reply's number)."""
    forced = choice == "required" or isinstance(choice, dict)
    out = set()
    if calling and kimi_k3 and not forced and faults.share_hit("call-in-reasoning", reply_no):
        out.add("call-in-reasoning")
    if calling and choice == "required" and "required-as-text" in faults:
        out.add("required-as-text")
    if calling and forced and "loose-strict-args" in faults:
        out.add("loose-strict-args")
    if parsed_thinking and faults.share_hit("reasoning-as-content", reply_no):
        out.add("reasoning-as-content")
    if faults.share_hit("channel-leak", reply_no):
        out.add("channel-leak")
    return frozenset(out)


def plan_completion(prompt_key: str, *, cfg, tok: Tokenizer) -> ReplyPlan:
    """A plain completion: long enough that a typical `max_tokens` ends it with "length"."""
    n_words = 96 + _digest(cfg.seed, prompt_key) % 64
    return ReplyPlan(tuple(_tokens(tok, " " + filler_text(cfg.seed, prompt_key, n_words), "content")), ())


@dataclass
class Assembled:
    reasoning: str | None
    content: str | None
    calls: list[PlannedCall]


def assemble(plan: ReplyPlan, emitted: int) -> Assembled:
    """The message made of the first `emitted` plan tokens (all of them unless cut by max_tokens)."""
    toks: Sequence[OutToken] = plan.tokens[:emitted]
    reasoning = "".join(t.piece for t in toks if t.kind == "reasoning")
    content = "".join(t.piece for t in toks if t.kind == "content")
    calls = [c for c in plan.calls if c.end <= emitted]
    return Assembled(reasoning or None, content or None, calls)
