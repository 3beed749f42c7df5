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
a spread phase or calibration (the jobs, and the summary over every worker's records) the functions at its end.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .calibration import (DEFAULT_MAX_ERROR_MS, CalibrationReport, LoopLagReport, assess, calibration_body,
                          calibration_dict, calibration_timeout_s)
from .client import ChatClient, ChatRecord
from ..core import progress
from ..core.errors import BadInputError
from .load import CANCEL_GRACE_S, _Phase
from .workerproc import ClientSettings, JobInfo, WorkerJob

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
class WorkerOutcome:
    """How one worker's share of a job ended: "done", "error" (the job raised) or "gone" (the process ended)."""

    worker: int
    status: str = "running"
    info: JobInfo = field(default_factory=lambda: JobInfo())
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
        return await spread_phase(self, client, bodies, **phase)

    def stop(self) -> None:
        """Ask every worker to send no new request in the running job (those in flight finish)."""
        for h in self._handles:
            if not h.gone:
                try:
                    h.jobs.send(("stop", self._job))
                except OSError:
                    pass

    async def run(self, jobs: Sequence[WorkerJob], on_record: Callable[[int, ChatRecord], None], *,
                  timeout_s: float, started_ns: int | None = None) -> list[WorkerOutcome]:
        """One job per worker (`jobs[w]` to worker `w`); each record to `on_record(w, record)` on this loop as it
        arrives. Returns when every worker has ended its job, or after `timeout_s` (the late ones are killed)."""
        if len(jobs) > self.size:
            raise ValueError(f"{len(jobs)} jobs for {self.size} workers")
        if not self._handles or any(h.gone for h in self._handles):
            await self.astart()  # a worker that died in an earlier job is replaced
        loop = asyncio.get_running_loop()
        self._job += 1
        job_id = self._job
        outcomes = [WorkerOutcome(w) for w in range(len(jobs))]
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


# -- the parent's side of a phase or a calibration spread over the pool's workers ------------------------------

#: a spread phase starts this long after its jobs are sent, so that every worker has its job before the start
START_MARGIN_S = 0.25
#: beyond a phase's own bounds (deadline, drain, cancel grace), how long the parent waits for a worker's end
END_GRACE_S = 20.0


def degraded_reason(outcomes: Sequence[WorkerOutcome], what: str = "phase") -> str | None:
    """Why a spread phase sent less than planned: each worker that ended before its share did, and what was kept."""
    parts = []
    n = len(outcomes)
    for o in outcomes:
        if o.status == "done":
            continue
        if o.status == "error":
            how = f"failed ({o.error})"
        elif o.error:
            how = o.error
        elif o.returncode is not None and o.returncode < 0:
            try:
                name = signal.Signals(-o.returncode).name
            except ValueError:
                name = "?"
            how = f"was killed by signal {-o.returncode} ({name})"
        else:
            how = f"exited with code {o.returncode}"
        after = f" {o.gone_after_s:.1f} s into the {what}" if o.gone_after_s is not None else ""
        parts.append(f"load worker {o.worker + 1} of {n} {how}{after}: its {o.records} finished records were "
                     "received and kept; its requests in flight were lost and its streams sent nothing after")
    return "; ".join(parts) or None


async def spread_phase(pool: WorkerPool, client: ChatClient, bodies: Any, *,
                       offsets_s: Sequence[float], name: str, kind: str, max_requests: int, max_duration_s: float,
                       drain_s: float, request_timeout_s: float, sink: Any, window_s: float | None,
                       concurrency: int | None, planned: int) -> Any:
    """A closed-loop load phase (k3lib.io.load), one stream per start offset in `offsets_s`, sent by the pool's
    worker processes; the summary is the parent's, over every record."""
    # the phase's own checks, before any process is touched
    _Phase(client, bodies, name=name, max_requests=max_requests, max_duration_s=max_duration_s,
           request_timeout_s=request_timeout_s, sink=None, drain_s=drain_s)
    settings = ClientSettings.of(client)
    try:
        pickle.dumps(bodies)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise BadInputError(f"a phase spread over worker processes needs bodies that pickle (a list, or an instance "
                            f"of a module-level class): {exc}", field="bodies") from None
    n = max(1, min(pool.size, len(offsets_s)))
    perf, wall = time.perf_counter_ns(), time.time_ns()
    start_ns = perf + int(START_MARGIN_S * 1e9)
    phase = _Phase(client, bodies, name=name, max_requests=max_requests, max_duration_s=max_duration_s,
                   request_timeout_s=request_timeout_s, sink=sink, drain_s=drain_s, start_ns=start_ns,
                   wall_ns=wall + (start_ns - perf))
    jobs: list[WorkerJob] = [
        {"kind": "phase", "client": settings, "bodies": bodies, "name": name, "max_requests": max_requests,
         "max_duration_s": max_duration_s, "drain_s": drain_s, "request_timeout_s": request_timeout_s,
         "start_ns": start_ns, "wall_ns": phase.wall_ns, "first_index": w, "index_step": n,
         "offsets_s": list(offsets_s[w::n])}
        for w in range(n)]

    def on_record(w: int, rec: ChatRecord) -> None:
        had = phase.sink_error
        progress.tick(url=rec.url)  # a worker's request ended: it counts in this process' running axis
        phase.deliver(rec)
        if (had is None and phase.sink_error is not None) or progress.over():
            pool.stop()  # a sink that failed, or more requests than the plan the operator consented to

    cpu0 = time.process_time()
    outcomes = await pool.run(jobs, on_record, started_ns=start_ns, timeout_s=START_MARGIN_S + max_duration_s
                              + drain_s + 3 * CANCEL_GRACE_S + END_GRACE_S)
    parent_cpu = time.process_time() - cpu0
    lags = tuple(o.info.get("lag_p99_ms") for o in outcomes)
    worst = max((x for x in lags if x is not None), default=None)
    summary = phase.summary(kind=kind, concurrency=concurrency, planned=planned,
                            lag_ms_p99=worst, window_s=window_s)
    return replace(summary, client_cpu_s=parent_cpu + sum(o.info.get("cpu_s", 0.0) for o in outcomes), workers=n,
                   worker_loop_lag_ms_p99=lags, degraded=degraded_reason(outcomes))


def _shares(total: int, n: int) -> list[int]:
    return [total // n + (1 if w < total % n else 0) for w in range(n)]


async def calibrate_workers(pool: WorkerPool, url: str, *, concurrency: int, known_ttft_ms: float,
                            known_itl_ms: float, chunks: int = 20, tokens_per_chunk: int = 2, rounds: int = 1,
                            max_error_ms: float = DEFAULT_MAX_ERROR_MS,
                            connect_timeout_s: float = 5.0) -> CalibrationReport:
    """`calibrate` with the streams spread over the pool's workers as a load phase spreads them, from one start
    instant: judged per worker (its share, its own loop lag) and for the whole (every record; the worst worker's
    loop lag), valid only when the whole and every worker are."""
    n = max(1, min(pool.size, concurrency))
    body = calibration_body(None, known_ttft_ms=known_ttft_ms, known_itl_ms=known_itl_ms, chunks=chunks,
                            tokens_per_chunk=tokens_per_chunk)
    timeout_s = calibration_timeout_s(known_ttft_ms, known_itl_ms, chunks)
    settings = ClientSettings(url, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, keep_raw=True)
    shares = _shares(concurrency, n)
    base: WorkerJob = {"client": settings, "body": body, "timeout_s": timeout_s}
    await pool.run([{**base, "kind": "warm"}] * n, lambda w, r: None, timeout_s=timeout_s + END_GRACE_S)
    per: list[list[ChatRecord]] = [[] for _ in range(n)]
    start_ns = time.perf_counter_ns() + int(START_MARGIN_S * 1e9)
    jobs: list[WorkerJob] = [{**base, "kind": "calibrate", "concurrency": shares[w], "rounds": rounds,
                              "start_ns": start_ns, "first_id": sum(shares[:w])} for w in range(n)]
    outcomes = await pool.run(jobs, lambda w, r: per[w].append(r), started_ns=start_ns,
                              timeout_s=START_MARGIN_S + timeout_s * rounds + END_GRACE_S)
    empty = LoopLagReport(duration_s=0.0, interval_ms=0.0, samples=0, p50_ms=None, p99_ms=None, max_ms=None)
    lags = [LoopLagReport(**o.info["lag"]) if o.info.get("lag") else empty for o in outcomes]
    judge = partial(assess, url=settings.base_url, known_ttft_ms=known_ttft_ms, known_itl_ms=known_itl_ms,
                    chunks=chunks, tokens_per_chunk=tokens_per_chunk, max_error_ms=max_error_ms)
    reports = [judge(per[w], concurrency=shares[w], loop_lag=lags[w]) for w in range(n)]
    worst = max(lags, key=lambda r: -1.0 if r.p99_ms is None else r.p99_ms)
    whole = judge([r for rs in per for r in rs], concurrency=concurrency, loop_lag=worst)
    reasons = [] if whole.valid else [whole.reason]
    lost = degraded_reason(outcomes, "calibration")
    if lost:
        reasons.append(lost)
    reasons += [f"worker {w + 1} of {n} ({shares[w]} streams): {r.reason}" for w, r in enumerate(reports)
                if not r.valid]
    return replace(whole, workers=n, per_worker=tuple(calibration_dict(r) for r in reports), valid=not reasons,
                   reason="; ".join(reasons) or f"client timing error within bound in each of {n} workers")
