"""The client's self-calibration before the load steps: its own timing error at the calibrated concurrencies,
measured against a known-timing server on this machine, and the gate it sets on each load window's latency figures
together with the window's client/server cross-check."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import httpx

from ...core.errors import TargetError
from ...io.calibration import CalibrationReport, calibration_dict
from ...io.calibration import calibrate as calibrate_once
from ...io.knowntiming import KnownTimingServer
from ...io.client import ChatClient
from ...io.crosscheck import cross_check
from ...io.metrics import Snapshot
from ...io.workers import calibrate_workers
from ...io.workers import WorkerPool
from .agreement import calibration_error_at
from .config import CALIBRATION_BOUND_S
from .shape import CapacityPlan
from .run_shapes import CalibrationData, KnownTiming
from .shapes import RequestRow, Trust
from .state import Recorder
from .trust import (calibration_rounds, calibration_summary, cross_check_data, failed_report, gate_step,
                    known_timing, record_view)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The client's self-calibration: what it ran against, as the run description writes it (`data`), and its
    reports, which gate each load window's latency figures."""

    data: CalibrationData
    reports: tuple[CalibrationReport, ...] = ()

    def error_at(self, concurrency: int) -> float | None:
        return calibration_error_at({"summary": calibration_summary(list(self.reports))}, concurrency)

    def trust(self, summary: Any, bucket: Sequence[RequestRow], concurrency: int,
              before: Snapshot | None, after: Snapshot | None) -> Trust:
        """A window's calibration gate and its client/server cross-check, as step fields."""
        check = None
        error = None
        if before is not None and after is not None:
            try:
                check = cross_check([record_view(r) for r in bucket], before, after)
            except (ValueError, KeyError) as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
        return {**gate_step(summary, list(self.reports), concurrency), "cross_check": cross_check_data(check, error),
                "workers": summary.workers if summary is not None else None,
                "degraded": summary.degraded if summary is not None else None}


def not_run(enabled: bool) -> Calibration:
    return Calibration({"enabled": enabled, "ran": False})


async def calibrate(rec: Recorder, measured: Sequence[RequestRow]) -> Calibration:
    """The client's own timing error at the calibrated concurrencies, against a known-timing server on this
    machine (a real socket on 127.0.0.1), bounded whatever that server does; `measured`: the long-context records
    whose timing it imitates. A calibration that cannot complete counts as failed: the steps it would have vouched
    for are not trusted."""
    plan = rec.plan
    if not plan.calibration_concurrencies:
        return Calibration({"enabled": False, "ran": False, "reports": [], "summary": [],
                            "note": "axes.capacity.calibrate is false: the client's timing error is not known"})
    timing = known_timing(list(measured))
    server = KnownTimingServer(in_process=plan.capacity.calibration_server == "thread")
    pool = await rec.worker_pool()
    reports: list[CalibrationReport] = []
    error = None
    t0 = time.time()
    try:
        async with asyncio.timeout(CALIBRATION_BOUND_S):
            await asyncio.to_thread(server.start, CALIBRATION_BOUND_S / 2)
            if pool is not None:
                reports = await _calibrate_spread(plan, pool, server.url, timing)
            else:
                reports = await _calibrate_here(plan, server.url, timing)
    except TimeoutError:
        error = f"it ran past its bound of {CALIBRATION_BOUND_S:.0f} s"
    except (RuntimeError, OSError, httpx.HTTPError, TargetError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        await asyncio.to_thread(server.stop)
    done = {r.concurrency for r in reports}
    reports += [failed_report(c, timing, plan.capacity.calibration_max_error_ms, error or "no report")
                for c in plan.calibration_concurrencies if c not in done]
    return Calibration({"enabled": True, "ran": True, "server": plan.capacity.calibration_server, "workers": rec.workers,
                        "start_wall": t0, "end_wall": time.time(), **timing,
                        "max_error_ms": plan.capacity.calibration_max_error_ms, "error": error,
                        "summary": calibration_summary(reports), "reports": [calibration_dict(r) for r in reports]},
                       tuple(reports))


async def _calibrate_here(plan: CapacityPlan, url: str, timing: KnownTiming) -> list[CalibrationReport]:
    """The calibration in this process, one round per calibrated concurrency."""
    reports = []
    client = ChatClient(url, timeout_s=CALIBRATION_BOUND_S, connect_timeout_s=5.0)
    try:
        # a fresh server and a fresh connection pool pay one-off costs on their first requests (imports,
        # connects): warm both up at the lowest calibrated concurrency, and keep that round out of it
        await calibrate_once(client, concurrency=plan.calibration_concurrencies[0],
                             known_ttft_ms=timing["known_ttft_ms"], known_itl_ms=timing["known_itl_ms"],
                             chunks=2, max_error_ms=plan.capacity.calibration_max_error_ms)
        for c in plan.calibration_concurrencies:
            reports.append(await calibrate_once(
                client, concurrency=c, known_ttft_ms=timing["known_ttft_ms"],
                known_itl_ms=timing["known_itl_ms"], chunks=timing["chunks"],
                rounds=calibration_rounds(c, timing), max_error_ms=plan.capacity.calibration_max_error_ms))
    finally:
        await client.aclose()
    return reports


async def _calibrate_spread(plan: CapacityPlan, pool: WorkerPool, url: str,
                            timing: KnownTiming) -> list[CalibrationReport]:
    """The calibration over the worker processes, as the steps will spread their streams: per worker and whole."""
    ttft, itl, bound = timing["known_ttft_ms"], timing["known_itl_ms"], plan.capacity.calibration_max_error_ms
    # a warm-up round kept out of it: the workers' fresh connection pools, the fresh server's first answers
    await calibrate_workers(pool, url, concurrency=plan.calibration_concurrencies[0], chunks=2, known_ttft_ms=ttft,
                            known_itl_ms=itl, max_error_ms=bound)
    return [await calibrate_workers(pool, url, concurrency=c, chunks=timing["chunks"],
                                    rounds=calibration_rounds(c, timing), known_ttft_ms=ttft, known_itl_ms=itl,
                                    max_error_ms=bound)
            for c in plan.calibration_concurrencies]
