"""The load window of a run: a closed loop (or the soak) over the recorder's sink, which counts every record toward
the engine's death and stops the window once the engine is gone; and the boundary scrapes around each window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ...io.client import ChatClient
from ...io.load import run_closed_loop, run_soak
from ...io.metrics import Snapshot, scrape_async
from ...io.sampling import SCRAPE_TIMEOUT_S
from .shapes import RequestRow
from .state import EngineGone, Recorder


async def boundary_snapshot(urls: Sequence[str]) -> Snapshot:
    return await scrape_async(list(urls), timeout_s=SCRAPE_TIMEOUT_S, strict=False)


class LoadWindow(Protocol):
    """How a phase sends one closed-loop window (`closed_window`, or the runner's hook around it)."""

    async def __call__(self, client: ChatClient, bodies: Any, *, phase: str, label: str, concurrency: int,
                       max_requests: int, duration_s: float, bucket: list[RequestRow],
                       soak: bool = False) -> tuple[Any, str | None]: ...


async def closed_window(rec: Recorder, client: ChatClient, bodies: Any, *, phase: str, label: str, concurrency: int,
                        max_requests: int, duration_s: float, bucket: list[RequestRow],
                        soak: bool = False) -> tuple[Any, str | None]:
    """One closed-loop load window; returns its PhaseSummary (None when it was stopped early) and why it
    stopped early, if it did."""
    sink = rec.sink(phase, label, bucket, concurrency)
    pool = await rec.worker_pool()
    plan, allow = rec.plan, rec.params.target.allow_remote_load
    try:
        if soak:
            # the requests in flight at the soak's end may finish (bounded, see CapacityPlan.soak_drain_s): one
            # cut there counts as load that did not complete, so it must not be cut merely by the clock
            summary = await run_soak(client, bodies, concurrency=concurrency, duration_s=duration_s,
                                     max_requests=max_requests, window_s=max(duration_s / 6, 1.0),
                                     request_timeout_s=rec.cap.request_timeout_s, sink=sink, name=label,
                                     allow_remote_load=allow, drain_s=plan.soak_drain_s, workers=pool)
        else:
            # the requests in flight when the window closes may finish for as long again: a step then keeps
            # its slow requests too, and a busy machine still completes some at concurrency 1
            summary = await run_closed_loop(client, bodies, concurrency=concurrency, max_requests=max_requests,
                                            max_duration_s=duration_s, drain_s=duration_s,
                                            request_timeout_s=rec.cap.request_timeout_s, sink=sink, name=label,
                                            allow_remote_load=allow, workers=pool)
    except EngineGone as exc:
        return None, f"stopped early: {exc}"
    return summary, None
