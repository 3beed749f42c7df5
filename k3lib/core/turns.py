"""Turns on an event loop: work that would hold the loop for long lets one waiter through per loop iteration.

A timer or a socket read that becomes due while hundreds of tasks are ready waits for all of them: asyncio runs
every callback that was ready when an iteration began before it looks at its timers and sockets again. Work that
takes a turn (`await turns.turn()`) runs one piece per iteration instead, so whatever is due in between waits for
one piece at most. The emulator's front end and its streams' output take turns so that its engine steps keep
their deadlines; the kit's client decodes a finished stream in turns so that the other streams' reads keep their
arrival marks.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque


class Turns:
    """First come, first served, one turn granted per loop iteration. A waiter that went away (cancelled) gives
    its turn up. One instance serves the loop it is first used on."""

    def __init__(self) -> None:
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._granting = False

    async def turn(self) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting.append(fut)
        if not self._granting:
            self._granting = True
            loop.call_soon(self._grant, loop)
        await fut

    def _grant(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():  # a caller that went away gives up its turn
                fut.set_result(None)
                break
        if self._waiting:
            loop.call_soon(self._grant, loop)
        else:
            self._granting = False


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Turns] = weakref.WeakKeyDictionary()


def loop_turns() -> Turns:
    """The running loop's shared `Turns` (one queue for everything on that loop that takes turns through it)."""
    loop = asyncio.get_running_loop()
    turns = _per_loop.get(loop)
    if turns is None:
        turns = _per_loop[loop] = Turns()
    return turns
