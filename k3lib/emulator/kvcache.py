"""Paged KV cache with vLLM v1's prefix caching: hash-chained full blocks, LRU reuse, `prompt_len − 1` cap.

A block's hash covers its parent's hash, its token ids and (first block only) the request's cache_salt.
Freed blocks keep their hash and stay reusable until the LRU free queue hands them out again; they count
as free for `usage()`, which is why an idle server reads ~0 even with a warm cache.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Protocol, Sequence

NONE_HASH = hashlib.blake2b(b"vllm-none-hash", digest_size=16).digest()


class CacheUser(Protocol):
    """What the cache needs from a request: its ids so far, a salt, and the blocks it holds."""

    cache_salt: str | None
    blocks: list[int]
    num_cached_blocks: int      # how many of `blocks` are already registered under their hash
    block_hashes: list[bytes]   # hashes of the full blocks of `all_token_ids()` computed so far

    def all_token_ids(self) -> Sequence[int]: ...


def block_hash(parent: bytes, token_ids: Sequence[int], salt: str | None) -> bytes:
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(b",".join(str(t).encode() for t in token_ids))
    if salt is not None:
        h.update(b"|salt|" + salt.encode())
    return h.digest()


class KVCache:
    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref = [0] * num_blocks
        self.hash_of: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}
        # LRU order: first = evicted first. Holds every block with ref 0 (never-used and cached ones).
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))

    # -- accounting ---------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def usage(self) -> float:
        return 0.0 if self.num_blocks == 0 else 1.0 - self.num_free / self.num_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- prefix lookup ------------------------------------------------------------------------------
    def extend_hashes(self, req: CacheUser, num_blocks: int) -> list[bytes]:
        """`req.block_hashes` grown (incrementally, the chain is never recomputed) to `num_blocks`."""
        hashes, b = req.block_hashes, self.block_size
        if len(hashes) < num_blocks:
            ids = req.all_token_ids()
            parent = hashes[-1] if hashes else NONE_HASH
            for i in range(len(hashes), num_blocks):
                parent = block_hash(parent, ids[i * b:(i + 1) * b], req.cache_salt if i == 0 else None)
                hashes.append(parent)
        return hashes

    def find_cached(self, req: CacheUser) -> list[int]:
        """Blocks already holding this prefix; at most `len − 1` tokens (the last one needs its logits)."""
        n = len(req.all_token_ids())
        if not self.enable_prefix_caching or n == 0:
            return []
        max_blocks = (n - 1) // self.block_size
        hits = []
        for h in self.extend_hashes(req, max_blocks)[:max_blocks]:
            blk = self.cached.get(h)
            if blk is None:
                break
            hits.append(blk)
        return hits

    # -- allocation ---------------------------------------------------------------------------------
    def can_allocate(self, req: CacheUser, total_tokens: int, new_hits: Sequence[int] = ()) -> bool:
        need = self.blocks_needed(total_tokens) - len(req.blocks) - len(new_hits)
        evictable_hits = sum(1 for b in new_hits if self.ref[b] == 0)
        return need + evictable_hits <= self.num_free

    def allocate(self, req: CacheUser, total_tokens: int, new_hits: Sequence[int] = ()) -> bool:
        """Give `req` enough blocks for `total_tokens`, reusing `new_hits` first. False: not enough free."""
        if not self.can_allocate(req, total_tokens, new_hits):
            return False
        for blk in new_hits:
            if self.ref[blk] == 0:
                del self.free_queue[blk]
            self.ref[blk] += 1
            req.blocks.append(blk)
        req.num_cached_blocks = max(req.num_cached_blocks, len(req.blocks))
        while len(req.blocks) < self.blocks_needed(total_tokens):
            blk, _ = self.free_queue.popitem(last=False)
            old = self.hash_of[blk]
            if old is not None:   # evict: the LRU block loses its cached identity
                if self.cached.get(old) == blk:
                    del self.cached[old]
                self.hash_of[blk] = None
            self.ref[blk] = 1
            req.blocks.append(blk)
        return True

    def commit(self, req: CacheUser, num_computed_tokens: int) -> None:
        """Register the hashes of blocks that became full, so later requests can hit them."""
        if not self.enable_prefix_caching:
            return
        full = min(num_computed_tokens // self.block_size, len(req.blocks))
        if full <= req.num_cached_blocks:
            return
        hashes = self.extend_hashes(req, full)
        for i in range(req.num_cached_blocks, full):
            blk, h = req.blocks[i], hashes[i]
            if h not in self.cached:
                self.cached[h] = blk
                self.hash_of[blk] = h
        req.num_cached_blocks = full

    def free(self, req: CacheUser) -> None:
        """Release `req`'s blocks; tail blocks go to the queue first so they are evicted first."""
        for blk in reversed(req.blocks):
            self.ref[blk] -= 1
            if self.ref[blk] == 0:
                self.free_queue[blk] = None
        req.blocks = []
        req.num_cached_blocks = 0
