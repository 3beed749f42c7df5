"""The state of one capacity run, shared by its phases: the plan, what each phase found so far, the clients and
worker processes the load goes through, the request bodies, and the run description rewritten to the run folder
after every phase (so a killed run keeps what it measured)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...core.errors import APIError, TargetError
from ...io.calibration import CalibrationReport
from ...io.client import ChatClient
from ...io.prompts import BuiltPrompt, EstimateCounter, build_prompts
from ...io.readers.vllm_log import VllmLogReport
from ...io.sampling import Timeline
from ...io.workers import WorkerPool, resolve_workers
from .config import CapacityParams
from .resume import CutSessions
from .result import GPU_JSON, LOG_TXT, METRICS_JSON, REQUESTS, RUN_JSON
from .server import server_config
from .shape import CapacityPlan, plan_capacity

if TYPE_CHECKING:
    from ...core.session import AxisContext


class RunnerState:
    """Mutable state of one run, and the helpers every phase uses (see run.CapacityRunner for the phases)."""

    def __init__(self, ctx: "AxisContext", plan: CapacityPlan | None = None) -> None:
        self.ctx = ctx
        self.params = ctx.params
        self.cap: CapacityParams = ctx.params.axes.capacity
        self.plan = plan or plan_capacity(ctx.params)
        self.store = ctx.store
        self.urls = tuple(ctx.target.metrics_urls)
        self.phases: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.long_context: list[dict[str, Any]] = []
        self.health: list[dict[str, Any]] = []
        self.refusal: dict[str, Any] = {"outcome": "not-run", "reason": "the long-context phase did not run"}
        self.ready: dict[str, Any] = {}
        self.failure: dict[str, Any] | None = None
        self.dead = False
        self.notes: list[str] = []
        self.model_card: dict[str, Any] | None = None
        self.cache_info: dict[str, str] = {}
        self.log_report: VllmLogReport | None = None
        self.log_error: str | None = None
        self.soak: dict[str, Any] | None = None
        self.soak_window: tuple[float, float] | None = None
        self._phase: str = ""
        self._in_flight = 0
        self.timeline: Timeline | None = None
        # the client's self-calibration: what it ran against, and its reports (see trust.py)
        self.calibration: dict[str, Any] = {"enabled": bool(self.plan.calibration_concurrencies), "ran": False}
        self._reports: list[CalibrationReport] = []
        self._measured: list[dict[str, Any]] = []  # long-context records: the timing the calibration imitates
        # load.workers: the concurrency steps' and the soak's streams (and their calibration) spread over this many
        # processes; the long-context phase (one stream) stays in this one
        self.workers = min(resolve_workers(self.params.load.workers),
                           max((*self.plan.steps, self.plan.planned_concurrency)))
        self._pool: WorkerPool | None = None
        self.resume: CutSessions | None = None  # a run cut in its session phase, continued (see resume.py)

    def resume_from(self, cut: CutSessions) -> None:
        """Continue a run cut in its session phase: the earlier phases' state as the cut attempt left it."""
        self.resume = cut
        state = cut.kept_state()
        self.phases = cut.kept_phases
        self.steps, self.long_context = state["steps"] or [], state["long_context"] or []
        self.refusal, self.ready = state["refusal"] or self.refusal, state["ready"] or {}
        self.health, self.failure, self.dead = state["health"], state["failure"], bool(state["dead"])
        self.soak, self.notes = state["soak"], state["notes"] or []
        self.calibration = state["calibration"] or self.calibration
        self.model_card, self.cache_info = state["model_card"], state["cache_config_info"] or {}
        self.log_error = state["log_error"]

    # -- clients ---------------------------------------------------------------------------------------------
    def _client(self, timeout_s: float) -> ChatClient:
        return ChatClient(self.ctx.target.base_url, model=self.params.target.model,
                          api_key_env=self.params.target.api_key_env, timeout_s=timeout_s,
                          connect_timeout_s=min(10.0, timeout_s))

    async def _workers(self) -> WorkerPool | None:
        """The worker processes, started once for the run (their clients keep their connections step to step)."""
        if self.workers > 1 and self._pool is None:
            self._pool = await WorkerPool(self.workers).astart()
        return self._pool

    def _flush(self) -> None:
        """Rewrite the series and the run description; called after every phase."""
        if self.timeline is not None:
            kept = self.resume
            self.store.write_json(METRICS_JSON, [*(kept.metrics if kept else ()), *self.timeline.metric_rows()])
            self.store.write_json(GPU_JSON, [*(kept.gpu if kept else ()), *self.timeline.gpu_rows()])
        self.store.write_json(RUN_JSON, self.describe())
        if self.store.path(REQUESTS).exists():
            self.store.adopt(REQUESTS)

    def _gpu_driver(self) -> str | None:
        """The driver the GPU source's own labels carry (dcgm-exporter's DCGM_FI_DRIVER_VERSION, NVML's)."""
        source = self.timeline.gpu_source if self.timeline is not None else None
        if source is None or self.params.target.gpu_metrics.source == "nvml":
            return None  # NVML's driver is the kit's host's: the environment axis reads it (claims "nvml")
        return getattr(source.describe(), "driver_version", None)

    def describe(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "target": self.ctx.target.base_url,
            "gpu_source": self.params.target.gpu_metrics.source if self.timeline is None else self.timeline.gpu_kind,
            "gpu_driver": self._gpu_driver(),
            "phases": self.phases, "steps": self.steps, "long_context": self.long_context,
            "refusal": self.refusal, "ready": self.ready, "health": self.health, "failure": self.failure,
            "dead": self.dead, "soak": self.soak, "notes": self.notes, "calibration": self.calibration,
            "model_card": self.model_card, "cache_config_info": self.cache_info,
            "config": server_config(self.log_report, self.cache_info, self.model_card),
            "log_error": self.log_error,
            "sampler_errors": self.timeline.errors() if self.timeline is not None else {},
            "files": {"requests": REQUESTS, "metrics": METRICS_JSON, "gpu": GPU_JSON,
                      "server_log": LOG_TXT if self.log_report is not None else None},
        }


    def _admit_limit(self) -> int | None:
        """How many sequences the server runs at once (max_num_seqs × DP), when its configuration states it."""
        values = server_config(self.log_report, self.cache_info, self.model_card)["values"]
        seqs, dp = values.get("max_num_seqs"), values.get("data_parallel_size") or 1
        return seqs * dp if isinstance(seqs, int) and isinstance(dp, int) else None

    async def _prompts(self, sizing: ChatClient, *, count: int, tokens: int | Sequence[int], seed: int,
                       shared_prefix_tokens: int = 0) -> list[BuiltPrompt]:
        try:
            return await build_prompts(sizing, count=count, target_tokens=tokens, seed=seed,
                                       shared_prefix_tokens=shared_prefix_tokens)
        except (APIError, TargetError) as exc:
            # a /tokenize that refuses an over-long prompt or does not answer: estimate, and say so
            self.notes.append(f"prompt sizing fell back to a chars/token estimate: {exc}"[:300])
            return await build_prompts(EstimateCounter(), count=count, target_tokens=tokens, seed=seed,
                                       shared_prefix_tokens=shared_prefix_tokens)

    def _body(self, prompt: BuiltPrompt, max_tokens: int, *, stream: bool = True,
              salt: str | None = None) -> dict[str, Any]:
        # ignore_eos: the output length is part of the test condition, not left to the model's mood
        extra: dict[str, Any] = {"ignore_eos": True, "temperature": 0}
        if salt:
            extra["cache_salt"] = salt  # a cold prefix cache for every request: nothing shared, full KV cost
        return prompt.body(max_tokens=max_tokens, model=self.params.target.model, stream=stream, **extra)
