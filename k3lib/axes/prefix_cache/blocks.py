"""Prefix-cache arithmetic: the hits a vLLM server should report for a prompt, from token ids and the block size.

vLLM hashes FULL blocks only, chained from the first (the `cache_salt` mixed into block 0), and a lookup stops
at `len − 1` tokens because the last prompt token must be recomputed for its logits; hits are therefore
block-aligned and `floor((L − 1) / B) · B` at most (notes §5.2–5.3). Counters count tokens, not requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .config import CANDIDATE_UNITS

# cache_config_info labels naming the hit granularity, most specific first. 0.33 exposes the alignment it
# applies directly; `prefix_match_unit` (0.33, Kimi-K3 recipe: 128) coarsens matching; else the KV block.
_UNIT_LABELS = ("cache_hit_alignment_tokens", "prefix_match_unit", "block_size")


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading token ids the two sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def cap_tokens(prompt_len: int, unit: int) -> int:
    """The most a prompt of `prompt_len` tokens can hit: whole units within `prompt_len − 1`."""
    _check_unit(unit)
    return 0 if prompt_len <= 1 else ((prompt_len - 1) // unit) * unit


def aligned_hits(shared_tokens: int, prompt_len: int, unit: int) -> int:
    """Hits for a prompt whose first `shared_tokens` tokens are cached: full units, capped at L − 1."""
    _check_unit(unit)
    return min((max(shared_tokens, 0) // unit) * unit, cap_tokens(prompt_len, unit))


def expected_hits(cold_ids: Sequence[int], warm_ids: Sequence[int], block_size: int, *,
                  cached: int | None = None) -> int:
    """Hits the warm request should report once the cold one ran (same salt, no eviction in between).

    `cached` is how many leading cold tokens are still resident (default: every full block of the cold
    prompt, which the cold request computed and registered whole — the L − 1 cap binds lookups, not commits).
    """
    resident = len(cold_ids) if cached is None else min(max(cached, 0), len(cold_ids))
    return hits_for(common_prefix_len(cold_ids, warm_ids), resident, len(warm_ids), block_size)


def hits_for(common_tokens: int, cold_resident_tokens: int, warm_len: int, unit: int) -> int:
    """`expected_hits` from lengths alone: the shared prefix, limited to the cold's full (resident) blocks."""
    _check_unit(unit)
    shared = min(common_tokens, (max(cold_resident_tokens, 0) // unit) * unit)
    return aligned_hits(shared, warm_len, unit)


def designed_hits(ids: Sequence[int], earlier: Sequence[Sequence[int]], block_size: int) -> int:
    """Hits for `ids` given the prompts sent before it under the same salt: hash chains make the longest
    block-aligned common prefix with any earlier prompt the hit (a block hits only if all before it do)."""
    return max((expected_hits(prev, ids, block_size) for prev in earlier), default=0)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, or None when one sequence is a prefix of the other."""
    n = common_prefix_len(a, b)
    return None if n == min(len(a), len(b)) else n


def units_reproducing(observed: int, common_tokens: int, cold_len: int, warm_len: int,
                      candidates: Sequence[int] = CANDIDATE_UNITS) -> tuple[int, ...]:
    """The hit units under which the warm request would report exactly `observed` hits (a block-size gap)."""
    return tuple(u for u in candidates if hits_for(common_tokens, cold_len, warm_len, u) == observed)


def _as_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(float(str(text).strip()))
    except ValueError:
        return None  # "None", "" or a list: not set on this server
    return value if value > 0 else None


def hit_unit(labels: Mapping[str, str], override: int | None = None) -> tuple[int | None, str]:
    """(unit, where it came from): a parameter override, else the most specific cache_config_info label.

    A coarser `prefix_match_unit` than the block wins (hits align to it); `hash_block_size` only refines the
    hashing of a larger block and does not change where hits stop, so it is recorded but not used here.
    """
    if override is not None:
        return override, "parameter axes.prefix_cache.block_size_tokens"
    values = {name: _as_int(labels.get(name)) for name in _UNIT_LABELS}
    block = values["block_size"]
    for name in _UNIT_LABELS:
        unit = values[name]
        if unit is not None:
            if name != "block_size" and block is not None and unit < block:
                continue  # a finer unit than the KV block cannot split a block
            return unit, f"vllm:cache_config_info {name}"
    return None, "no block size: cache_config_info absent and no parameter"


def _check_unit(unit: int) -> None:
    if not isinstance(unit, int) or unit <= 0:
        raise ValueError(f"block size must be a positive integer, got {unit!r}")
