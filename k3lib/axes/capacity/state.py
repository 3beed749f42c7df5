"""The recorder of one capacity run, handed to each phase explicitly: where the load goes (the target's clients, the
worker processes, the request bodies), where its records go (the run folder, appended as they finish) and the watch
on the engine (health polls, the first failure kept for the OOM event, whether it died). The phases are functions over
the plan and this recorder (run.py composes them); what each found comes back as its own typed result."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ...core.evidence import Row
from ...core.errors import APIError, TargetError
from ...core.params import CapacityParams
from ...io.client import WITHOUT_RAW, ChatClient, ChatRecord
from ...io.prompts import BuiltPrompt, EstimateCounter, build_prompts
from ...io.sampling import Timeline
from ...io.shapes import ChatBody
from ...io.workers import WorkerPool, resolve_workers
from .config import HEALTH_TIMEOUT_S
from .result import REQUESTS
from .shape import CapacityPlan
from .run_shapes import FailureRow, HealthRow, Watch
from .shapes import GpuRow, MetricRow, RequestRow
from .window import failure_kind

if TYPE_CHECKING:
    from ...core.session import AxisContext


class EngineGone(Exception):
    """Raised by a phase's sink to stop a load window once more server failures than its concurrency came in a
    row: the engine is gone, and hammering a dead server for the rest of the window only adds noise. The load
    generator re-raises it once the window has stopped; the records delivered so far are kept."""


class Recorder:
    """The run's I/O and its watch on the engine (see the module)."""

    def __init__(self, ctx: "AxisContext", plan: CapacityPlan | None = None) -> None:
        self.ctx = ctx
        self.params = ctx.params
        self.cap: CapacityParams = ctx.params.axes.capacity
        self.plan = plan or CapacityPlan(capacity=self.cap, contract=ctx.params.contract)
        self.store = ctx.store
        self.urls = tuple(ctx.target.metrics_urls)
        self.timeline: Timeline | None = None
        # the watch: every health poll, the first failure, whether the engine is gone, what the phases noted
        self.health: list[HealthRow] = []
        self.failure: FailureRow | None = None
        self.dead = False
        self.notes: list[str] = []
        # load.workers: the concurrency steps' and the soak's streams (and their calibration) spread over this many
        # processes; the long-context phase (one stream) stays in this one
        self.workers = min(resolve_workers(self.params.load.workers),
                           max((*self.plan.steps, self.plan.planned_concurrency)))
        self.pool: WorkerPool | None = None

    # -- clients ---------------------------------------------------------------------------------------------
    def client(self, timeout_s: float) -> ChatClient:
        return ChatClient(self.ctx.target.base_url, model=self.params.target.model,
                          api_key_env=self.params.target.api_key_env, timeout_s=timeout_s,
                          connect_timeout_s=min(10.0, timeout_s))

    async def worker_pool(self) -> WorkerPool | None:
        """The worker processes, started once for the run (their clients keep their connections step to step)."""
        if self.workers > 1 and self.pool is None:
            self.pool = await WorkerPool(self.workers).astart()
        return self.pool

    async def prompts(self, sizing: ChatClient, *, count: int, tokens: int | Sequence[int], seed: int,
                      shared_prefix_tokens: int = 0) -> list[BuiltPrompt]:
        try:
            return await build_prompts(sizing, count=count, target_tokens=tokens, seed=seed,
                                       shared_prefix_tokens=shared_prefix_tokens)
        except (APIError, TargetError) as exc:
            # a /tokenize that refuses an over-long prompt or does not answer: estimate, and say so
            self.notes.append(f"prompt sizing fell back to a chars/token estimate: {exc}"[:300])
            return await build_prompts(EstimateCounter(), count=count, target_tokens=tokens, seed=seed,
                                       shared_prefix_tokens=shared_prefix_tokens)

    def body(self, prompt: BuiltPrompt, max_tokens: int, *, stream: bool = True,
             salt: str | None = None) -> ChatBody:
        # ignore_eos: the output length is part of the test condition, not left to the model's mood
        extra: Row = {"ignore_eos": True, "temperature": 0}
        if salt:
            extra["cache_salt"] = salt  # a cold prefix cache for every request: nothing shared, full KV cost
        return prompt.body(max_tokens=max_tokens, model=self.params.target.model, stream=stream, **extra)

    def gpu_driver(self) -> str | None:
        """The driver the GPU source's own labels carry (dcgm-exporter's DCGM_FI_DRIVER_VERSION, NVML's)."""
        source = self.timeline.gpu_source if self.timeline is not None else None
        if source is None or self.params.target.gpu_metrics.source == "nvml":
            return None  # NVML's driver is the kit's host's: the environment axis reads it (claims "nvml")
        return getattr(source.describe(), "driver_version", None)

    def metric_rows(self) -> list[MetricRow]:
        assert self.timeline is not None  # the runner starts the samplers before any phase
        return cast(list[MetricRow], self.timeline.metric_rows())  # the sampler's rows (MetricRow names them)

    def gpu_rows(self) -> list[GpuRow]:
        assert self.timeline is not None
        return cast(list[GpuRow], self.timeline.gpu_rows())

    # -- recording -------------------------------------------------------------------------------------------
    def sink(self, phase: str, step: str, bucket: list[RequestRow], concurrency: int,
             stop_on_death: bool = True) -> Callable[[ChatRecord], None]:
        """Where a load window's records go: the run folder (as each finishes), the window's `bucket`, and the
        watch, which stops the window (`EngineGone`) once the engine looks gone."""
        streak = {"n": 0}

        def sink(rec: ChatRecord) -> None:
            d = cast(RequestRow, rec.model_dump(context=WITHOUT_RAW))  # the record's fields (RequestRow names those read)
            d["raw_json"] = None
            d.update({"phase": phase, "step": step, "done_wall_ns": rec.wall_ns(rec.done_ns)})
            self.store.append_jsonl(REQUESTS, d)
            bucket.append(d)
            kind = failure_kind(d)
            if kind in ("server-error", "unreachable"):
                self.note_failure(d, phase, step, concurrency, kind)
                streak["n"] += 1
                if stop_on_death and streak["n"] > concurrency:
                    raise EngineGone(f"{streak['n']} server failures in a row")
            elif kind is None:
                streak["n"] = 0

        return sink

    def note_failure(self, rec: RequestRow, phase: str, step: str, in_flight: int, kind: str) -> None:
        if self.failure is not None:
            return
        ns = rec.get("done_wall_ns") or rec.get("sent_wall_ns")
        self.failure = {"via": f"request ({kind})", "t_wall": ns / 1e9 if ns else time.time(), "phase": phase,
                        "step": step, "in_flight": in_flight, "request_id": rec.get("request_id"),
                        "http_status": rec.get("http_status"), "error": (rec.get("error") or "")[:500]}

    async def poll_health(self, client: ChatClient, phase: str, timeout_s: float = HEALTH_TIMEOUT_S
                          ) -> HealthRow:
        p = await client.probe("/health", timeout_s=max(timeout_s, 0.2))
        endpoint = "/health"
        if p.status == 404:  # an engine without vLLM's /health route (llama.cpp): readiness from /v1/models
            p = await client.probe("/v1/models", timeout_s=max(timeout_s, 0.2))
            endpoint = "/v1/models"
        row: HealthRow = {"t_wall": p.wall_ns / 1e9, "phase": phase, "status": p.status, "latency_ms": p.latency_ms,
               "error": p.error if p.status is None else None, "endpoint": endpoint}
        self.health.append(row)
        return row

    async def check_alive(self, client: ChatClient, phase: str, in_flight: int) -> bool:
        row = await self.poll_health(client, phase)
        if row["status"] == 200:
            return True
        self.dead = True
        if self.failure is None:
            self.failure = {"via": f"health {row['status'] or row['error']}", "t_wall": row["t_wall"],
                            "phase": phase, "step": None, "in_flight": in_flight, "request_id": None,
                            "http_status": row["status"], "error": row["error"]}
        return False

    def watch(self) -> Watch:
        """The watch's part of the run description."""
        return {"health": self.health, "failure": self.failure, "dead": self.dead, "notes": self.notes}

    def keep_watch(self, kept: Mapping[str, Any]) -> None:
        """A resumed run's watch as its cut attempt left it (resume.CutSessions.kept_state)."""
        self.health, self.failure = list(kept["health"]), kept["failure"]
        self.dead, self.notes = bool(kept["dead"]), list(kept["notes"] or [])
