"""Prompt builder: exact sizes from /tokenize, deterministic for a seed, shared prefix byte-identical, an
estimate (said so) where /tokenize is absent."""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import httpx
import pytest

from k3lib.io.knowntiming import KnownTimingServer
from k3lib.io.client import ChatClient
from k3lib.core.errors import APIError, BadInputError
from k3lib.io.prompts import EstimateCounter, build_prompts, filler_text, fit_count


def run(coro_factory: Any) -> Any:
    return asyncio.run(coro_factory())


def toy_count_text(text: str) -> int:
    # a deliberately irregular tokenizer: words split in 3-char pieces, punctuation separate
    return sum(math.ceil(len(w) / 3) for w in re.findall(r"\w+", text)) + len(re.findall(r"[^\w\s]", text))


def toy_count_chat(body: dict[str, Any]) -> int:
    n = sum(toy_count_text(m["content"]) + 4 for m in body["messages"]) + 3
    if body.get("tools"):
        n += toy_count_text(json.dumps(body["tools"]))
    return n


class TokenizeServer:
    """A MockTransport /tokenize with the toy tokenizer; counts calls."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/tokenize"
        self.calls += 1
        if self.status != 200:
            return httpx.Response(self.status, json={"detail": "Not Found"})
        body = json.loads(request.content)
        assert body["model"] == "m"
        if "messages" in body:
            assert body["add_generation_prompt"] is True
            n = toy_count_chat(body)
        else:
            n = toy_count_text(body["prompt"])
        return httpx.Response(200, json={"count": n, "max_model_len": 131072, "tokens": list(range(n)),
                                         "token_strs": None})

    def client(self) -> ChatClient:
        return ChatClient("http://127.0.0.1:9", model="m", transport=httpx.MockTransport(self))


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


@pytest.mark.parametrize("targets, prefix, tools", [
    pytest.param(300, 0, None, id="no-prefix"),
    pytest.param([257, 1024, 4099], 128, None, id="mixed-lengths-with-prefix"),
    pytest.param(800, 200, TOOLS, id="with-tools"),
])
def test_exact_sizes_from_tokenize(targets: Any, prefix: int, tools: Any) -> None:
    srv = TokenizeServer()
    prompts = run(lambda: build_prompts(srv.client(), count=4, target_tokens=targets, shared_prefix_tokens=prefix,
                                        seed=5, tools=tools))
    wanted = [targets] * 4 if isinstance(targets, int) else [targets[i % len(targets)] for i in range(4)]
    for p, want in zip(prompts, wanted):
        assert p.sized_by == "tokenize" and p.exact and p.target_tokens == want
        # recount independently: the size is the server's count of exactly these messages
        assert toy_count_chat({"messages": list(p.messages), "tools": tools}) == p.prompt_tokens == want
        assert p.max_model_len == 131072
        assert p.body(max_tokens=16, tools=tools).get("tools") == tools
    if prefix:
        systems = {p.messages[0]["content"] for p in prompts}
        assert len(systems) == 1 and p.messages[0]["role"] == "system"
        assert prompts[0].shared_prefix_tokens == prefix
    users = [p.messages[-1]["content"] for p in prompts]
    # unique from the first characters, so a cache can share nothing past the prefix
    assert len({u[:24] for u in users}) == len(users)
    assert srv.calls <= 4 * 25


def test_deterministic_for_a_seed() -> None:
    a = run(lambda: build_prompts(TokenizeServer().client(), count=3, target_tokens=500, shared_prefix_tokens=50,
                                  seed=11))
    b = run(lambda: build_prompts(TokenizeServer().client(), count=3, target_tokens=500, shared_prefix_tokens=50,
                                  seed=11))
    c = run(lambda: build_prompts(TokenizeServer().client(), count=3, target_tokens=500, shared_prefix_tokens=50,
                                  seed=12))
    assert [p.messages for p in a] == [p.messages for p in b]
    assert [p.messages for p in a] != [p.messages for p in c]
    assert filler_text(3, 20) == filler_text(3, 20) != filler_text(4, 20)


@pytest.mark.parametrize("status", [404, 405, 501])
def test_missing_tokenize_falls_back_to_estimate(status: int) -> None:
    srv = TokenizeServer(status=status)
    prompts = run(lambda: build_prompts(srv.client(), count=2, target_tokens=1000, shared_prefix_tokens=100,
                                        fallback_chars_per_token=3.5))
    assert srv.calls == 1
    for p in prompts:
        assert p.sized_by == "estimate" and p.max_model_len is None
        chars = sum(len(m["content"]) for m in p.messages)
        assert math.ceil(chars / 3.5) + 4 * len(p.messages) == p.prompt_tokens == 1000


def test_other_tokenize_errors_propagate() -> None:
    with pytest.raises(APIError) as info:
        run(lambda: build_prompts(TokenizeServer(status=500).client(), count=1, target_tokens=100))
    assert info.value.status == 500


@pytest.mark.parametrize("kwargs", [
    pytest.param(dict(count=1, target_tokens=0), id="zero-target"),
    pytest.param(dict(count=1, target_tokens=[]), id="no-targets"),
    pytest.param(dict(count=-1, target_tokens=10), id="negative-count"),
])
def test_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(BadInputError):
        run(lambda: build_prompts(EstimateCounter(), **kwargs))


# -- the search itself, pure ----------------------------------------------------------------------------


def counter(base: int, per_word: Any, per_pad: int = 1) -> Any:
    calls: list[tuple[int, int]] = []

    async def count(words: int, pads: int) -> int:
        calls.append((words, pads))
        return base + per_word(words) + per_pad * pads

    count.calls = calls  # type: ignore[attr-defined]
    return count


@pytest.mark.parametrize("base, per_word, per_pad, target, exact", [
    pytest.param(10, lambda w: w, 1, 500, True, id="one-token-per-word"),
    pytest.param(10, lambda w: 2 * w, 1, 501, True, id="two-per-word-pad-fills-odd"),
    pytest.param(10, lambda w: 2 * w, 2, 501, False, id="unreachable-odd-stays-below"),
    pytest.param(10, lambda w: w + w // 7, 1, 10_000, True, id="irregular"),
    pytest.param(600, lambda w: w, 1, 500, False, id="template-alone-exceeds"),
])
def test_fit_count(base: int, per_word: Any, per_pad: int, target: int, exact: bool) -> None:
    count = counter(base, per_word, per_pad)
    words, pads, got = run(lambda: fit_count(count, target))
    assert (got == target) is exact
    if base < target:
        assert got <= target and got == base + per_word(words) + per_pad * pads
    assert len(count.calls) <= 40


def test_fit_reaches_a_million_tokens_in_few_calls() -> None:
    # 1M-token contexts: each /tokenize call carries megabytes, so the search must converge fast
    count = counter(20, lambda w: math.ceil(w * 5.6 / 4))
    words, pads, got = run(lambda: fit_count(count, 1_048_576))
    assert got == 1_048_576 and len(count.calls) <= 12


def test_sizes_agree_with_server_usage() -> None:
    async def go(url: str) -> list[Any]:
        async with ChatClient(url) as client:
            prompts = await build_prompts(client, count=2, target_tokens=700, shared_prefix_tokens=100, seed=2)
            recs = [await client.chat_body(p.body(max_tokens=8, k3_chunks=1, k3_ttft_ms=1)) for p in prompts]
            return list(zip(prompts, recs))

    with KnownTimingServer() as srv:
        for p, rec in run(lambda: go(srv.url)):
            assert p.exact and rec.prompt_tokens == p.prompt_tokens == 700
