"""One engine core: vLLM v1's continuous-batching loop over a paged KV cache, run as an asyncio task.

Each step schedules running requests first (decode, or the next prefill chunk), preempting from the back
of `running` when blocks run out (recompute: blocks freed, back to the FRONT of `waiting`); then, if
nothing was preempted, admits waiting requests while `max_num_seqs` and the token budget allow. The step
then "runs" for a modelled time (prefill per computed token + decode step growing with batch size,
× time_scale) and every request whose tokens are all computed emits its next token.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from .kvcache import KVCache


@dataclass(eq=False)
class EngineRequest:
    """A request inside the engine (mutable, engine-owned). `plan_ids` is what the model will say."""

    request_id: str
    prompt_ids: list[int]
    plan_ids: list[int]
    max_tokens: int
    cache_salt: str | None = None
    params_max_tokens: int | None = None
    arrival_s: float = field(default_factory=time.perf_counter)
    # state
    token_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0
    block_hashes: list[bytes] = field(default_factory=list)
    status: str = "waiting"
    num_preemptions: int = 0
    num_cached_tokens: int | None = None
    queued_s: float = 0.0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    events: asyncio.Queue | None = None

    def __post_init__(self) -> None:
        self.token_ids = list(self.prompt_ids)
        self.queued_s = self.arrival_s

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - len(self.prompt_ids)

    @property
    def target_len(self) -> int:
        return min(len(self.plan_ids), self.max_tokens)

    def all_token_ids(self) -> Sequence[int]:
        return self.token_ids


class EngineObserver(Protocol):
    """Where the engine reports what happened (metrics, logs, fault triggers)."""

    def on_admit(self, engine: int, req: EngineRequest, queried: int, hit: int, resumed: bool) -> None: ...
    def on_preempt(self, engine: int, req: EngineRequest) -> None: ...
    def on_sparse_miss(self, engine: int, tokens: int) -> None: ...
    def on_step(self, engine: int, computed_prompt: int, all_prompt: int, generated: int,
                running: int, waiting: int, usage: float) -> None: ...
    def on_first_token(self, engine: int, req: EngineRequest) -> None: ...
    def on_token(self, engine: int, req: EngineRequest, gap_s: float) -> None: ...
    def on_finish(self, engine: int, req: EngineRequest) -> None: ...
    def check_fatal(self, engine: int, req: EngineRequest) -> bool: ...


@dataclass(frozen=True)
class StepModel:
    """Modelled step time: prefill per computed token + decode step growing with the batch, × time_scale."""

    prefill_tokens_per_s: float
    decode_step_base_s: float
    decode_step_per_seq_s: float
    decode_slowdown: float = 1.0
    time_scale: float = 1.0

    def duration_s(self, prefill_tokens: int, decode_seqs: int) -> float:
        decode = (self.decode_step_base_s + self.decode_step_per_seq_s * decode_seqs) * self.decode_slowdown \
            if decode_seqs else 0.5 * self.decode_step_base_s
        return (decode + prefill_tokens / self.prefill_tokens_per_s) * self.time_scale


class Engine:
    def __init__(self, index: int, kv: KVCache, *, max_num_seqs: int, max_num_batched_tokens: int,
                 step_model: StepModel, observer: EngineObserver, lag_samples: deque,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.index = index
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.step_model = step_model
        self.obs = observer
        self.clock = clock
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.alive = True
        self.lag_samples = lag_samples
        self.steps = 0
        self._wake = asyncio.Event()

    # -- requests in and out ----------------------------------------------------------------------
    def add(self, req: EngineRequest) -> None:
        req.events = req.events or asyncio.Queue()
        self.waiting.append(req)
        self._wake.set()

    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    def abort(self, req: EngineRequest) -> None:
        if req.status == "finished":
            return
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._finish(req, "abort")

    def kill(self, message: str) -> None:
        """The engine died: every request in it ends with an error, nothing is scheduled again."""
        self.alive = False
        for req in list(self.running) + list(self.waiting):
            req.error = message
            self._finish(req, "error", free=True)
        self.running.clear()
        self.waiting.clear()
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        """Steps back to back on absolute deadlines: a step begins when the previous one ends (its deadline), so
        the CPU work between two steps (emitting the tokens, scheduling the next batch) is part of the next
        step's modelled time, as the GPU's next forward pass overlaps it, instead of adding up step after step.
        The lag sampled is how late each step's end is seen (the wake-up after its deadline), which is how late
        its tokens reach the clients. A loop that falls a whole step behind starts afresh from now (the lag has
        been recorded) rather than running short steps to catch up."""
        deadline = self.clock()
        while self.alive:
            if not self.running and not self.waiting:
                self._wake.clear()
                self.obs.on_step(self.index, 0, 0, 0, 0, 0, self.kv.usage())
                await self._wake.wait()
                deadline = self.clock()
                continue
            scheduled, prefill_tokens, decode_seqs = self.schedule()
            if not self.alive:
                return
            duration = self.step_model.duration_s(prefill_tokens, decode_seqs) if scheduled else 0.001
            now = self.clock()
            deadline = (deadline if now - deadline < duration else now) + duration
            await asyncio.sleep(deadline - now)
            if not self.alive:
                return
            self.lag_samples.append(max(self.clock() - deadline, 0.0))
            self.apply(scheduled)
            self.steps += 1

    def schedule(self) -> tuple[list[tuple[EngineRequest, int]], int, int]:
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[EngineRequest, int]] = []
        preempted = False
        prefill_tokens = decode_seqs = 0
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(len(req.token_ids) - req.num_computed, budget)
            if n <= 0:
                i += 1
                continue
            while not self.kv.allocate(req, req.num_computed + n):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            else:
                scheduled.append((req, n))
                budget -= n
                if req.num_computed + n >= len(req.prompt_ids) and req.num_output > 0:
                    decode_seqs += 1
                else:
                    prefill_tokens += n
                i += 1
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            resumed = req.num_preemptions > 0
            if not resumed and req.first_scheduled_s is None and self.obs.check_fatal(self.index, req):
                return [], 0, 0   # the observer killed the engines (OOM, crash fault)
            hits = self.kv.find_cached(req)
            hit_tokens = len(hits) * self.kv.block_size
            n = min(len(req.token_ids) - hit_tokens, budget)
            if not self.kv.allocate(req, hit_tokens + n, hits):
                break
            self.waiting.popleft()
            now = self.clock()
            req.status = "running"
            req.num_computed = hit_tokens
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now
                req.num_cached_tokens = hit_tokens
                self.obs.on_sparse_miss(self.index, self.kv.retain(req, len(req.prompt_ids)))
            self.running.append(req)
            self.obs.on_admit(self.index, req, len(req.token_ids), hit_tokens, resumed)
            scheduled.append((req, n))
            budget -= n
            prefill_tokens += n
        return scheduled, prefill_tokens, decode_seqs

    def apply(self, scheduled: list[tuple[EngineRequest, int]]) -> None:
        now = self.clock()
        computed_prompt = all_prompt = generated = 0
        for req, n in scheduled:
            if req.status != "running":
                continue   # aborted while the step ran
            before = req.num_computed
            req.num_computed += n
            if before < len(req.prompt_ids):
                computed_prompt += min(req.num_computed, len(req.prompt_ids)) - before
            self.kv.commit(req, req.num_computed)
            if req.num_computed < len(req.token_ids):
                continue   # a prefill chunk, no token yet
            if req.num_output == 0:
                all_prompt += len(req.prompt_ids)
            req.token_ids.append(req.plan_ids[req.num_output])
            generated += 1
            if req.first_token_s is None:
                req.first_token_s = now
                self.obs.on_first_token(self.index, req)
            else:
                self.obs.on_token(self.index, req, now - (req.last_token_s or now))
            req.last_token_s = now
            assert req.events is not None  # `add` gave every request its queue
            req.events.put_nowait(("token", req.num_output))
            if req.num_output >= req.target_len:
                self.running.remove(req)
                # vLLM checks the length cap before the stop token: a reply that reaches max_tokens ends by
                # "length", even one whose model would have stopped right there (ignore_eos pads to max_tokens)
                self._finish(req, "length" if req.num_output >= req.max_tokens else "stop")
        self.obs.on_step(self.index, computed_prompt, all_prompt, generated, len(self.running), len(self.waiting),
                         self.kv.usage())

    # -- helpers ----------------------------------------------------------------------------------
    def _preempt(self, req: EngineRequest) -> None:
        self.kv.free(req)
        req.num_computed = 0
        req.status = "preempted"
        req.num_preemptions += 1
        self.waiting.appendleft(req)
        self.obs.on_preempt(self.index, req)

    def _finish(self, req: EngineRequest, reason: str, *, free: bool = True) -> None:
        if free:
            self.kv.commit(req, req.num_computed)
            self.kv.free(req)
        req.status = "finished"
        req.finish_reason = reason
        req.finished_s = self.clock()
        self.obs.on_finish(self.index, req)
        if req.events is not None:
            req.events.put_nowait(("finish", reason))
