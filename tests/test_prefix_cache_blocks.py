"""Prefix-cache block arithmetic: full blocks only, hits capped at L − 1, chains per salt, the hit unit's source."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3lib.axes.prefix_cache import (
    aligned_hits,
    cap_tokens,
    common_prefix_len,
    contamination,
    designed_hits,
    expected_hits,
    first_divergence,
    hit_unit,
    units_reproducing,
)


def ids(n: int, start: int = 1000) -> list[int]:
    return list(range(start, start + n))


def changed_at(seq: list[int], k: int) -> list[int]:
    out = list(seq)
    out[k] = -out[k]
    return out


@pytest.mark.parametrize("block, length, hits", [
    pytest.param(16, 1, 0, id="B16-one-token"),
    pytest.param(16, 15, 0, id="B16-just-under-one-block"),
    pytest.param(16, 16, 0, id="B16-exactly-one-block-last-token-recomputed"),
    pytest.param(16, 17, 16, id="B16-just-over-one-block"),
    pytest.param(16, 31, 16, id="B16-just-under-two-blocks"),
    pytest.param(16, 32, 16, id="B16-32-tokens-hit-16"),
    pytest.param(16, 33, 32, id="B16-33-tokens-hit-32"),
    pytest.param(16, 1000, 992, id="B16-1000-tokens-ratio-0.992"),
    pytest.param(128, 127, 0, id="B128-just-under"),
    pytest.param(128, 128, 0, id="B128-at-boundary"),
    pytest.param(128, 129, 128, id="B128-just-over"),
    pytest.param(128, 256, 128, id="B128-two-blocks-exactly"),
    pytest.param(128, 257, 256, id="B128-two-blocks-plus-one"),
])
def test_an_identical_prompt_repeated_hits_full_blocks_below_its_last_token(block, length, hits):
    seq = ids(length)
    assert expected_hits(seq, list(seq), block) == hits
    assert cap_tokens(length, block) == hits


@pytest.mark.parametrize("block, length, diverge, hits", [
    pytest.param(16, 40, 32, 32, id="B16-change-right-after-block-2"),
    pytest.param(16, 40, 31, 16, id="B16-change-in-last-token-of-block-2"),
    pytest.param(16, 40, 16, 16, id="B16-change-first-token-of-block-2"),
    pytest.param(16, 40, 15, 0, id="B16-change-inside-block-1"),
    pytest.param(16, 40, 0, 0, id="B16-change-first-token"),
    pytest.param(128, 600, 584, 512, id="B128-last-turn-changed"),
    pytest.param(128, 600, 256, 256, id="B128-change-at-boundary"),
    pytest.param(128, 600, 255, 128, id="B128-change-just-before-boundary"),
])
def test_hits_stop_at_the_last_full_block_before_the_first_change(block, length, diverge, hits):
    cold = ids(length)
    warm = changed_at(cold, diverge)
    assert expected_hits(cold, warm, block) == hits
    assert first_divergence(cold, warm) == diverge
    assert common_prefix_len(cold, warm) == diverge


@pytest.mark.parametrize("cold_len, warm_len, cached, hits", [
    pytest.param(20, 50, None, 16, id="only-the-colds-full-blocks-are-cached"),
    pytest.param(32, 50, None, 32, id="cold-exactly-two-blocks-all-reusable-by-a-longer-warm"),
    pytest.param(48, 50, 16, 16, id="tail-evicted-first-block-resident"),
    pytest.param(48, 50, 0, 0, id="everything-evicted"),
    pytest.param(48, 33, None, 32, id="warm-shorter-than-cold-capped-at-L-minus-1"),
])
def test_resident_full_blocks_of_the_cold_prompt_bound_the_warm_hits(cold_len, warm_len, cached, hits):
    base = ids(max(cold_len, warm_len))
    assert expected_hits(base[:cold_len], base[:warm_len], 16, cached=cached) == hits


def test_designed_hits_take_the_longest_chain_among_earlier_prompts():
    warm = ids(100)
    earlier = [changed_at(ids(100), 20), changed_at(ids(100), 70), ids(10)]
    assert designed_hits(warm, earlier, 16) == 64
    assert designed_hits(warm, [], 16) == 0


@pytest.mark.parametrize("labels, override, unit, source", [
    pytest.param({"block_size": "16"}, None, 16, "block_size", id="v0.10-block-only"),
    pytest.param({"block_size": "16", "hash_block_size": "16", "prefix_match_unit": "None",
                  "cache_hit_alignment_tokens": "16"}, None, 16, "cache_hit_alignment_tokens", id="v0.33-defaults"),
    pytest.param({"block_size": "64", "prefix_match_unit": "128"}, None, 128, "prefix_match_unit",
                 id="kimi-recipe-flashmla-64-match-unit-128"),
    pytest.param({"block_size": "528", "hash_block_size": "16"}, None, 528, "block_size",
                 id="hybrid-finer-hash-does-not-split-a-block"),
    pytest.param({"block_size": "64", "prefix_match_unit": "16"}, None, 64, "block_size",
                 id="finer-match-unit-than-block-ignored"),
    pytest.param({"block_size": "64"}, 128, 128, "parameter", id="parameter-wins"),
    pytest.param({}, None, None, "no block size", id="no-cache-config-info"),
    pytest.param({"block_size": "None"}, None, None, "no block size", id="early-v1-None-label"),
])
def test_hit_unit_comes_from_the_most_specific_label(labels, override, unit, source):
    got, where = hit_unit(labels, override)
    assert got == unit
    assert source in where


def test_units_reproducing_names_the_block_size_that_explains_an_observed_value():
    # 600-token prompts identical up to token 584: 16-token blocks give 576, 128-token units give 512
    assert 128 in units_reproducing(512, 584, 600, 600)
    assert 16 not in units_reproducing(512, 584, 600, 600)
    assert units_reproducing(576, 584, 600, 600)[0] == 16


@pytest.mark.parametrize("prompt, queries, finished, dirty", [
    pytest.param(600, 600.0, 1.0, False, id="exactly-this-request"),
    pytest.param(600, 1200.0, 1.0, True, id="queries-beyond-the-prompt"),
    pytest.param(600, 600.0, 2.0, True, id="two-requests-finished"),
    pytest.param(600, None, None, False, id="counters-absent"),
])
def test_contamination_flags_windows_that_hold_someone_elses_traffic(prompt, queries, finished, dirty):
    assert (contamination(prompt, queries, finished) is not None) is dirty


def test_bad_block_size_is_rejected():
    with pytest.raises(ValueError, match="positive"):
        aligned_hits(10, 20, 0)


# -- against an independent implementation: the emulator's hash-chained paged cache --------------------------


@dataclass(eq=False)
class _User:
    ids: list[int]
    cache_salt: str | None = None
    blocks: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0
    block_hashes: list[bytes] = field(default_factory=list)

    def all_token_ids(self):
        return self.ids


def _served_hits(cold: list[int], warm: list[int], block: int, salts=(None, None)) -> int:
    from k3lib.emulator.kvcache import KVCache

    kv = KVCache(num_blocks=256, block_size=block)
    first = _User(cold, salts[0])
    assert kv.allocate(first, len(cold), kv.find_cached(first))
    kv.commit(first, len(cold))
    kv.free(first)
    second = _User(warm, salts[1])
    return len(kv.find_cached(second)) * block


@settings(max_examples=60, deadline=None)
@given(block=st.sampled_from([4, 16, 128]), n=st.integers(1, 400), extra=st.integers(0, 200),
       diverge=st.integers(0, 600))
def test_expected_hits_agree_with_a_hash_chained_cache(block, n, extra, diverge):
    cold = ids(n)
    warm = ids(n + extra)
    if diverge < len(warm):
        warm = changed_at(warm, diverge)
    hits = expected_hits(cold, warm, block)
    assert hits == _served_hits(cold, warm, block)
    assert hits % block == 0 and hits <= max(len(warm) - 1, 0)


def test_a_different_salt_isolates_an_identical_prompt():
    seq = ids(64)
    assert _served_hits(seq, seq, 16, ("a", "a")) == 48
    assert _served_hits(seq, seq, 16, ("a", "b")) == 0


@settings(max_examples=60, deadline=None)
@given(block=st.sampled_from([4, 16]), n=st.integers(2, 300), chunk=st.integers(1, 64), decoded=st.integers(0, 40))
def test_a_prefill_in_chunks_and_its_decode_leave_every_full_block_to_hit(block, n, chunk, decoded):
    """As the emulator's scheduler runs a request: allocated a chunk at a time (a prefill sharing a step's token
    budget with others, then one decode step per token), committed after each. Every block that became full is
    registered, as vLLM caches a block once it fills: a later prompt repeating the whole sequence hits all of its full
    blocks below its last token, wherever the chunks fell (a chunk that left a block partial once stopped the hits
    there)."""
    from k3lib.emulator.kvcache import KVCache

    kv = KVCache(num_blocks=512, block_size=block)
    seq = ids(n + decoded)
    first = _User(seq[:n])
    done = 0
    assert kv.allocate(first, min(chunk, n), kv.find_cached(first))
    while True:
        done = min(done + chunk, n) if done < n else done + 1
        if done > n:
            first.ids = seq[:done]  # a decode step appends the token it made
        kv.commit(first, done)
        if done >= n + decoded:
            break
        step = min(chunk, n - done) if done < n else 1
        assert kv.allocate(first, done + step)
    kv.free(first)
    again = _User(seq + [7])
    assert len(kv.find_cached(again)) * block == (n + decoded) // block * block
