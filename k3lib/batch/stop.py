"""Stopping a batch: SIGINT or SIGTERM ends every notebook's load within seconds and keeps what finished.

The batch's notebooks run in kernels that jupyter_client starts in their own session, so a terminal's Ctrl-C
reaches only the `k3` process; left alone, a kernel would run its load phase to the end (a 30-minute soak) after
the operator said stop. `stop_signals()` turns SIGINT and SIGTERM into `Stopped` (a KeyboardInterrupt) in the main
thread; the batch then calls `halt()`, which interrupts every running kernel's process group (the cell's
`run_sync` cancels its requests in flight, see `k3lib.io.client.sync`) and kills what is left of it after
`KERNEL_GRACE_S` — load worker processes and the known-timing server included, as they share that group. A killed
kernel's sockets close, and vLLM aborts a request whose client went away.

A notebook stopped this way is neither adopted into the manifest nor recorded as a failing axis: `k3 validate
--resume RUN` runs it again, and keeps every axis that finished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any, Iterator

__all__ = ["KERNEL_GRACE_S", "Stopped", "halt", "register", "requested", "reset", "stop_signals", "unregister"]

#: after the interrupt, how long a kernel may take to unwind its cell before its process group is killed
KERNEL_GRACE_S = 2.0

_LOCK = threading.Lock()
_KERNELS: dict[int, Any] = {}  # id(kernel manager) → kernel manager, while its notebook runs
_STOP = threading.Event()


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the batch; `signal_name` says which, `exit_code` is 128 + its number."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


def _raise(signum: int, frame: Any) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Stopped` in the main thread while inside (outside the main thread: no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in before:
        signal.signal(s, _raise)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def reset() -> None:
    """A new batch starts: no stop requested."""
    _STOP.clear()


def requested() -> bool:
    """Whether `halt()` was called since the batch started (its notebooks then end as `interrupted`)."""
    return _STOP.is_set()


def register(km: Any) -> None:
    with _LOCK:
        _KERNELS[id(km)] = km


def unregister(km: Any) -> None:
    with _LOCK:
        _KERNELS.pop(id(km), None)


def _pgid(km: Any) -> int | None:
    """The kernel's process group (jupyter_client starts it in its own session: the group is its pid)."""
    prov = getattr(km, "provisioner", None)
    pgid = getattr(prov, "pgid", None)
    if isinstance(pgid, int) and pgid > 0:
        return pgid
    proc = getattr(prov, "process", None)
    pid = getattr(proc, "pid", None)
    return pid if isinstance(pid, int) and pid > 0 else None


def _signal_group(pgid: int, signum: int) -> bool:
    try:
        os.killpg(pgid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def halt(grace_s: float = KERNEL_GRACE_S) -> int:
    """Interrupt every running kernel's process group, then kill what is left of it after `grace_s`. Returns how
    many kernels were running. A second SIGINT/SIGTERM meanwhile is ignored: the stop is already under way."""
    _STOP.set()
    with _ignored_signals():
        with _LOCK:
            groups = [g for g in (_pgid(km) for km in _KERNELS.values()) if g is not None]
        for g in groups:
            _signal_group(g, signal.SIGINT)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with _LOCK:
                if not _KERNELS:
                    break  # every notebook unwound by itself (papermill shut its kernel down)
            time.sleep(0.05)
        for g in groups:
            _signal_group(g, signal.SIGKILL)
    return len(groups)


@contextlib.contextmanager
def _ignored_signals() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in before:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
