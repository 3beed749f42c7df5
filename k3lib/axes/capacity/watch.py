"""The watch on the engine during a run: every request record appended to the run folder as it finishes and
counted toward the engine's death, the health polls, the first failure kept for the OOM event, and the load window
that stops once the engine is gone."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...io.client import ChatClient, ChatRecord
from ...io.load import run_closed_loop, run_soak
from ...io.metrics import Snapshot, scrape_async
from ...io.sampling import SCRAPE_TIMEOUT_S
from .config import HEALTH_TIMEOUT_S
from .window import failure_kind
from .result import REQUESTS
from .state import RunnerState


class _EngineGone(Exception):
    """Raised by a phase's sink to stop a load window once more server failures than its concurrency came in a
    row: the engine is gone, and hammering a dead server for the rest of the window only adds noise. The load
    generator re-raises it once the window has stopped; the records delivered so far are kept."""


async def boundary_snapshot(urls: Sequence[str]) -> Snapshot:
    return await scrape_async(list(urls), timeout_s=SCRAPE_TIMEOUT_S, strict=False)


class EngineWatch(RunnerState):
    """Recording and health: what tells a run that the engine died, and when."""

    # -- recording -------------------------------------------------------------------------------------------
    def _sink(self, phase: str, step: str, bucket: list[dict[str, Any]], concurrency: int,
              stop_on_death: bool = True) -> Callable[[ChatRecord], None]:
        streak = {"n": 0}

        def sink(rec: ChatRecord) -> None:
            d = rec.to_dict(include_raw=False)
            d["raw_json"] = None
            d.update(phase=phase, step=step, done_wall_ns=rec.wall_ns(rec.done_ns))
            self.store.append_jsonl(REQUESTS, d)
            bucket.append(d)
            kind = failure_kind(d)
            if kind in ("server-error", "unreachable"):
                self._note_failure(d, phase, step, concurrency, kind)
                streak["n"] += 1
                if stop_on_death and streak["n"] > concurrency:
                    raise _EngineGone(f"{streak['n']} server failures in a row")
            elif kind is None:
                streak["n"] = 0

        return sink

    def _note_failure(self, rec: Mapping[str, Any], phase: str, step: str, in_flight: int, kind: str) -> None:
        if self.failure is not None:
            return
        ns = rec.get("done_wall_ns") or rec.get("sent_wall_ns")
        self.failure = {"via": f"request ({kind})", "t_wall": ns / 1e9 if ns else time.time(), "phase": phase,
                        "step": step, "in_flight": in_flight, "request_id": rec.get("request_id"),
                        "http_status": rec.get("http_status"), "error": (rec.get("error") or "")[:500]}

    async def _health(self, client: ChatClient, phase: str, timeout_s: float = HEALTH_TIMEOUT_S) -> dict[str, Any]:
        p = await client.probe("/health", timeout_s=max(timeout_s, 0.2))
        endpoint = "/health"
        if p.status == 404:  # an engine without vLLM's /health route (llama.cpp): readiness from /v1/models
            p = await client.probe("/v1/models", timeout_s=max(timeout_s, 0.2))
            endpoint = "/v1/models"
        row = {"t_wall": p.wall_ns / 1e9, "phase": phase, "status": p.status, "latency_ms": p.latency_ms,
               "error": p.error if p.status is None else None, "endpoint": endpoint}
        self.health.append(row)
        return row

    async def _check_alive(self, client: ChatClient, phase: str, in_flight: int) -> bool:
        row = await self._health(client, phase)
        if row["status"] == 200:
            return True
        self.dead = True
        if self.failure is None:
            self.failure = {"via": f"health {row['status'] or row['error']}", "t_wall": row["t_wall"],
                            "phase": phase, "step": None, "in_flight": in_flight, "request_id": None,
                            "http_status": row["status"], "error": row["error"]}
        return False

    async def _closed(self, client: ChatClient, bodies: Any, *, phase: str,
                      label: str, concurrency: int, max_requests: int, duration_s: float,
                      bucket: list[dict[str, Any]], soak: bool = False) -> tuple[Any, str | None]:
        """One closed-loop load window; returns its PhaseSummary (None when it was stopped early) and why it
        stopped early, if it did."""
        sink = self._sink(phase, label, bucket, concurrency)
        pool = await self._workers()
        self._in_flight = concurrency
        try:
            if soak:
                # the requests in flight at the soak's end may finish (bounded, see CapacityPlan.soak_drain_s): one
                # cut there counts as load that did not complete, so it must not be cut merely by the clock
                summary = await run_soak(client, bodies, concurrency=concurrency, duration_s=duration_s,
                                         max_requests=max_requests, window_s=max(duration_s / 6, 1.0),
                                         request_timeout_s=self.plan.request_timeout_s, sink=sink, name=label,
                                         allow_remote_load=self.params.target.allow_remote_load,
                                         drain_s=self.plan.soak_drain_s, workers=pool)
            else:
                # the requests in flight when the window closes may finish for as long again: a step then keeps
                # its slow requests too, and a busy machine still completes some at concurrency 1
                summary = await run_closed_loop(client, bodies, concurrency=concurrency, max_requests=max_requests,
                                                max_duration_s=duration_s, drain_s=duration_s,
                                                request_timeout_s=self.plan.request_timeout_s, sink=sink, name=label,
                                                allow_remote_load=self.params.target.allow_remote_load, workers=pool)
        except _EngineGone as exc:
            return None, f"stopped early: {exc}"
        finally:
            self._in_flight = 0
        return summary, None
