"""One emulated vLLM server instance: engines, KV pools, metrics, GPU board and log, built from a config.

The HTTP app holds a reference to the current Runtime; `/_emulator/restart` swaps in a new one (fresh
counters and an empty cache, as a real restart gives). Everything here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections import deque
from pathlib import Path
from typing import Any

from ..core.stats import percentile
from ..core.turns import Turns
from .config import EmulatorConfig
from .envreport import collect_env_report, image_digest
from .gpu import GpuBoard, plan_memory, starved_utilization
from .kvcache import KVCache
from .logs import LogBook
from .metrics import ServerMetrics
from .scheduler import Engine, EngineRequest, StepModel
from .tokenizer import Tokenizer


def capacity_error(cfg, plan) -> str | None:
    """vLLM's startup refusal when the KV pool cannot hold one max-length request (notes §6.3)."""
    if plan.kv_mib <= 0 or plan.num_blocks == 0:
        tail = (" (this flag also controls CPU memory reservation on the CPU backend, despite its name). See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.") \
            if cfg.at_least("0.33") else "."
        return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine" + tail)
    if plan.kv_tokens < cfg.max_model_len:
        need = cfg.max_model_len * cfg.kv_bytes_per_token / 2**30
        return (f"To serve at least one request with the model's max seq len ({cfg.max_model_len}), "
                f"({need:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({plan.kv_gib:.2f} GiB). Based on the available memory, the estimated maximum model length is "
                f"{plan.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine.")
    return None


class FrontEnd(Turns):
    """Lets requests into the front end (JSON, chat template, tokenizer, reply plan), and their outputs out, one
    per loop iteration (`k3lib.core.turns.Turns`).

    vLLM's API server and engine core are separate processes; here they share one event loop, and 256 requests
    arriving together used to parse and plan in one loop iteration (hundreds of ms), all of it engine-step lag.
    A request waits its turn, then runs its front-end work until its next await; the next turn is granted in
    the following iteration, so a due engine step waits for one request's front-end work at most. The output side
    takes turns too: each stream's events from a step (and a finished request's closing work) wait for one, so
    a step that wakes hundreds of streams does not hold the loop past the next step's deadline.
    """


class Runtime:
    def __init__(self, requested: EmulatorConfig) -> None:
        self.requested = requested
        self.front_end = FrontEnd()
        cfg = self.cfg = requested.resolved()
        self.faults = cfg.fault_set()
        self.plan = plan_memory(cfg)
        self.tokenizer = Tokenizer()
        self.capacity_error = capacity_error(cfg, self.plan)
        self.startup_oom = "oom-startup" in self.faults
        self.ready = not (self.startup_oom or self.capacity_error)
        # slow-load: a healthy engine that is still loading its weights (not ready, not failed)
        self.load_delay_s = (float(self.faults.value("slow-load") or 0.0) * cfg.time_scale
                             if "slow-load" in self.faults and self.ready else 0.0)
        self.ready = self.ready and not self.load_delay_s
        self.dead = False
        self.death_cause: str | None = None
        log_dir = Path(cfg.log_dir) if cfg.log_dir else None
        self.log = LogBook(cfg, log_dir / "vllm-server.log" if log_dir else None)
        self.collect_env = collect_env_report(cfg)
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if log_dir:
            (log_dir / "collect_env.txt").write_text(self.collect_env, encoding="utf-8")
        dp = cfg.local_ranks
        slow = self.faults.value("slow") if "slow" in self.faults else 1.0
        self.step_model = StepModel(cfg.prefill_tokens_per_s, cfg.decode_step_base_ms / 1000,
                                    cfg.decode_step_per_seq_ms / 1000, slow or 1.0, cfg.time_scale)
        # a fault on one rank (NAME@RANK) gives that engine its own pool, step model or cache switch
        self.rank_plans = [self._rank_plan(i) for i in range(dp)]
        self.metrics = ServerMetrics(cfg, num_gpu_blocks=self.plan.num_blocks, kv_cache_size_tokens=self.plan.kv_tokens,
                                     max_concurrency=self.plan.kv_tokens / cfg.max_model_len,
                                     per_engine=[(p.num_blocks, p.num_blocks * cfg.block_size, prefix)
                                                 for p, _, prefix in self.rank_plans])
        self.gpu = GpuBoard(cfg, self.plan)
        self.gpu.process_alive = self.ready
        self.lag_s: deque[float] = deque(maxlen=50_000)
        self.engines = [Engine(i, KVCache(plan.num_blocks, cfg.block_size, enable_prefix_caching=prefix,
                                          hybrid_retention=cfg.hybrid_retention,
                                          checkpoint_shared="sparse-retention-miss" not in self.faults),
                               max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
                               step_model=model, observer=self, lag_samples=self.lag_s)
                        for i, (plan, model, prefix) in enumerate(self.rank_plans)]
        self.admitted = 0
        self.replies = 0
        self.id_salt = secrets.token_hex(8)  # reply ids unique per process (protocol.request_id)
        self.api_requests = 0
        self.finished = 0
        self._interval = [dict(prompt=0, gen=0, preempt=0) for _ in range(dp)]
        self._recent_hits: list[deque] = [deque(maxlen=1000) for _ in range(dp)]
        self._tasks: list[asyncio.Task] = []
        self.started_wall = time.time()

    def _rank_plan(self, local: int) -> tuple[Any, StepModel, bool]:
        """(memory plan, step model, prefix caching) of local engine `local`, its rank's own faults applied."""
        cfg = self.cfg
        own = self.faults.on_rank(cfg.rank(local))
        plan = self.plan
        if "kv-starved" in own and "kv-starved" not in self.faults:
            plan = plan_memory(cfg.replace(gpu_memory_utilization=starved_utilization(cfg)))
        model = self.step_model
        if "slow" in own:
            model = dataclasses.replace(model, decode_slowdown=own["slow"] or 1.0)
        return plan, model, cfg.enable_prefix_caching and "no-prefix-caching" not in own

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self, url: str) -> None:
        if self.load_delay_s:
            self._tasks = [asyncio.get_running_loop().create_task(self._load(url), name="k3-emulator-load")]
            return
        self.log.startup(self.plan, url=url, startup_oom=self.startup_oom, capacity_error=self.capacity_error)
        if not self.ready:
            return
        self._run_engines()

    async def _load(self, url: str) -> None:
        """slow-load: the weights take their time, then the engine starts as usual."""
        await asyncio.sleep(self.load_delay_s)
        self.ready = True
        self.gpu.process_alive = True
        self.log.startup(self.plan, url=url, startup_oom=False, capacity_error=None)
        self._run_engines()

    def _run_engines(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks += [loop.create_task(e.run(), name=f"k3-emulator-engine-{e.index}") for e in self.engines]
        self._tasks.append(loop.create_task(self._stats_loop(), name="k3-emulator-stats"))

    async def stop(self) -> None:
        for engine in self.engines:
            for req in list(engine.running) + list(engine.waiting):
                engine.abort(req)
            engine.alive = False
            engine._wake.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def submit(self, req: EngineRequest) -> Engine:
        """Hand a request to the least-loaded DP engine (ties: the lowest index)."""
        engine = min(self.engines, key=lambda e: (e.load(), e.index))
        engine.add(req)
        return engine

    def kill(self, engine: int, cause: str) -> None:
        if self.dead:
            return
        self.dead = True
        self.death_cause = cause
        self.log.engine_death(engine, cause, self.plan)
        self.gpu.process_alive = False
        for e in self.engines:
            e.kill("EngineCore encountered an issue. See stack trace (above) for the root cause.")

    # -- EngineObserver ---------------------------------------------------------------------------
    def check_fatal(self, engine: int, req: EngineRequest) -> bool:
        if "oom-long-context" in self.faults:
            threshold = int(self.faults.value("oom-long-context") or 0) or self.cfg.max_model_len // 2
            if len(req.prompt_ids) > threshold:
                self.kill(engine, "oom")
                return True
        self.admitted += 1
        if "crash" in self.faults and self.admitted > int(self.faults.value("crash") or 20):
            self.kill(engine, "crash")
            return True
        return False

    def on_admit(self, engine: int, req: EngineRequest, queried: int, hit: int, resumed: bool) -> None:
        self.metrics.on_admit(engine, queried, hit, resumed)
        if not resumed:
            self._recent_hits[engine].append((queried, hit))

    def on_sparse_miss(self, engine: int, tokens: int) -> None:
        self.metrics.on_sparse_miss(engine, tokens)

    def on_preempt(self, engine: int, req: EngineRequest) -> None:
        self.metrics.on_preempt(engine)
        self._interval[engine]["preempt"] += 1

    def on_step(self, engine: int, computed_prompt: int, all_prompt: int, generated: int, running: int,
                waiting: int, usage: float) -> None:
        self.metrics.on_step(engine, computed_prompt, all_prompt, generated)
        self.metrics.set_gauges(engine, running, waiting, usage)
        self.gpu.busy[engine] = 1.0 if running else 0.0
        iv = self._interval[engine]
        iv["prompt"] += computed_prompt
        iv["gen"] += generated

    def on_first_token(self, engine: int, req: EngineRequest) -> None:
        self.metrics.on_first_token(engine, req)

    def on_token(self, engine: int, req: EngineRequest, gap_s: float) -> None:
        self.metrics.on_token(engine, gap_s)

    def on_finish(self, engine: int, req: EngineRequest) -> None:
        self.metrics.on_finish(engine, req)
        self.finished += 1
        if "memory-leak" in self.faults and req.finish_reason in ("stop", "length"):
            self.gpu.leak_mib += float(self.faults.value("memory-leak") or 48.0)
        e = self.engines[engine]
        if "session-evict" in self.faults:
            e.kv.forget_idle()  # the history a session's next turn would reuse is gone
        self.metrics.set_gauges(engine, len(e.running), len(e.waiting), e.kv.usage())

    # -- periodic stats line ----------------------------------------------------------------------
    async def _stats_loop(self) -> None:
        interval = max(self.cfg.log_stats_interval_s * self.cfg.time_scale, 0.2)
        while not self.dead:
            await asyncio.sleep(interval)
            for e in self.engines:
                iv = self._interval[e.index]
                if not (iv["prompt"] or iv["gen"] or e.running or e.waiting):
                    continue   # vLLM demotes the idle line to DEBUG
                recent = self._recent_hits[e.index]
                q = sum(x for x, _ in recent)
                self.log.stats(e.index, prompt_tps=iv["prompt"] / interval, gen_tps=iv["gen"] / interval,
                               running=len(e.running), waiting=len(e.waiting), usage=e.kv.usage(),
                               hit_rate=(sum(h for _, h in recent) / q) if q else 0.0, preemptions=iv["preempt"])
                self._interval[e.index] = dict(prompt=0, gen=0, preempt=0)

    # -- introspection ----------------------------------------------------------------------------
    def state(self) -> dict:
        def lag_ms(q: float) -> float:
            got = percentile(self.lag_s, q)
            return 0.0 if got is None else round(got * 1000, 3)

        return {
            "profile": self.cfg.profile,
            "vllm_version": self.cfg.vllm_version,
            "model": self.cfg.model,
            "served_model_name": self.cfg.served_model_name,
            "image": self.cfg.image,
            "image_digest": image_digest(self.cfg),
            "faults": list(self.faults.canonical()),
            "ready": self.ready,
            "engine_alive": self.ready and not self.dead,
            "death_cause": self.death_cause,
            "running": sum(len(e.running) for e in self.engines),
            "waiting": sum(len(e.waiting) for e in self.engines),
            "free_blocks": sum(e.kv.num_free for e in self.engines),
            "total_blocks": sum(e.kv.num_blocks for e in self.engines),
            "block_size": self.cfg.block_size,
            "kv_cache_size_tokens": self.plan.kv_tokens,
            "gpu_memory_utilization": self.cfg.gpu_memory_utilization,
            "gpu_memory_used_mib": self.gpu.used_mib(),
            "engines": [{"engine": self.cfg.rank(e.index), "running": len(e.running), "waiting": len(e.waiting),
                         "free_blocks": e.kv.num_free, "total_blocks": e.kv.num_blocks,
                         "kv_cache_usage_perc": e.kv.usage(), "steps": e.steps} for e in self.engines],
            "requests_admitted": self.admitted,
            "requests_finished": self.finished,
            "step_lag_ms_p50": lag_ms(50),
            "step_lag_ms_p99": lag_ms(99),
            "step_lag_ms_max": round(max(self.lag_s) * 1000, 3) if self.lag_s else 0.0,
            "step_lag_samples": len(self.lag_s),
        }
