"""The client's self-calibration before the load steps: its own timing error at the calibrated concurrencies,
measured against a known-timing server on this machine, and the gate it sets on each load window's latency figures
together with the window's client/server cross-check."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ...core.errors import TargetError
from ...io.calibration import CalibrationReport, calibrate
from ...io.knowntiming import KnownTimingServer
from ...io.client import ChatClient
from ...io.crosscheck import cross_check
from ...io.metrics import Snapshot
from ...io.workers import calibrate_workers
from ...io.workers import WorkerPool
from .config import CALIBRATION_BOUND_S
from .trust import (calibration_rounds, calibration_summary, cross_check_data, failed_report, gate_step,
                    known_timing, record_view)
from .watch import EngineWatch


class CalibrationPhase(EngineWatch):
    """The calibration run before the steps, and the trust it lends a load window."""

    async def _calibrate(self) -> None:
        """The client's own timing error at the calibrated concurrencies, against a known-timing server on this
        machine (a real socket on 127.0.0.1), bounded whatever that server does. A calibration that cannot
        complete counts as failed: the steps it would have vouched for are not trusted."""
        plan = self.plan
        if not plan.calibration_concurrencies:
            self.calibration = {"enabled": False, "ran": False, "reports": [], "summary": [],
                                "note": "axes.capacity.calibrate is false: the client's timing error is not known"}
            return
        timing = known_timing(self._measured)
        server = KnownTimingServer(in_process=plan.calibration_server == "thread")
        pool = await self._workers()
        reports: list[CalibrationReport] = []
        error = None
        t0 = time.time()
        try:
            async with asyncio.timeout(CALIBRATION_BOUND_S):
                await asyncio.to_thread(server.start, CALIBRATION_BOUND_S / 2)
                if pool is not None:
                    reports = await self._calibrate_spread(pool, server.url, timing)
                client = ChatClient(server.url, timeout_s=CALIBRATION_BOUND_S, connect_timeout_s=5.0)
                try:
                    # a fresh server and a fresh connection pool pay one-off costs on their first requests (imports,
                    # connects): warm both up at the lowest calibrated concurrency, and keep that round out of it
                    if pool is None:
                        await calibrate(client, concurrency=plan.calibration_concurrencies[0],
                                        known_ttft_ms=timing["known_ttft_ms"], known_itl_ms=timing["known_itl_ms"],
                                        chunks=2, max_error_ms=plan.calibration_max_error_ms)
                    for c in plan.calibration_concurrencies if pool is None else ():
                        reports.append(await calibrate(
                            client, concurrency=c, known_ttft_ms=timing["known_ttft_ms"],
                            known_itl_ms=timing["known_itl_ms"], chunks=timing["chunks"],
                            rounds=calibration_rounds(c, timing), max_error_ms=plan.calibration_max_error_ms))
                finally:
                    await client.aclose()
        except TimeoutError:
            error = f"it ran past its bound of {CALIBRATION_BOUND_S:.0f} s"
        except (RuntimeError, OSError, httpx.HTTPError, TargetError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            await asyncio.to_thread(server.stop)
        done = {r.concurrency for r in reports}
        reports += [failed_report(c, timing, plan.calibration_max_error_ms, error or "no report")
                    for c in plan.calibration_concurrencies if c not in done]
        self._reports = reports
        self.calibration = {"enabled": True, "ran": True, "server": plan.calibration_server, "workers": self.workers,
                            "start_wall": t0, "end_wall": time.time(), **timing,
                            "max_error_ms": plan.calibration_max_error_ms, "error": error,
                            "summary": calibration_summary(reports), "reports": [r.to_dict() for r in reports]}
        self._flush()

    async def _calibrate_spread(self, pool: WorkerPool, url: str, timing: Mapping[str, Any]) -> list[CalibrationReport]:
        """The calibration over the worker processes, as the steps will spread their streams: per worker and whole."""
        plan = self.plan
        kw = {"known_ttft_ms": timing["known_ttft_ms"], "known_itl_ms": timing["known_itl_ms"],
              "max_error_ms": plan.calibration_max_error_ms}
        # a warm-up round kept out of it: the workers' fresh connection pools, the fresh server's first answers
        await calibrate_workers(pool, url, concurrency=plan.calibration_concurrencies[0], chunks=2, **kw)
        return [await calibrate_workers(pool, url, concurrency=c, chunks=timing["chunks"],
                                        rounds=calibration_rounds(c, timing), **kw)
                for c in plan.calibration_concurrencies]

    def _trust(self, summary: Any, bucket: Sequence[Mapping[str, Any]], concurrency: int,
               before: Snapshot | None, after: Snapshot | None) -> dict[str, Any]:
        """A window's calibration gate and its client/server cross-check, as step fields."""
        check = None
        error = None
        if before is not None and after is not None:
            try:
                check = cross_check([record_view(r) for r in bucket], before, after)
            except (ValueError, KeyError) as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
        spread = {"workers": summary.workers if summary is not None else None,
                  "degraded": summary.degraded if summary is not None else None}
        return {**gate_step(summary, self._reports, concurrency), "cross_check": cross_check_data(check, error),
                **spread}
