"""Blocking use of the async client from notebook cells and scripts: `run_sync` (also inside a running Jupyter
kernel) and `SyncChatClient`, which owns a private event loop thread.

Both are interruptible: a KeyboardInterrupt (a terminal's Ctrl-C, JupyterLab's interrupt button, the batch's stop)
or any other exception raised in the waiting thread cancels the coroutine on its loop — its requests in flight are
cancelled and their connections closed — and waits up to `STOP_GRACE_S` for that to finish before re-raising.
Waiting on a thread pool instead (`with ThreadPoolExecutor(): ….result()`) would join the pool on the way out and
let a load phase run to its end after the operator said stop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from k3lib.io.shapes import ChatMessage

from .chat import ChatClient
from .records import ChatRecord, ProbeRecord, TokenizeResult

T = TypeVar("T")

#: After an interrupt, how long the caller waits for the cancelled coroutine to unwind (requests cancelled,
#: connections closed, worker processes told to exit) before the interrupt is re-raised regardless.
STOP_GRACE_S = 3.0


# ---------------------------------------------------------------------------------------------------------
# Sync convenience for notebooks
# ---------------------------------------------------------------------------------------------------------


def _guarded(awaitable: Awaitable[T], done: threading.Event) -> Coroutine[Any, Any, T]:
    async def run() -> T:
        try:
            return await awaitable
        finally:
            done.set()
    return run()


def _wait(fut: "concurrent.futures.Future[T]", done: threading.Event) -> T:
    """The future's result; an exception raised while waiting (KeyboardInterrupt) cancels the coroutine behind it
    and waits, bounded, for it to unwind."""
    try:
        return fut.result()
    except BaseException:
        if not fut.done():
            fut.cancel()  # cancels the task on its loop (run_coroutine_threadsafe chains the two)
            done.wait(STOP_GRACE_S)
        raise


class _LoopThread:
    """A private event loop in a daemon thread: works whether or not the caller's thread runs a loop (Jupyter)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="k3lib-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        done = threading.Event()
        return _wait(asyncio.run_coroutine_threadsafe(_guarded(coro, done), self.loop), done)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        # as asyncio.run does: what is still running is cancelled, and what clients opened on this loop is closed
        # on it (client.loops), before it stops
        async def finish() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.loop.shutdown_asyncgens()
        try:
            asyncio.run_coroutine_threadsafe(finish(), self.loop).result(timeout=10)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


class _Cancellable:
    """One coroutine on a fresh loop in a daemon thread (`asyncio.run`), cancellable from any thread, even before
    it has started."""

    def __init__(self, awaitable: Awaitable[T]) -> None:
        self.awaitable = awaitable
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False

    async def _main(self) -> Any:
        with self._lock:
            if self._cancelled:
                if asyncio.iscoroutine(self.awaitable):
                    self.awaitable.close()  # never started: no "coroutine was never awaited" warning
                raise asyncio.CancelledError
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        return await self.awaitable

    def _thread(self) -> None:
        try:
            # asyncio.run's end cancels every task left and closes the loop's async generators (client.loops)
            self.future.set_result(asyncio.run(self._main()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self.future.set_exception(exc)
        finally:
            self.done.set()

    def start(self) -> "_Cancellable":
        threading.Thread(target=self._thread, name="k3lib-sync", daemon=True).start()
        return self

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop closed meanwhile: nothing left to cancel
                pass


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous code, including inside a running Jupyter kernel.

    It runs on a private loop in a daemon thread whatever the caller's thread runs; an interrupt of the caller
    (KeyboardInterrupt) cancels it — requests in flight included — and is re-raised once it has unwound
    (at most `STOP_GRACE_S`)."""
    job = _Cancellable(awaitable).start()
    try:
        return job.future.result()  # type: ignore[no-any-return]
    except BaseException:
        if not job.future.done():
            job.cancel()
            job.done.wait(STOP_GRACE_S)
        raise


class SyncChatClient:
    """Blocking facade over `ChatClient` for notebook cells; owns a private loop thread, close it when done."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        self.client = ChatClient(base_url, **kwargs)
        self._loop: _LoopThread | None = None

    def __repr__(self) -> str:
        return f"Sync{self.client!r}"

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run any coroutine using `self.client` on the private loop (e.g. a load phase)."""
        if self._loop is None:
            self._loop = _LoopThread()
        return self._loop.run(coro)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatRecord:
        return self.run(self.client.chat(messages, **kwargs))

    def chat_body(self, body: Mapping[str, Any], **kwargs: Any) -> ChatRecord:
        return self.run(self.client.chat_body(body, **kwargs))

    def probe(self, path: str, **kwargs: Any) -> ProbeRecord:
        return self.run(self.client.probe(path, **kwargs))

    def get_json(self, path: str, **kwargs: Any) -> Any:
        return self.run(self.client.get_json(path, **kwargs))

    def tokenize(self, **kwargs: Any) -> TokenizeResult:
        return self.run(self.client.tokenize(**kwargs))

    def close(self) -> None:
        if self._loop is not None:
            self._loop.run(self.client.aclose())
            self._loop.close()
            self._loop = None

    def __enter__(self) -> SyncChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
