"""Running the four capacity phases against the target, each bounded in requests and seconds, on one wall clock
shared by the /metrics sampler, the GPU sampler and the client records; everything lands in the run folder.

I/O lives here and in the modules of the run's parts, and only there: `state` (what the phases share), `watch`
(recording and health), `coldload`, `longcontext`, `calibration`, `concurrency` and `soak`; `run_capacity` and the order of
the phases are here. Request records are appended to `evidence/capacity/requests.jsonl` as they finish; the sampled
series, health polls and phase windows are rewritten after every phase, so a killed run keeps what it measured. A
dead engine (health not 200) ends the run early: the later phases are recorded as skipped, with the reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from ...core import progress
from ...core.errors import TargetError
from ...core.params import Params
from ...io.client import run_sync
from ...io.load import check_load_target
from ...io.sampling import Timeline
from .longcontext import LongContextPhase
from .result import CapacityResult, read_capacity
from .resume import cut_sessions, restore
from .shape import PHASES
from .soak import SoakPhase
from .coldload import ColdLoadPhase
from .concurrency import ConcurrencyPhase
from .sessions import SessionPhase, SessionSource

if TYPE_CHECKING:
    from ...core.session import AxisContext


def pinned_params(ctx: "AxisContext") -> Params:
    from ...core.target import pin_target

    return pin_target(ctx.params, ctx.target)


class CapacityRunner(ColdLoadPhase, LongContextPhase, ConcurrencyPhase, SoakPhase, SessionPhase):
    """One run: its phases (cold load, long context, concurrency steps, soak, sessions, each from its own module) over the
    shared state; `run()` drives them in order and writes the run folder."""

    async def _phase_run(self, name: str, work: Callable[[], Any]) -> None:
        entry = {"phase": name, "start_wall": time.time(), "end_wall": None, "status": "running", "note": ""}
        self.phases.append(entry)
        self._phase = name
        progress.phase(name, duration_s=self.plan.phase_budget_s(name))
        try:
            async with asyncio.timeout(self.plan.phase_budget_s(name)):
                note = await work()
            entry["status"] = "done"
            entry["note"] = note or ""
        except TimeoutError:
            entry["status"] = "cut"
            entry["note"] = f"stopped at its bound of {self.plan.phase_budget_s(name):.0f} s"
        except (TargetError, httpx.HTTPError) as exc:
            entry["status"] = "failed"
            entry["note"] = f"{type(exc).__name__}: {exc}"[:500]
        entry["end_wall"] = time.time()
        self._flush()

    def _skip(self, name: str, reason: str) -> None:
        now = time.time()
        self.phases.append({"phase": name, "start_wall": now, "end_wall": now, "status": "skipped", "note": reason})
    async def run(self) -> None:
        pinned = pinned_params(self.ctx)
        self.timeline = Timeline(self.urls, pinned.target.gpu_metrics, interval_s=self.cap.sample_interval_s,
                                 max_duration_s=self.plan.budget_s + 60).start()
        try:
            works = {"cold-load": self._cold_load, "long-context": self._long_context,
                     "concurrency": self._concurrency, "soak": self._soak, "sessions": self._sessions}
            kept = {p["phase"] for p in self.phases}  # a resumed run's phases before the sessions
            for name in PHASES:
                if name in kept:
                    continue
                if self.dead:
                    why = "the server never became ready" if not self.ready.get("ready") else \
                        f"the engine stopped answering (health) during {self._phase}"
                    self._skip(name, why)
                    continue
                await self._phase_run(name, works[name])
        finally:
            self.timeline.stop()
            if self._pool is not None:
                await self._pool.aclose()
            await asyncio.to_thread(self._read_log)
            self._flush()


def run_capacity(ctx: "AxisContext") -> "CapacityResult":
    """Run the four phases (bounded, whatever the target does) and return what was written to the run folder."""
    # before the samplers and the health polls touch the target: a mistyped URL must not load a remote deployment
    check_load_target(ctx.target.base_url, ctx.params.target.allow_remote_load)
    runner = CapacityRunner(ctx)
    cut = cut_sessions(ctx.store, runner.plan.to_dict())
    if cut is not None:  # cut in its session phase: what it finished is kept, the sessions go on
        restore(ctx.store, cut)
        runner.resume_from(cut)
    runner.session_source = SessionSource(ctx.params)  # a session trace that cannot be read stops here, before any load
    run_sync(runner.run())
    return read_capacity(ctx.store)
