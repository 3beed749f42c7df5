"""Blocking use of the async client from notebook cells and scripts: `run_sync` (also inside a running Jupyter
kernel) and `SyncChatClient`, which owns a private event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from .chat import ChatClient
from .records import ChatRecord, ProbeRecord, TokenizeResult

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------------------
# Sync convenience for notebooks
# ---------------------------------------------------------------------------------------------------------


class _LoopThread:
    """A private event loop in a daemon thread: works whether or not the caller's thread runs a loop (Jupyter)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="k3lib-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except KeyboardInterrupt:
            # a notebook interrupt cancels the work on the private loop instead of leaving it running
            fut.cancel()
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        # as asyncio.run does: what clients opened on this loop is closed on it before it stops (client.loops)
        try:
            asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop).result(timeout=10)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous code, including inside a running Jupyter kernel."""
    async def _wrap() -> T:
        return await awaitable
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_wrap())
    # a loop already runs on this thread (Jupyter): asyncio.run would fail, so use a private thread
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="k3lib-sync") as pool:
        return pool.submit(asyncio.run, _wrap()).result()


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

    def chat(self, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> ChatRecord:
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
