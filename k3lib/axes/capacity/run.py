"""Running the capacity phases against the target, each bounded in requests and seconds, on one wall clock shared by
the /metrics sampler, the GPU sampler and the client records; everything lands in the run folder.

Each phase is a function over the plan and the run's recorder (`state.Recorder`: the clients, the worker processes,
the run folder, the watch on the engine) that returns its own typed result: `coldload.cold_load`,
`longcontext.long_context`, `calibration.calibrate` with `concurrency.concurrency_steps`, `soak.soak` and
`sessions.play_sessions`. `CapacityRunner` composes them in order, hands each what the earlier ones found, and
rewrites the run description from their results after every phase (and as a phase publishes its progress), so a
killed run keeps what it measured. Request records are appended to `evidence/capacity/requests.jsonl` as they
finish. A dead engine (health not 200) ends the run early: the later phases are recorded as skipped, with the
reason. A run cut in its session phase goes on where it was cut (resume.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx

from ...core import progress
from ...core.errors import TargetError
from ...core.evidence import CapacityPhase, CapacityStep, Row
from ...core.params import Params
from ...core.target import pin_target
from ...io.calibration import CalibrationReport
from ...io.client import ChatClient, run_sync
from ...io.load import check_load_target
from ...io.sampling import Timeline
from .calibration import Calibration, calibrate, not_run
from .coldload import NOT_RUN, ColdLoad, ServerLog, cold_load, read_log
from .concurrency import concurrency_steps, step_row, steps_note
from .longcontext import LongContext, long_context
from .result import GPU_JSON, LOG_TXT, METRICS_JSON, REQUESTS, RUN_JSON, SESSIONS_JSONL, CapacityResult, read_capacity
from .resume import CutSessions, cut_sessions, restore
from .server import server_config
from .sessions import SessionRun, SessionSource, play_sessions
from .shape import PHASES
from .run_shapes import CalibrationData, ReadyRow
from .soak import Soak, soak
from .state import Recorder
from .watch import closed_window

if TYPE_CHECKING:
    from ...core.session import AxisContext


def pinned_params(ctx: "AxisContext") -> Params:
    return pin_target(ctx.params, ctx.target)


class CapacityRunner:
    """One run: the phases in order over one recorder, each phase's result kept as it came back (or as it published
    it, for a phase cut at its bound); `run()` drives them and writes the run folder."""

    def __init__(self, ctx: "AxisContext") -> None:
        self.rec = Recorder(ctx)
        self.ctx, self.params, self.plan, self.store = ctx, ctx.params, self.rec.plan, ctx.store
        self.session_source: SessionSource | None = None  # set before the run: a bad trace is refused before load
        self.phases: list[CapacityPhase] = []
        self._phase = ""
        self.cold: ColdLoad = NOT_RUN
        self.log = ServerLog()
        self.long = LongContext()
        self.calib: Calibration = not_run(bool(self.plan.calibration_concurrencies))
        self.steps: tuple[CapacityStep, ...] = ()
        self.soak: Soak | None = None
        self.sessions: SessionRun | None = None
        self.resume: CutSessions | None = None
        self.consent_stop = ""  # the phase in which the plan's at-most was reached, if it was

    # -- what tests and notebooks read of a runner -------------------------------------------------------------
    @property
    def ready(self) -> ReadyRow:
        return self.cold.ready

    @property
    def calibration(self) -> CalibrationData:
        return self.calib.data

    @property
    def _reports(self) -> list[CalibrationReport]:
        return list(self.calib.reports)

    # -- the phases, each a function over the plan and the recorder ---------------------------------------------
    async def _cold_load(self) -> str:
        self.cold = await cold_load(self.rec)
        self.log = self.cold.log
        return self.cold.note

    async def _long_context(self) -> str:
        self.long = await long_context(self.rec, self._keep("long"))
        return "the out-of-contract probe left the engine dead" if self.rec.dead and not self.long.lengths \
            else self.long.note

    async def _calibrate(self) -> Calibration:
        self.calib = await calibrate(self.rec, self.long.measured)
        self._flush()  # kept in the run folder straight away
        return self.calib

    async def _workers(self) -> Any:
        return await self.rec.worker_pool()

    async def _closed(self, client: ChatClient, bodies: Any, **kw: Any) -> tuple[Any, str | None]:
        return await closed_window(self.rec, client, bodies, **kw)

    async def _concurrency(self) -> str:
        self.steps = await concurrency_steps(self.rec, self._closed, self._calibrate, self.cold.admit_limit(),
                                             self._keep("steps"))
        return steps_note(self.steps, len(self.plan.steps))

    async def _soak(self) -> str:
        self.soak = await soak(self.rec, self._closed, self.calib, self.cold.admit_limit())
        return self.soak.note

    async def _sessions(self) -> str:
        source = self.session_source or SessionSource(self.params)
        self.sessions = await play_sessions(self.rec, source, self.cold.cache_info, self.resume,
                                            self._keep("sessions", write=True))
        return self.sessions.note(len(self.plan.session_levels), self.resume)

    def _keep(self, name: str, write: bool = False) -> Callable[[Any], None]:
        """Where a phase publishes its result as it grows: kept here (and the run description rewritten)."""
        def publish(result: Any) -> None:
            setattr(self, name, result)
            if write:
                self.store.write_json(RUN_JSON, self.describe())
        return publish

    # -- the run -----------------------------------------------------------------------------------------------
    def resume_from(self, cut: CutSessions) -> None:
        """Continue a run cut in its session phase: the earlier phases' results as the cut attempt left them."""
        self.resume = cut
        kept = cut.kept_state()
        self.rec.keep_watch(kept)
        self.phases = [CapacityPhase.model_validate(p) for p in cut.kept_phases]
        self.cold = ColdLoad(ready=kept["ready"] or {}, model_card=kept["model_card"],
                             cache_info=kept["cache_config_info"] or {}, log=ServerLog(error=kept["log_error"]))
        self.log = self.cold.log
        self.long = LongContext(refusal=kept["refusal"] or LongContext().refusal,
                                lengths=tuple(kept["long_context"] or ()))
        self.calib = Calibration(kept["calibration"] or self.calib.data)
        self.steps = tuple(CapacityStep.model_validate(s) for s in kept["steps"] or ())
        self.soak = Soak(kept["soak"], "") if kept["soak"] is not None else None

    async def _phase_run(self, name: str, work: Callable[[], Awaitable[str]]) -> None:
        """One phase within its bound: `running` while it runs (what a kill leaves), then how it ended."""
        entry = CapacityPhase(phase=name, start_wall=time.time(), status="running")
        at = len(self.phases)
        self.phases.append(entry)
        self._phase = name
        bound = self.plan.phase_budget_s(name)
        progress.phase(name, duration_s=bound)
        try:
            async with asyncio.timeout(bound):
                note = await work()
            status, note = "done", note or ""
        except TimeoutError:
            status, note = "cut", f"stopped at its bound of {bound:.0f} s"
        except progress.ConsentExceeded as exc:  # the plan's at-most: stop here, judged on what was measured
            status, note = "cut", f"stopped at the plan's at-most: {exc}"[:500]
            self.consent_stop = name
        except (TargetError, httpx.HTTPError) as exc:
            status, note = "failed", f"{type(exc).__name__}: {exc}"[:500]
        self.phases[at] = entry.model_copy(
            update={"status": status, "note": note, "end_wall": time.time()})
        self._flush()

    def _skip(self, name: str, reason: str) -> None:
        now = time.time()
        self.phases.append(CapacityPhase(phase=name, start_wall=now, end_wall=now, status="skipped", note=reason))

    async def run(self) -> None:
        pinned = pinned_params(self.ctx)
        rec = self.rec
        rec.timeline = Timeline(rec.urls, pinned.target.gpu_metrics, interval_s=rec.cap.sample_interval_s,
                                max_duration_s=self.plan.budget_s + 60).start()
        try:
            works = {"cold-load": self._cold_load, "long-context": self._long_context,
                     "concurrency": self._concurrency, "soak": self._soak, "sessions": self._sessions}
            kept = {p.phase for p in self.phases}  # a resumed run's phases before the sessions
            for name in PHASES:
                if name in kept:
                    continue
                if self.consent_stop:
                    self._skip(name, f"the plan's at-most was reached in the {self.consent_stop} phase")
                    continue
                if rec.dead:
                    why = "the server never became ready" if not self.ready.get("ready") else \
                        f"the engine stopped answering (health) during {self._phase}"
                    self._skip(name, why)
                    continue
                await self._phase_run(name, works[name])
        finally:
            rec.timeline.stop()
            if rec.pool is not None:
                await rec.pool.aclose()
            self.log = await asyncio.to_thread(read_log, rec)
            self._flush()

    # -- the run folder ------------------------------------------------------------------------------------------
    def _flush(self) -> None:
        """Rewrite the series and the run description; called after every phase."""
        timeline, kept = self.rec.timeline, self.resume
        if timeline is not None:
            self.store.write_json(METRICS_JSON, [*(kept.metrics if kept else ()), *timeline.metric_rows()])
            self.store.write_json(GPU_JSON, [*(kept.gpu if kept else ()), *timeline.gpu_rows()])
        self.store.write_json(RUN_JSON, self.describe())
        for stream in (REQUESTS, SESSIONS_JSONL):
            if self.store.path(stream).exists():
                self.store.adopt(stream)

    def describe(self) -> Row:
        rec, cold = self.rec, self.cold
        timeline = rec.timeline
        watch = rec.watch()
        return {
            "plan": self.plan.model_dump(mode="json"), "target": self.ctx.target.base_url,
            "gpu_source": self.params.target.gpu_metrics.source if timeline is None else timeline.gpu_kind,
            "gpu_driver": rec.gpu_driver(),
            "phases": [p.model_dump() for p in self.phases], "steps": [step_row(s) for s in self.steps],
            "long_context": list(self.long.lengths),
            "refusal": self.long.refusal, "ready": cold.ready, "health": watch["health"], "failure": watch["failure"],
            "dead": watch["dead"], "soak": self.soak.data if self.soak is not None else None,
            "notes": watch["notes"], "calibration": self.calib.data,
            "model_card": cold.model_card, "cache_config_info": cold.cache_info,
            "config": server_config(self.log.report, cold.cache_info, cold.model_card),
            "log_error": self.log.error,
            "sampler_errors": timeline.errors() if timeline is not None else {},
            "files": {"requests": REQUESTS, "metrics": METRICS_JSON, "gpu": GPU_JSON,
                      "server_log": LOG_TXT if self.log.report is not None else None,
                      "sessions": SESSIONS_JSONL if self.store.path(SESSIONS_JSONL).exists() else None},
            "sessions": self.sessions.describe() if self.sessions is not None else None,
        }


def run_capacity(ctx: "AxisContext") -> "CapacityResult":
    """Run the phases (bounded, whatever the target does) and return what was written to the run folder."""
    # before the samplers and the health polls touch the target: a mistyped URL must not load a remote deployment
    check_load_target(ctx.target.base_url, ctx.params.target.allow_remote_load)
    runner = CapacityRunner(ctx)
    runner.session_source = SessionSource(ctx.params)  # a session trace that cannot be read stops here, before any load
    cut = cut_sessions(ctx.store, runner.plan)
    if cut is not None:  # cut in its session phase: what it finished is kept, the sessions go on
        restore(ctx.store, cut)
        runner.resume_from(cut)
    run_sync(runner.run())
    return read_capacity(ctx.store)

