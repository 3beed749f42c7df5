"""Load over worker processes: a phase's streams spread over `load.workers` processes, each with its own event loop
and client, all on one start instant and one clock, every finished record sent to the parent as it finishes.

One asyncio loop is one core: past a few hundred streams its own work (reading, parsing, marking arrivals) makes
the client's timing error exceed the calibration bound however many cores the host has. A `WorkerPool` holds
plain interpreters (`python -c`, as the known-timing server: multiprocessing's spawn would re-import a script's or
notebook's `__main__`) that each run their share of a phase with the same code as a one-process phase
(`k3lib.io.load.closed_loop_work` on a `_Phase` given the shared start instant). The clock is the host's monotonic
clock, which `time.perf_counter_ns` reads in every process, so records of all workers share one time axis; ramp
offsets are taken from the one schedule of the whole phase (worker `w` of `n` has the streams `w, w+n, …`, and the
request indices `w, w+n, …` up to `max_requests`).

Transport: per worker, two OS pipes carrying `multiprocessing.connection.Connection` frames (length-prefixed
pickles), results read in the parent by one thread per worker. A frame is written by `os.write` straight into the
kernel's pipe buffer, with no queue or feeder thread in the worker, so a record the worker has sent survives the
worker being killed with -9 (multiprocessing.Queue's feeder thread would lose what it still buffers); figures
that chose it over pyzmq in docs/benchmarks.md ("Load over worker processes", `benchmarks/worker_transport.py`). A worker
whose parent dies sees its job pipe close and exits at once: a killed kit leaves no load running.

The pool and its transport are here; the worker process's side is `k3lib.io.workerproc`, and the parent's side of
a spread phase or calibration (the jobs, and the summary over every worker's records) `k3lib.io.spread`.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from . import spread
from .client import ChatClient, ChatRecord
from ..core.errors import BadInputError

#: the most worker processes a phase may use (`load.workers`)
WORKERS_MAX = 64
READY_TIMEOUT_S = 60.0


def available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers() -> int:
    """One worker per core available to this process, leaving one for the kit (the parent, the samplers)."""
    return max(1, available_cpus() - 1)


def resolve_workers(value: int | None) -> int:
    """`load.workers` as a count: None means `default_workers()`; out of bounds is one clear error."""
    if value is None:
        return default_workers()
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= WORKERS_MAX:
        raise BadInputError(f"load.workers must be an integer from 1 to {WORKERS_MAX}, got {value!r}",
                            field="load.workers")
    return value



@dataclass
class Outcome:
    """How one worker's share of a job ended: "done", "error" (the job raised) or "gone" (the process ended)."""

    worker: int
    status: str = "running"
    info: dict[str, Any] = field(default_factory=dict)
    records: int = 0
    returncode: int | None = None
    gone_after_s: float | None = None
    error: str | None = None


class _Handle:
    def __init__(self, index: int, proc: subprocess.Popen[bytes], jobs: Connection, results: Connection) -> None:
        self.index, self.proc, self.jobs, self.results = index, proc, jobs, results
        self.reader: threading.Thread | None = None
        self.gone = False


class WorkerPool:
    """`size` worker processes, started once and used by phase after phase (their clients keep their connections).
    Blocking `start`/`close` (or `astart`/`aclose` from async code); `run` one job per worker at a time.

    `journal_dir`, when set, makes each worker append the request id of every record it has handed to the pipe to
    `worker-<pid>.ids` there: what a worker sent, written by the worker itself (an audit of the transport)."""

    def __init__(self, size: int, *, journal_dir: str | Path | None = None) -> None:
        self.size = resolve_workers(size)
        self.journal_dir = None if journal_dir is None else str(journal_dir)
        self._handles: list[_Handle] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_message: Callable[[_Handle, tuple[Any, ...]], None] | None = None
        self._job = 0

    @property
    def pids(self) -> list[int]:
        return [h.proc.pid for h in self._handles]

    # -- processes -------------------------------------------------------------------------------------------
    def _spawn(self, index: int) -> _Handle:
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        code = "import sys; from k3lib.io.workerproc import worker_main; worker_main(sys.argv[1:])"
        try:
            proc = subprocess.Popen([sys.executable, "-c", code, str(job_r), str(res_w)], pass_fds=(job_r, res_w),
                                    stdin=subprocess.DEVNULL, env=env)
        finally:
            os.close(job_r)
            os.close(res_w)
        return _Handle(index, proc, Connection(job_w, readable=False), Connection(res_r, writable=False))

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> WorkerPool:
        with self._lock:
            fresh = [i for i in range(self.size) if i >= len(self._handles) or self._handles[i].gone]
            spawned = {i: self._spawn(i) for i in fresh}
            deadline = time.monotonic() + timeout_s
            for i, h in spawned.items():
                if not h.results.poll(max(0.0, deadline - time.monotonic())):
                    h.proc.kill()
                    raise RuntimeError(f"load worker {i + 1} did not start within {timeout_s:.0f} s")
                try:
                    msg = h.results.recv()
                except EOFError:
                    raise RuntimeError(f"load worker {i + 1} exited at start (code {h.proc.wait()})") from None
                if msg[0] != "ready":
                    raise RuntimeError(f"load worker {i + 1} sent {msg[0]!r} instead of ready")
                h.reader = threading.Thread(target=self._read, args=(h,), name=f"k3lib-worker-{i + 1}", daemon=True)
                h.reader.start()
                if i < len(self._handles):
                    self._handles[i] = h
                else:
                    self._handles.append(h)
        return self

    async def astart(self, timeout_s: float = READY_TIMEOUT_S) -> WorkerPool:
        return await asyncio.to_thread(self.start, timeout_s)

    def close(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, []
        for h in handles:
            try:
                h.jobs.send(("exit",))
            except OSError:
                pass
            h.jobs.close()
        for h in handles:
            try:
                h.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                h.proc.kill()
                h.proc.wait(timeout=5)
            if h.reader is not None:
                h.reader.join(timeout=5)
            h.results.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, h: _Handle) -> None:
        """One thread per worker: each frame to the running job, in order; then the process's end."""
        while True:
            try:
                msg = h.results.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                break
            self._post(h, msg)
        h.gone = True
        at = time.perf_counter_ns()
        self._post(h, ("gone", h.proc.wait(), at))

    def _post(self, h: _Handle, msg: tuple[Any, ...]) -> None:
        loop, handler = self._loop, self._on_message
        if loop is not None and handler is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(handler, h, msg)
            except RuntimeError:  # the loop closed meanwhile
                pass

    # -- jobs ------------------------------------------------------------------------------------------------
    async def spread_phase(self, client: ChatClient, bodies: Any, **phase: Any) -> Any:
        """What `k3lib.io.load`'s phases call with `workers=pool`: the phase over this pool's processes."""
        return await spread.spread_phase(self, client, bodies, **phase)

    def stop(self) -> None:
        """Ask every worker to send no new request in the running job (those in flight finish)."""
        for h in self._handles:
            if not h.gone:
                try:
                    h.jobs.send(("stop", self._job))
                except OSError:
                    pass

    async def run(self, jobs: Sequence[Mapping[str, Any]], on_record: Callable[[int, ChatRecord], None], *,
                  timeout_s: float, started_ns: int | None = None) -> list[Outcome]:
        """One job per worker (`jobs[w]` to worker `w`); each record to `on_record(w, record)` on this loop as it
        arrives. Returns when every worker has ended its job, or after `timeout_s` (the late ones are killed)."""
        if len(jobs) > self.size:
            raise ValueError(f"{len(jobs)} jobs for {self.size} workers")
        if not self._handles or any(h.gone for h in self._handles):
            await self.astart()  # a worker that died in an earlier job is replaced
        loop = asyncio.get_running_loop()
        self._job += 1
        job_id = self._job
        outcomes = [Outcome(w) for w in range(len(jobs))]
        ended = asyncio.Event()
        t0 = started_ns or time.perf_counter_ns()

        def handle(h: _Handle, msg: tuple[Any, ...]) -> None:
            w = h.index
            if w >= len(outcomes) or self._handles[w] is not h:  # an earlier process in that seat
                return
            o = outcomes[w]
            kind = msg[0]
            if kind == "rec" and msg[1] == job_id:
                o.records += 1
                on_record(w, msg[2])
            elif kind in ("done", "error") and msg[1] == job_id and o.status == "running":
                o.status = kind
                o.info = msg[2] if kind == "done" else {}
                o.error = msg[2] if kind == "error" else None
            elif kind == "gone" and o.status == "running":
                o.status, o.returncode, o.gone_after_s = "gone", msg[1], max(0.0, (msg[2] - t0) / 1e9)
            if all(x.status != "running" for x in outcomes):
                ended.set()

        self._loop, self._on_message = loop, handle
        try:
            for w, job in enumerate(jobs):
                h = self._handles[w]
                try:
                    h.jobs.send(("job", job_id, {**job, "journal_dir": self.journal_dir}))
                except OSError:
                    handle(h, ("gone", h.proc.poll(), time.perf_counter_ns()))
            try:
                await asyncio.wait_for(ended.wait(), timeout=timeout_s)
            except TimeoutError:
                for o in outcomes:
                    if o.status == "running":
                        self._handles[o.worker].proc.kill()
                        o.status, o.error = "gone", f"did not end its job within {timeout_s:.0f} s and was killed"
            # the frames a dead worker wrote before it died are already queued on this loop ahead of its "gone"
            await asyncio.sleep(0)
        finally:
            self._on_message = None
        return outcomes
