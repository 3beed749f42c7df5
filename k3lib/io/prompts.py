"""Prompt builder: chat requests sized to an exact token count with the server's own `/tokenize`.

A shared prefix (system message, identical bytes in every prompt, so the prefix cache can reuse it) plus a
unique suffix filled with deterministic text for a seed. Where the server has no `/tokenize` (llama.cpp, a
hosted API) sizes are estimated from characters per token and marked `sized_by="estimate"`.
"""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from k3lib.io.client import ChatClient
from k3lib.core.errors import APIError, BadInputError
from k3lib.io.shapes import ChatBody, ChatMessage, ToolDef

Messages = list[ChatMessage]

# A fixed, plain vocabulary: the filler must tokenize the same way on every run and every tokenizer version.
_VOCABULARY = tuple("""
time year people way day man thing woman life child world school state family student group country problem
hand part place case week company system program question work government number night point home water room
mother area money story fact month lot right study book eye job word business issue side kind head house
service friend father power hour game line end member law car city community name president team minute idea
kid body information back parent face others level office door health person art war history party result
change morning reason research girl guy moment air teacher force education foot boy age policy process music
market sense nation plan college interest death experience effect use class control care field development role
effort rate heart drug show leader light voice wife police mind price report decision son view relationship town
road arm difference value building action model season society tax director position player record paper space
ground form event official matter center couple site project activity star table need court oil situation cost
industry figure street image phone data picture practice piece land product doctor wall patient worker news test
movie north love support technology step baby computer type attention film tree source organization hair window
evidence population truth song energy memory river garden bridge engine signal cloud metal glass stone paper
""".split())

#: The unit appended one at a time to land on the exact count; " x" is a single token in common BPE vocabularies.
_PAD = " x"


class TokenCounter(Protocol):
    """Counts the tokens a chat request's prompt will have on the server (chat template included)."""

    @property
    def sized_by(self) -> str: ...

    async def count_chat(self, messages: Messages, tools: Sequence[Mapping[str, Any]] | None) -> int: ...

    async def count_text(self, text: str) -> int: ...


class ServerTokenCounter:
    """vLLM's `/tokenize`: exact, including the chat template and tool schemas."""

    sized_by = "tokenize"

    def __init__(self, client: ChatClient) -> None:
        self.client = client
        self.max_model_len: int | None = None

    async def count_chat(self, messages: Messages, tools: Sequence[Mapping[str, Any]] | None) -> int:
        res = await self.client.tokenize(messages=messages, tools=tools)
        self.max_model_len = res.max_model_len
        return res.count

    async def count_text(self, text: str) -> int:
        res = await self.client.tokenize(prompt=text)
        self.max_model_len = res.max_model_len
        return res.count


@dataclass(frozen=True)
class EstimateCounter:
    """chars/token estimate for servers without `/tokenize`. 4 chars/token is typical for English BPE."""

    chars_per_token: float = 4.0
    #: role markers and separators a chat template adds per message (a guess, hence "estimate")
    tokens_per_message: int = 4
    sized_by: str = "estimate"

    async def count_chat(self, messages: Messages, tools: Sequence[Mapping[str, Any]] | None) -> int:
        chars = sum(len(str(m.get("content") or "")) for m in messages)
        chars += sum(len(str(t)) for t in tools or ())
        return math.ceil(chars / self.chars_per_token) + self.tokens_per_message * len(messages)

    async def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


@dataclass(frozen=True)
class BuiltPrompt:
    """One sized prompt. `prompt_tokens` is what the counter measured; `exact` says it hit the target."""

    index: int
    seed: int
    messages: tuple[ChatMessage, ...]
    target_tokens: int
    prompt_tokens: int
    shared_prefix_tokens: int
    sized_by: str
    exact: bool
    max_model_len: int | None = None

    def body(self, *, max_tokens: int, model: str | None = None, stream: bool = True,
             tools: Sequence[Mapping[str, Any]] | None = None, **params: Any) -> ChatBody:
        """A chat-completions request body (tools must be the ones the prompt was sized with)."""
        body = cast(ChatBody, {"messages": [m.copy() for m in self.messages], "max_tokens": max_tokens,
                               "stream": stream, **params})
        if model is not None:
            body["model"] = model
        if tools:
            body["tools"] = [cast(ToolDef, t) for t in tools]
        return body


def filler_text(seed: int | str, n_words: int) -> str:
    """Deterministic filler: the same seed gives the same words on every run (str seeds are hashed stably)."""
    rng = random.Random(f"k3kit-filler:{seed}")
    return " ".join(rng.choice(_VOCABULARY) for _ in range(n_words))


async def fit_count(count: Callable[[int, int], Awaitable[int]], target: int, *, guess_words: int | None = None,
                    max_calls: int = 40) -> tuple[int, int, int]:
    """Find (words, pads, tokens) so that `count(words, pads)` equals `target`, or the closest count below it.

    Token counts grow with the number of filler words but not strictly one per word, so: proportional steps
    from a guess, a binary search in the last bracket, then single-token pads to land exactly.
    """
    calls = 0

    async def c(w: int, p: int = 0) -> int:
        nonlocal calls
        calls += 1
        return await count(w, p)

    base = await c(0)
    if base >= target:
        return 0, 0, base
    lo, lo_c = 0, base            # largest known word count with tokens <= target
    hi: int | None = None         # smallest known word count with tokens > target
    w = guess_words if guess_words and guess_words > 0 else max(1, int((target - base) / 1.3))
    while calls < max_calls:
        if hi is not None and hi - lo <= 1:
            break
        if hi is not None and not (lo < w < hi):
            w = (lo + hi) // 2
        got = await c(w)
        if got == target:
            return w, 0, got
        if got < target:
            lo, lo_c = w, got
            per_word = (got - base) / w if w else 1.0
            w = w + max(1, int((target - got) / max(per_word, 0.05)))
        else:
            hi = w
            per_word = (got - base) / w if w else 1.0
            w = max(lo + 1, w - max(1, math.ceil((got - target) / max(per_word, 0.05))))
    best = (lo, 0, lo_c)
    pads = target - lo_c
    while pads > 0 and calls < max_calls:
        got = await c(lo, pads)
        if got == target:
            return lo, pads, got
        if got < target:
            best = max(best, (lo, pads, got), key=lambda t: t[2])
            pads += target - got
        else:
            pads -= got - target
    return best


#: Drawn once per process (a run, and the worker processes that inherit its prompts): the prompts of one run are
#: reproducible for a seed, those of another run differ, and nothing in them names the kit — a cache or gateway
#: can neither recognise the kit's requests nor answer them from an earlier run.
RUN_SALT = secrets.token_hex(6)


async def build_prompts(source: ChatClient | TokenCounter, *, count: int, target_tokens: int | Sequence[int],
                        shared_prefix_tokens: int = 0, seed: int = 0,
                        tools: Sequence[Mapping[str, Any]] | None = None,
                        fallback_chars_per_token: float = 4.0, salt: str | None = None) -> list[BuiltPrompt]:
    """`count` prompts of `target_tokens` each (one value, or one per prompt, cycled); `salt` (default `RUN_SALT`)
    heads each user message and seeds its text with `seed`.

    Every prompt starts with the same system message of about `shared_prefix_tokens` tokens (byte-identical,
    so cacheable) and continues with a user message that is unique from its first characters. With a
    `ChatClient`, sizes come from the server's `/tokenize`; if it answers 404/405/501 the builder falls back
    to `EstimateCounter(fallback_chars_per_token)` and says so in `sized_by`.
    """
    targets = [target_tokens] if isinstance(target_tokens, int) else list(target_tokens)
    if count < 0 or not targets or min(targets) <= 0 or shared_prefix_tokens < 0:
        raise BadInputError("build_prompts needs count >= 0, positive target_tokens and shared_prefix_tokens >= 0",
                            field="target_tokens")
    counter: TokenCounter = ServerTokenCounter(source) if isinstance(source, ChatClient) else source
    tool_list = list(tools) if tools else None
    try:
        prefix = await _prefix_text(counter, shared_prefix_tokens, seed)
    except APIError as exc:
        if not isinstance(counter, ServerTokenCounter) or exc.status not in (404, 405, 501):
            raise
        # no /tokenize on this server (llama.cpp, hosted APIs): estimate, and say so in every prompt
        counter = EstimateCounter(chars_per_token=fallback_chars_per_token)
        prefix = await _prefix_text(counter, shared_prefix_tokens, seed)
    prefix_text, prefix_tokens = prefix

    out: list[BuiltPrompt] = []
    guesses: dict[int, int] = {}
    for i in range(count):
        target = targets[i % len(targets)]
        tag = RUN_SALT if salt is None else salt
        header = f"[{tag}-{seed}-{i}] "
        unique = random.Random(f"suffix:{tag}:{seed}:{i}").random()

        def make(words: int, pads: int, *, _i: int = i, _h: str = header, _u: float = unique) -> Messages:
            user = _h + filler_text(f"{seed}:{_i}:{_u}", words) + _PAD * pads
            msgs: Messages = [{"role": "system", "content": prefix_text}] if prefix_text else []
            return msgs + [{"role": "user", "content": user}]

        async def count_of(words: int, pads: int, _make: Callable[..., Messages] = make) -> int:
            return await counter.count_chat(_make(words, pads), tool_list)

        words, pads, got = await fit_count(count_of, target, guess_words=guesses.get(target))
        guesses[target] = words
        out.append(BuiltPrompt(index=i, seed=seed, messages=tuple(make(words, pads)), target_tokens=target,
                               prompt_tokens=got, shared_prefix_tokens=prefix_tokens, sized_by=counter.sized_by,
                               exact=got == target,
                               max_model_len=getattr(counter, "max_model_len", None)))
    return out


async def _prefix_text(counter: TokenCounter, tokens: int, seed: int) -> tuple[str, int]:
    if tokens <= 0:
        # probe once anyway so a missing /tokenize is detected here, before any prompt is built
        await counter.count_text("ping")
        return "", 0
    preamble = "You are a careful assistant. Reference material follows. "

    async def count_of(words: int, pads: int) -> int:
        return await counter.count_text(preamble + filler_text(f"prefix:{seed}", words) + _PAD * pads)

    words, pads, got = await fit_count(count_of, tokens)
    return preamble + filler_text(f"prefix:{seed}", words) + _PAD * pads, got
