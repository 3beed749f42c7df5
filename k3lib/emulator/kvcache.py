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
    """`hybrid_retention`: a hybrid model's recurrent (KDA/Mamba) state is kept only at checkpoints, so a hit must end
    on one: the prompt's end (retention interval 0), and, Marconi-style, the point where a prefix is shared, admitted
    on its second sighting ("cache on the second hit": the second request sharing a prefix hits the attention blocks
    but no state, only the third reuses it). Matched tokens thrown away for want of a checkpoint are counted as
    sparse-retention misses. `checkpoint_shared=False` (fault sparse-retention-miss) never keeps the shared point."""

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = True,
                 hybrid_retention: bool = False, checkpoint_shared: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.hybrid_retention = hybrid_retention
        self.checkpoint_shared = checkpoint_shared
        self.checkpoints: set[bytes] = set()  # block hashes at whose end a recurrent state is kept
        self.sparse_retention_misses = 0  # tokens matched in KV but not reusable (no checkpoint), cumulative
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
        if self.hybrid_retention:
            usable = max((i + 1 for i in range(len(hits)) if req.block_hashes[i] in self.checkpoints), default=0)
            return hits[:usable]
        return hits

    def retain(self, req: CacheUser, prompt_len: int) -> int:
        """A hybrid model's retention when `req` is first admitted: the tokens it matched but cannot reuse (counted
        as sparse-retention misses, returned), a checkpoint where it shares a prefix with an earlier prompt (its
        second sighting), and one at its own prompt's last full block."""
        if not (self.hybrid_retention and self.enable_prefix_caching) or prompt_len == 0:
            return 0
        max_blocks = (prompt_len - 1) // self.block_size
        hashes = self.extend_hashes(req, prompt_len // self.block_size)
        matched = 0
        for h in hashes[:max_blocks]:
            if h not in self.cached:
                break
            matched += 1
        usable = max((i + 1 for i in range(matched) if hashes[i] in self.checkpoints), default=0)
        missed = (matched - usable) * self.block_size
        self.sparse_retention_misses += missed
        if matched and self.checkpoint_shared:
            self.checkpoints.add(hashes[matched - 1])
        if prompt_len % self.block_size == 0:
            # the prompt-end state sits on a block boundary only when the prompt fills its last block; otherwise it
            # lies in the partial block, which no later prompt can hit
            self.checkpoints.add(hashes[prompt_len // self.block_size - 1])
        return missed

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
        if new_hits:  # the hits are registered already; a block allocated here is registered by `commit` once full
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

    def forget_idle(self) -> int:
        """Evict every cached block no request holds (fault session-evict): its hash is dropped, the block stays
        free. Returns how many blocks lost their identity."""
        n = 0
        for blk in self.free_queue:
            old = self.hash_of[blk]
            if old is not None:
                if self.cached.get(old) == blk:
                    del self.cached[old]
                self.hash_of[blk] = None
                n += 1
        return n

    def free(self, req: CacheUser) -> None:
        """Release `req`'s blocks; tail blocks go to the queue first so they are evicted first."""
        for blk in reversed(req.blocks):
            self.ref[blk] -= 1
            if self.ref[blk] == 0:
                self.free_queue[blk] = None
        req.blocks = []
        req.num_cached_blocks = 0
