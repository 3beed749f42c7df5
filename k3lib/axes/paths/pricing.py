"""What an API path's tokens cost: input billed apart from cache-hit input (Kimi's API bills a cache hit about
10x below a miss), output at its own price; and where each API's `usage` puts its cached-token count."""

from __future__ import annotations

from typing import Any


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def cached_tokens_of(usage: Any) -> int | None:
    """The cache-hit input tokens of one `usage` object: OpenAI's `prompt_tokens_details.cached_tokens` (and the
    Responses API's `input_tokens_details`), Moonshot's top-level `cached_tokens`, DeepSeek's
    `prompt_cache_hit_tokens`; None when the reply does not say."""
    if not isinstance(usage, dict):
        return None
    for key in ("prompt_tokens_details", "input_tokens_details"):
        details = usage.get(key)
        if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
            return details["cached_tokens"]
    for key in ("cached_tokens", "prompt_cache_hit_tokens"):
        if _int(usage.get(key)) is not None:
            return usage[key]
    return None


def input_tokens_of(usage: Any) -> int | None:
    return _int(usage.get("prompt_tokens", usage.get("input_tokens"))) if isinstance(usage, dict) else None


def output_tokens_of(usage: Any) -> int | None:
    return _int(usage.get("completion_tokens", usage.get("output_tokens"))) if isinstance(usage, dict) else None


def token_cost(prompt: int, cached: int | None, completion: int, price_input: float | None,
               price_output: float | None, price_cached_input: float | None = None) -> float | None:
    """The cost of `prompt` input tokens (of which `cached` hit the cache) and `completion` output tokens, prices
    per million; None when the input or output price is unknown. Without a cached-input price, or without a
    cached count, every input token is priced as input (what the bill is when nothing is known to have hit)."""
    if price_input is None or price_output is None:
        return None
    hit = min(cached or 0, prompt) if price_cached_input is not None else 0
    return ((prompt - hit) * price_input + hit * (price_cached_input or 0.0) + completion * price_output) / 1e6
