"""A load worker process (k3lib.io.workers): it reads jobs from its pipe, runs each on its own event loop with its
own client (a share of a load phase, a calibration, a warm-up) and sends every finished record back at once.

`ClientSettings` is what a job carries to build that client: the settings, never a key.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypedDict, cast

from .calibration import CalibrationBody, LoopLagDict, calibration_records, warm_up
from .client import ChatClient, ChatRecord
from ..core.errors import BadInputError
from .load import _Phase, _with_lag, closed_loop_work


@dataclass(frozen=True)
class ClientSettings:
    """What a worker needs to build its own client: the settings, never a key (only its variable's name)."""

    base_url: str
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    max_connections: int = 2048
    keep_raw: bool = True

    @classmethod
    def of(cls, client: ChatClient) -> ClientSettings:
        if client._transport is not None:
            raise BadInputError("a phase with an in-memory test transport cannot be spread over worker processes",
                                field="load.workers")
        return cls(client.base_url, model=client.model, api_key_env=client.api_key_env, timeout_s=client.timeout_s,
                   connect_timeout_s=client.connect_timeout_s, max_connections=client.max_connections,
                   keep_raw=client.keep_raw)

    def client(self) -> ChatClient:
        return ChatClient(self.base_url, model=self.model, api_key_env=self.api_key_env, timeout_s=self.timeout_s,
                          connect_timeout_s=self.connect_timeout_s, max_connections=self.max_connections,
                          keep_raw=self.keep_raw)


def worker_main(argv: Sequence[str]) -> None:
    """A worker process: `argv` is its job pipe's and its result pipe's file descriptors."""
    jobs = Connection(int(argv[0]), writable=False)
    results = Connection(int(argv[1]), readable=False)
    # a terminal's Ctrl-C reaches the whole process group: the parent stops the phase, the workers follow it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # what a job will use, imported now: a lazy import inside a phase stalls its loop (tens of ms)
    import aiohttp  # noqa: F401
    import httpx  # noqa: F401

    from . import load  # noqa: F401
    gc.freeze()  # the start-up heap (imports) out of the collector, as the known-timing server does
    results.send(("ready", os.getpid()))
    asyncio.run(_serve(jobs, results))


class WorkerJob(TypedDict, total=False):
    """One job sent to a worker process: `kind` "warm", "calibrate" or "phase", and that kind's arguments."""

    kind: str
    client: ClientSettings
    body: CalibrationBody
    timeout_s: float
    concurrency: int
    rounds: int
    start_ns: int
    first_id: int
    journal_dir: str | None
    bodies: Any  # a load phase's bodies (`k3lib.io.load.BodySource`), pickled across
    name: str
    max_requests: int
    max_duration_s: float
    drain_s: float
    request_timeout_s: float
    wall_ns: int
    first_index: int
    index_step: int
    offsets_s: list[float]


class JobInfo(TypedDict, total=False):
    """What a worker sends back when its job is done: its CPU time, its loop lag, the requests it issued."""

    cpu_s: float
    lag: LoopLagDict
    lag_p99_ms: float | None
    issued: int


class _Worker:
    def __init__(self, jobs: Connection, results: Connection) -> None:
        self.jobs, self.results = jobs, results
        self.clients: dict[ClientSettings, ChatClient] = {}
        self.phase: Any = None
        self.journal: Any = None

    def send(self, msg: tuple[Any, ...]) -> None:
        try:
            self.results.send(msg)
        except OSError:  # the parent is gone: no one to load for
            os._exit(3)

    def client(self, settings: ClientSettings) -> ChatClient:
        if settings not in self.clients:
            self.clients[settings] = settings.client()
        return self.clients[settings]

    def record_sender(self, job_id: int, journal_dir: str | None) -> Callable[[ChatRecord], None]:
        if journal_dir and self.journal is None:
            self.journal = open(Path(journal_dir) / f"worker-{os.getpid()}.ids", "a", buffering=1,  # noqa: SIM115
                                encoding="utf-8")

        def send(rec: ChatRecord) -> None:
            self.send(("rec", job_id, rec))
            if self.journal is not None:
                self.journal.write(rec.request_id + "\n")

        return send

    async def job(self, job_id: int, job: WorkerJob) -> None:
        try:
            info = await self._job(job_id, job)
        except Exception as exc:  # noqa: BLE001 — the parent gets the reason and marks the share failed
            self.send(("error", job_id, f"{type(exc).__name__}: {exc}"[:500]))
            return
        finally:
            self.phase = None
        self.send(("done", job_id, info))

    async def _job(self, job_id: int, job: WorkerJob) -> JobInfo:
        client = self.client(job["client"])
        cpu0 = time.process_time()
        if job["kind"] == "warm":
            await warm_up(client, job["body"], job["timeout_s"])
            return {"cpu_s": time.process_time() - cpu0}
        send = self.record_sender(job_id, job.get("journal_dir"))
        if job["kind"] == "calibrate":
            records, lag = await calibration_records(client, job["body"], concurrency=job["concurrency"],
                                                     rounds=job["rounds"], timeout_s=job["timeout_s"],
                                                     start_ns=job["start_ns"], first_id=job["first_id"])
            for rec in records:
                send(rec)
            return {"cpu_s": time.process_time() - cpu0, "lag": cast(LoopLagDict, asdict(lag))}
        phase = _Phase(client, job["bodies"], name=job["name"], max_requests=job["max_requests"],
                       max_duration_s=job["max_duration_s"], request_timeout_s=job["request_timeout_s"], sink=send,
                       drain_s=job["drain_s"], start_ns=job["start_ns"], wall_ns=job["wall_ns"],
                       first_index=job["first_index"], index_step=job["index_step"])
        self.phase = phase
        lag_p99_ms = await _with_lag(phase, closed_loop_work(phase, job["offsets_s"]))
        return {"cpu_s": time.process_time() - cpu0, "lag_p99_ms": lag_p99_ms, "issued": phase.issued}


async def _serve(jobs: Connection, results: Connection) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    worker = _Worker(jobs, results)

    def readable() -> None:
        try:
            msg = jobs.recv()
        except (EOFError, OSError):
            msg = ("eof",)
            loop.remove_reader(jobs.fileno())
        inbox.put_nowait(msg)

    loop.add_reader(jobs.fileno(), readable)
    tasks: set[asyncio.Task[None]] = set()
    while True:
        msg = await inbox.get()
        if msg[0] == "eof":
            os._exit(0)  # the parent died: stop loading its target at once
        if msg[0] == "exit":
            break
        if msg[0] == "stop" and worker.phase is not None:
            worker.phase.stopped = True
        elif msg[0] == "job":
            job: WorkerJob = {**msg[2]}
            task = asyncio.create_task(worker.job(msg[1], job))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    loop.remove_reader(jobs.fileno())
    for task in list(tasks):
        task.cancel()
    for c in worker.clients.values():
        await c.aclose()
