"""Closing what a client opened on an event loop, on that loop, before the loop ends.

An aiohttp session or an httpx client belongs to the loop it was made on and can be closed only there. A client
driven by `asyncio.run` (a notebook cell, `run_sync`, a load worker) often sees that loop end under it without an
`aclose`, and what it opened there then leaks its sockets ("Unclosed client session", "Unclosed connector").
A `LoopBound` ties a close to the loop's own end: before a loop stops, asyncio closes every async generator of it
still open (`loop.shutdown_asyncgens`, which `asyncio.run` calls), and a `LoopBound` is one, kept open until then
by this module (not by its owner, which may be dropped while the loop finishes). An owner dropped while the loop
runs has it closed at the loop's next turn.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable

# per loop, what is still open on it: held here so that only the loop's end or an explicit close closes it
_OPEN: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[AsyncGenerator[None, None]]] = \
    weakref.WeakKeyDictionary()
_CLOSING: set[asyncio.Task[None]] = set()


async def _closing(close: Callable[[], Awaitable[object]]) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await close()


async def _close(loop: asyncio.AbstractEventLoop, guard: AsyncGenerator[None, None]) -> None:
    try:
        await guard.aclose()
    finally:
        _OPEN.get(loop, set()).discard(guard)


def _close_soon(loop: asyncio.AbstractEventLoop, guard: AsyncGenerator[None, None]) -> None:
    # the owner is gone (called from the collector, in whichever thread): close on the guard's own loop
    def start() -> None:
        task = loop.create_task(_close(loop, guard))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)

    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop closed meanwhile; its end closed the guard if it could
            pass


class LoopBound:
    """`close()` run on the running loop once: at `aclose()`, soon after `owner` is dropped, or at the loop's end,
    whichever comes first. Nothing of it refers to `owner`."""

    def __init__(self, close: Callable[[], Awaitable[object]], owner: object) -> None:
        self.loop = asyncio.get_running_loop()
        self._guard = _closing(close)
        try:
            # the first step registers the generator with the running loop's hooks and stops at its `yield`
            self._guard.asend(None).send(None)
        except StopIteration:
            pass
        _OPEN.setdefault(self.loop, set()).add(self._guard)
        weakref.finalize(owner, _close_soon, self.loop, self._guard)

    async def aclose(self) -> None:
        """Close now (on the loop it was opened on)."""
        await _close(self.loop, self._guard)
