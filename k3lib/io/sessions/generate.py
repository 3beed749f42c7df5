"""Sessions generated from the contract when no trace is given: the shape an agent's traffic has.

Every session starts with the same system prompt and tools (byte-identical, the prefix the server's cache shares
across sessions), asks a question that needs a tool, answers the live call with a recorded result, then goes on:
each user turn adds deterministic words (the history grows) and asks again. Think times are drawn from a seeded
exponential distribution (capped), the growth per turn so that the context reaches the contract's longest exchange
within the turns allowed. Same arguments, same sessions.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .trace import THINK_CAP_S, SessionTurn, TraceMessage

__all__ = ["FILLER_SAMPLE", "Question", "SessionShape", "generate_sessions"]

#: a generated user word is about this many tokens (the growth is checked against the server's count, not this)
CHARS_PER_TOKEN = 4.0
_FILLER = ("north", "river", "garden", "bridge", "engine", "signal", "cloud", "metal", "glass", "stone", "paper",
           "market", "season", "window", "theory", "valley", "harbor", "lantern", "meadow", "copper", "summit",
           "canvas", "pillar", "thread", "anchor", "beacon", "cradle", "fabric", "magnet", "saddle", "timber")


@dataclass(frozen=True)
class Question:
    """A user question that needs `function`, and the recorded result its call gets back."""

    text: str
    function: str
    result: str


@dataclass(frozen=True)
class SessionShape:
    sessions: int
    system_prompt: str
    tools: tuple[Mapping[str, Any], ...]
    questions: tuple[Question, ...]
    longest_tokens: int  # the contract's longest exchange: the context a session grows to
    max_tokens: int  # the ceiling of every reply (a reasoning model thinks inside it before it calls)
    max_turns: int  # user turns and tool-result turns together
    think_mean_s: float
    seed: int = 0
    start_tokens: int = 0  # the system prompt and tools, when known (else estimated from their characters)
    reply_tokens: int = 0  # a reply's expected size, what the history grows by (0: the ceiling)
    chars_per_token: float = CHARS_PER_TOKEN  # the server's tokenizer on the filler (its /tokenize), when measured


#: the filler words as the server's /tokenize is asked to count them (the session phase's calibration)
FILLER_SAMPLE = " ".join(_FILLER * 4)


def _estimate(text: str, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    return math.ceil(len(text) / chars_per_token)


def _words(rng: random.Random, tokens: int, banned: set[str], chars_per_token: float = CHARS_PER_TOKEN) -> str:
    """About `tokens` tokens of filler words, at `chars_per_token` characters a token."""
    pool = [w for w in _FILLER if not any(b in w for b in banned)] or ["steady"]
    out: list[str] = []
    chars, target = 0, max(1, tokens) * chars_per_token
    while chars < target or not out:
        out.append(rng.choice(pool))
        chars += len(out[-1]) + 1
    return " ".join(out)


def _keywords(tools: Sequence[Mapping[str, Any]]) -> set[str]:
    """Parts of the tool names the filler must not contain (it must not ask for a tool by accident)."""
    out = set()
    for t in tools:
        name = str((t.get("function") or {}).get("name") or "")
        out |= {w.lower() for w in re.split(r"[_\-.\s]+", name) if len(w) >= 4}
    return out


def _think(rng: random.Random, mean_s: float) -> float:
    return round(min(rng.expovariate(1.0 / mean_s), THINK_CAP_S, 5 * mean_s), 4) if mean_s > 0 else 0.0


def generate_one(shape: SessionShape, index: int) -> list[SessionTurn]:
    """Session `index`: question, tool result, then growing user turns each with a question, until the context
    estimate reaches the longest exchange or the turns run out."""
    rng = random.Random(f"{shape.seed}:{index}")
    sid = f"s{shape.seed}-{index}"
    banned = _keywords(shape.tools)
    # the longest exchange is reached within half the turns allowed (a user turn and its tool result are two)
    user_turns = max(1, math.ceil(shape.max_turns / 4))
    cpt = shape.chars_per_token
    base = shape.start_tokens or _estimate(shape.system_prompt, cpt) + _estimate(repr(shape.tools), cpt)
    reply = shape.reply_tokens or shape.max_tokens
    per_turn = max(8, (shape.longest_tokens - base) // user_turns - reply)
    turns: list[SessionTurn] = []
    context = base
    q = index
    while len(turns) < shape.max_turns:
        question = shape.questions[q % len(shape.questions)]
        q += 1
        growth = 0 if not turns else min(per_turn, max(8, shape.longest_tokens - context - 2 * reply))
        text = question.text if not growth else f"{_words(rng, growth, banned, cpt)}\n\n{question.text}"
        first = not turns
        turns.append(SessionTurn(sid, len(turns), 0.0 if first else _think(rng, shape.think_mean_s),
                                 (TraceMessage("user", content=text),), shape.max_tokens, True, question.function,
                                 shape.system_prompt if first else None, None, tuple(shape.tools) if first else ()))
        context += _estimate(text, cpt) + reply
        if len(turns) >= shape.max_turns:
            break
        # the tool's latency before its result comes back: a tenth of a think time
        turns.append(SessionTurn(sid, len(turns), _think(rng, shape.think_mean_s / 10),
                                 (TraceMessage("tool", content=question.result, call=0),), shape.max_tokens))
        context += _estimate(question.result, cpt) + reply
        if len(turns) >= 3 and context + 2 * reply + 8 >= shape.longest_tokens:
            break  # no room left for another question and its replies (a session resends its history at least once)
    return turns


def generate_sessions(shape: SessionShape, first: int = 0) -> list[list[SessionTurn]]:
    """`shape.sessions` sessions, numbered from `first` (a level that starts more sessions numbers them on)."""
    if not shape.questions:
        raise ValueError("a generated session needs at least one question that calls a tool")
    return [generate_one(shape, first + i) for i in range(shape.sessions)]
