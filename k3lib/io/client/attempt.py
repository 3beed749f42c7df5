"""One request while it runs (`_Attempt`, frozen into a `ChatRecord` at the end), the timing path that reads a
streamed body (`_read_stream`), and the one table mapping both HTTP stacks' transport errors to the kit's errors."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx

from k3lib.core.errors import APIError, ProtocolError, TargetUnreachable
from k3lib.core.turns import loop_turns
from k3lib.io.shapes import AskedFields

from .records import ChatRecord, RecordError, RecordFields
from .stream import StreamAssembler

# ---------------------------------------------------------------------------------------------------------
# One request while it runs
# ---------------------------------------------------------------------------------------------------------

@dataclass
class _Attempt:
    """Mutable state of one request while it runs; frozen into a ChatRecord at the end."""

    rid: str
    url: str
    stream: bool
    wall_anchor: int
    perf_anchor: int
    enqueued: int
    sent_ns: int | None = None
    #: the first body bytes were handed to the socket (`sent_ns` was moved there)
    body_sent: bool = False
    #: the streamed body ended (`done_ns` is its end) and its reads still wait to be decoded (`settle`)
    unsettled: bool = False
    first_byte_ns: int | None = None
    done_ns: int | None = None
    connect_start_ns: int | None = None
    connect_ms: float | None = None
    http_status: int | None = None
    raw_json: Any = None
    fields: RecordFields = field(default_factory=lambda: RecordFields())
    assembler: StreamAssembler = field(default_factory=StreamAssembler)
    error: RecordError = field(default_factory=lambda: RecordError())
    asked: AskedFields | None = None

    def fail(self, kind: str, message: str, *, cancelled: bool = False, api_error: APIError | None = None) -> None:
        if self.error:  # keep the first cause
            return
        self.error = {"error": message, "error_kind": kind, "cancelled": cancelled}
        if api_error is not None:
            self.error["api_error_type"] = api_error.type
            self.error["api_error_param"] = api_error.param
        if self.done_ns is None:
            self.done_ns = time.perf_counter_ns()

    #: reads decoded per turn when a finished stream settles: ~50 µs of work at one event a read
    SETTLE_READS = 8

    async def settle(self) -> None:
        """Decode a finished stream's reads, a few per loop iteration (`k3lib.core.turns`), then check its end.

        Decoding all of a stream's events at once holds the loop ~0.3 ms per 50 events; with 64 streams ending
        together the last ones' final chunks got arrival marks 13-22 ms late (their ITL and delivery error). In
        turns, a read that arrives meanwhile waits for one slice at most. Runs outside the request's deadline:
        the body was complete when it ended (`done_ns`), and decoding it later changes no mark."""
        if not self.unsettled:
            return
        asm, turns = self.assembler, loop_turns()
        while asm.pending:
            await turns.turn()
            asm.drain(url=self.url, status=self.http_status or 0, limit=self.SETTLE_READS)
        self.settle_now()

    def settle_now(self) -> None:
        """Decode what is left of a finished stream at once; ProtocolError if it ended without `[DONE]`."""
        if not self.unsettled:
            return
        self.unsettled = False
        asm = self.assembler
        assert self.done_ns is not None
        asm.finish(self.done_ns, url=self.url, status=self.http_status or 0)
        if not asm.done:
            raise ProtocolError(f"stream from {self.url} ended without `data: [DONE]` after "
                                f"{asm.chunk_count} events — truncated reply or server crash")

    def build(self, keep_raw: bool) -> ChatRecord:
        fields = self.fields.copy()
        if self.stream:
            if self.assembler.pending:  # reads not decoded yet (the request ended outside the read loop)
                try:
                    self.assembler.drain(url=self.url, status=self.http_status or 0)
                except (ProtocolError, APIError):
                    pass  # the record keeps the events before it; the request's own failure is recorded
            fields.update(self.assembler.record_fields())
        if not keep_raw:
            fields["raw_lines"] = ()
        return ChatRecord(request_id=self.rid, url=self.url, stream=self.stream, wall_anchor_ns=self.wall_anchor,
                          perf_anchor_ns=self.perf_anchor, enqueued_ns=self.enqueued, sent_ns=self.sent_ns,
                          first_byte_ns=self.first_byte_ns, done_ns=self.done_ns, connect_ms=self.connect_ms,
                          http_status=self.http_status, raw_json=self.raw_json if keep_raw else None,
                          asked=self.asked, **fields, **self.error)



def _mark_reply(state: _Attempt, pre_send_ns: int, status: int) -> None:
    # a transport without tracing (MockTransport) still needs marks
    now = time.perf_counter_ns()
    if state.sent_ns is None:
        state.sent_ns = pre_send_ns
    if state.first_byte_ns is None:
        state.first_byte_ns = now
    state.http_status = status


#: The transport errors of both HTTP stacks the chat path runs on (aiohttp; httpx when given a transport), mapped
#: to the kit's errors by one table: `_send_failure` before the reply's headers, `_broken` after them.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, httpx.HTTPError)
#: the connect timeout (the request deadline is the kit's own, not the library's)
_CONNECT_TIMEOUTS: tuple[type[BaseException], ...] = (aiohttp.ServerTimeoutError, httpx.TimeoutException)
_NO_CONNECTION: tuple[type[BaseException], ...] = (aiohttp.ClientConnectorError, httpx.ConnectError,
                                                   httpx.UnsupportedProtocol)


def _send_failure(state: _Attempt, exc: BaseException) -> TargetUnreachable | ProtocolError:
    """A transport error while sending or waiting for the headers, whichever library raised it."""
    if isinstance(exc, _CONNECT_TIMEOUTS):
        return TargetUnreachable(f"timed out connecting to {state.url}: {exc}")
    if isinstance(exc, _NO_CONNECTION):
        return TargetUnreachable(f"cannot connect to {state.url}: {exc} — is the server up?")
    if state.first_byte_ns is None:
        return TargetUnreachable(f"no reply from {state.url}: {type(exc).__name__}: {exc}")
    return ProtocolError(f"broken reply from {state.url}: {type(exc).__name__}: {exc}")


def _broken(state: _Attempt, exc: BaseException) -> ProtocolError:
    state.done_ns = time.perf_counter_ns()
    return ProtocolError(f"connection to {state.url} broke mid-reply after {state.assembler.chunk_count} "
                         f"events: {type(exc).__name__}: {exc}")


async def _read_stream(read_piece: Callable[[], Awaitable[bytes]], state: _Attempt, status: int, *,
                       clock: Callable[[], int] = time.perf_counter_ns, settle_later: bool = False) -> None:
    """The timing path: each read gets its arrival mark and waits, undecoded, for the end of the body; then the
    reads are decoded (`settle_later`: by the caller's `state.settle()`, in turns, outside its deadline).

    Our own SSE framing (StreamAssembler) has no line-length cap, so a multi-MB event (1M-token prompt echo,
    huge tool arguments) is assembled whole instead of hitting a fixed read buffer (vllm#39963).
    """
    asm = state.assembler
    arrived = asm.arrived
    url = state.url
    try:
        while piece := await read_piece():
            if arrived(piece, clock()):
                asm.drain(url=url, status=status)
    except (ProtocolError, APIError):
        state.done_ns = clock()
        raise
    except BaseException as exc:
        # a broken connection, the deadline or a cancel: decode what arrived before it, for the partial record;
        # a bad event among that was the first failure, as it was when events were decoded on arrival
        try:
            asm.drain(url=url, status=status)
        except (ProtocolError, APIError) as first:
            state.done_ns = clock()
            if isinstance(exc, Exception):
                raise first from exc
            state.fail(type(first).__name__, str(first), api_error=first if isinstance(first, APIError) else None)
        raise
    state.done_ns = clock()
    state.unsettled = True
    if not settle_later:
        state.settle_now()


# aiohttp trace hooks (`ChatClient._session`): the attempt's connection and send marks
async def _on_connect_start(session: Any, ctx: Any, params: Any) -> None:
    ctx.trace_request_ctx.connect_start_ns = time.perf_counter_ns()


async def _on_connection(session: Any, ctx: Any, params: Any) -> None:
    # a new or reused connection is in hand: the request headers go onto the wire now
    t = time.perf_counter_ns()
    state = ctx.trace_request_ctx
    if state.connect_start_ns is not None and state.connect_ms is None:
        state.connect_ms = (t - state.connect_start_ns) / 1e6
    if state.sent_ns is None:
        state.sent_ns = t


async def _on_body_sent(session: Any, ctx: Any, params: Any) -> None:
    # aiohttp holds the headers back and writes them with the body, from a task of their own that runs only when
    # this loop comes round again: with many requests started together that is milliseconds after the connection
    # was in hand. The first body write is when the request really goes onto the wire, so it moves the mark.
    state = ctx.trace_request_ctx
    if not state.body_sent:
        state.body_sent = True
        state.sent_ns = time.perf_counter_ns()
