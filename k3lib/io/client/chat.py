"""The async chat client (`ChatClient`): one target, requests over aiohttp (httpx for probes, look-ups and a test's
transport), the API key read from the environment at each send and never stored; and its URL and auth helpers."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

import aiohttp
import httpx

from k3lib.core import progress
from k3lib.core.errors import APIError, ProtocolError, TargetUnreachable
from k3lib.core.guards import require_key_env
from k3lib.io.shapes import ChatBody, ChatMessage, ToolDef

from .access import _EnvBearerAuth, root_url, user_agent_headers
from .attempt import (TRANSPORT_ERRORS, _Attempt, _broken, _mark_reply, _on_body_sent, _on_connect_start,
                      _on_connection, _read_stream, _send_failure)
from .loops import LoopBound
from .records import BODY_TEXT_LIMIT_CHARS, ChatRecord, ProbeRecord, TokenizeResult, asked_of, record_of
from .stream import _try_json, completion_fields, parse_error_body

#: Connections per httpx pool; a client opens more pools as concurrency grows (see `ChatClient._pick_pool`).
POOL_CONNECTIONS = 16


class _TokenizeBody(TypedDict, total=False):
    """What vLLM's `/tokenize` is sent: a prompt, or messages (with tools) in the chat form."""

    model: str
    prompt: str
    messages: list[ChatMessage]
    add_generation_prompt: bool
    tools: list[ToolDef]


@dataclass
class _Pool:
    http: httpx.AsyncClient
    in_flight: int = 0


async def _close_pools(pools: list[_Pool]) -> None:
    for pool in pools:
        await pool.http.aclose()


class ChatClient:
    """Async chat client for one target. Cheap to share between thousands of concurrent requests.

    The API key is read from the environment variable *named* `api_key_env` at each send; the value is never
    stored, logged or put in a record. The httpx client is created per event loop, so one `ChatClient` can be
    driven by a notebook's loop and by `run_sync`'s private loop without sharing connections across loops; what
    it opened on a loop is closed on that loop when it ends (k3lib.io.client.loops), `aclose` or not.
    Chat requests go over aiohttp (its C parser is what keeps a streamed event cheap); probes and look-ups,
    and chat too when an httpx `transport` is given (tests' MockTransport), over httpx.
    """

    def __init__(self, base_url: str, *, model: str | None = None, api_key_env: str | None = None,
                 timeout_s: float = 600.0, connect_timeout_s: float = 10.0, max_connections: int = 2048,
                 keep_raw: bool = True, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = root_url(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_connections = max_connections
        self.keep_raw = keep_raw
        self._transport = transport
        self._auth = _EnvBearerAuth(api_key_env) if api_key_env else None
        if api_key_env is not None:
            require_key_env(api_key_env, field="api_key_env")
        self._pool_list: list[_Pool] = []
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._pool_closer: LoopBound | None = None
        self._ssl_context: Any = None
        self._aio: aiohttp.ClientSession | None = None
        self._aio_loop: asyncio.AbstractEventLoop | None = None
        self._aio_closer: LoopBound | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._counter = 0
        self.kept: list[ChatRecord] | None = None  # every record ended once `keep_records` was called

    def keep_records(self) -> list[ChatRecord]:
        """From now on keep every chat record this client ends, the failed ones too (a class' counters reconciled
        with the server's, k3lib.io.crosscheck); the list they land in."""
        self.kept = [] if self.kept is None else self.kept
        return self.kept

    def __repr__(self) -> str:
        return (f"ChatClient(base_url={self.base_url!r}, model={self.model!r}, "
                f"api_key_env={self.api_key_env!r})")

    def with_base_url(self, base_url: str) -> ChatClient:
        """A client with the same settings pointed at another server."""
        return ChatClient(base_url, model=None, api_key_env=self.api_key_env, timeout_s=self.timeout_s,
                          connect_timeout_s=self.connect_timeout_s, max_connections=self.max_connections,
                          keep_raw=self.keep_raw, transport=self._transport)

    def _client(self) -> httpx.AsyncClient:
        """The first pool of this loop (probes and look-ups use it)."""
        return self._pools()[0].http

    def _pools(self) -> list[_Pool]:
        loop = asyncio.get_running_loop()
        if self._pool_loop is not loop or not self._pool_list or self._pool_list[0].http.is_closed:
            self._pool_list = []
            self._pool_loop = loop
            self._pool_closer = LoopBound(functools.partial(_close_pools, self._pool_list), owner=self)
            self._add_pool()
        return self._pool_list

    def _add_pool(self) -> _Pool:
        # pool=None: waiting for a pooled connection is client queueing, measured, not an error;
        # read=None: stalls are bounded by our own per-request deadline, which knows the phase deadline.
        timeout = httpx.Timeout(connect=self.connect_timeout_s, read=None, write=None, pool=None)
        size = min(POOL_CONNECTIONS, self.max_connections)
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        self._ssl()
        # a transport of its own (tests) takes httpx's default, as when `verify` is not given
        verify = self._ssl_context if self._transport is None else True
        http = httpx.AsyncClient(timeout=timeout, limits=limits, transport=self._transport, auth=self._auth,
                                 trust_env=False, headers=user_agent_headers(), verify=verify)
        pool = _Pool(http)
        self._pool_list.append(pool)
        return pool

    def _pick_pool(self) -> _Pool:
        """The least busy pool, or a new one while all are full and `max_connections` allows.

        httpcore's pool scans all its connections for every request it assigns (quadratic or worse in the
        number of idle connections); at 256 streams one pool blocked the loop for ~0.6 s. Small pools keep
        that scan short.
        """
        pools = self._pools()
        best = min(pools, key=lambda p: p.in_flight)
        if best.in_flight >= POOL_CONNECTIONS and (len(pools) + 1) * POOL_CONNECTIONS <= self.max_connections:
            best = self._add_pool()
        return best

    def _session(self) -> aiohttp.ClientSession:
        """The aiohttp session of this loop (chat requests go through it unless an httpx transport was given)."""
        loop = asyncio.get_running_loop()
        old = self._aio
        if old is not None and not old.closed and self._aio_loop is loop:
            return old
        if old is not None and not old.closed and self._aio_loop is not None and self._aio_loop.is_closed():
            # its loop was closed without closing it (no asyncio.run): closing it touches nothing of that loop
            task = loop.create_task(old.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self._ssl()
        trace = aiohttp.TraceConfig()
        trace.on_connection_create_start.append(_on_connect_start)
        trace.on_connection_create_end.append(_on_connection)
        trace.on_connection_reuseconn.append(_on_connection)
        trace.on_request_chunk_sent.append(_on_body_sent)
        # sock_connect only: waiting for a pooled connection is client queueing (measured, not an error), and a
        # stalled read is bounded by our own per-request deadline, which knows the phase deadline
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s)
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ssl=self._ssl_context)
        self._aio = aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[trace],
                                          trust_env=False)
        self._aio_loop = loop
        self._aio_closer = LoopBound(self._aio.close, owner=self)
        return self._aio

    def _ssl(self) -> None:
        if self._ssl_context is None and self._transport is None:
            # one TLS context for every pool: building one costs ~20 ms of blocked event loop
            self._ssl_context = httpx.create_ssl_context() if hasattr(httpx, "create_ssl_context") \
                else ssl.create_default_context()

    async def aclose(self) -> None:
        """Close the pools and the session of the running loop (those of an ended loop were closed with it)."""
        loop = asyncio.get_running_loop()
        if self._pool_closer is not None and self._pool_loop is loop:
            await self._pool_closer.aclose()
        if self._aio_closer is not None and self._aio_loop is loop:
            await self._aio_closer.aclose()
        self._pool_list = []
        self._pool_loop = None
        self._pool_closer = None
        self._aio = None
        self._aio_loop = None
        self._aio_closer = None

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- small endpoints -----------------------------------------------------------------------------------

    async def probe(self, path: str, *, method: str = "GET", json_body: Any = None,
                    timeout_s: float = 10.0, body_limit_chars: int = BODY_TEXT_LIMIT_CHARS) -> ProbeRecord:
        """One request with latency, status and (bounded) body; never raises for target problems."""
        url = self.base_url + path if path.startswith("/") else path
        wall = time.time_ns()
        t0 = time.perf_counter_ns()
        try:
            resp = await asyncio.wait_for(
                self._client().request(method, url, json=json_body), timeout_s)
            text = resp.text
            latency = (time.perf_counter_ns() - t0) / 1e6
        except (asyncio.TimeoutError, httpx.TimeoutException):
            return ProbeRecord(url, method, None, None, "", False, wall,
                               error=f"no reply within {timeout_s:g} s", error_kind="TargetUnreachable")
        except httpx.HTTPError as exc:
            return ProbeRecord(url, method, None, None, "", False, wall,
                               error=f"{type(exc).__name__}: {exc}", error_kind="TargetUnreachable")
        truncated = len(text) > body_limit_chars
        err = None
        if resp.status_code >= 400:
            err = str(parse_error_body(resp.status_code, text, url=url))
        return ProbeRecord(url, method, resp.status_code, latency, text[:body_limit_chars], truncated, wall,
                           error=err, error_kind="APIError" if err else None)

    async def get_json(self, path: str, *, method: str = "GET", json_body: Any = None,
                       timeout_s: float = 30.0) -> Any:
        """Parsed JSON of an endpoint; APIError / TargetUnreachable / ProtocolError otherwise."""
        url = self.base_url + path
        try:
            resp = await asyncio.wait_for(self._client().request(method, url, json=json_body), timeout_s)
        except (asyncio.TimeoutError, httpx.TimeoutException) as exc:
            raise TargetUnreachable(f"no reply from {url} within {timeout_s:g} s — is the server up?") from exc
        except httpx.HTTPError as exc:
            raise TargetUnreachable(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            raise parse_error_body(resp.status_code, resp.text, url=url)
        try:
            return resp.json()
        except ValueError as exc:
            raise ProtocolError(f"{url} replied {resp.status_code} with a body that is not JSON: "
                                f"{resp.text[:200]!r}") from exc

    async def resolve_model(self) -> str:
        """The model name to send: the one given, else the first card of `/v1/models`."""
        if self.model is None:
            body = await self.get_json("/v1/models")
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list) or not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise ProtocolError(f"{self.base_url}/v1/models lists no model")
            self.model = str(data[0]["id"])
        return self.model

    async def tokenize(self, *, prompt: str | None = None, messages: Sequence[ChatMessage] | None = None,
                       tools: Sequence[Mapping[str, Any]] | None = None) -> TokenizeResult:
        """vLLM's `/tokenize`, text or chat form (the chat form counts the template, as the server will)."""
        body: _TokenizeBody = {"model": await self.resolve_model()}
        if messages is not None:
            body["messages"] = list(messages)
            body["add_generation_prompt"] = True
            if tools:
                body["tools"] = [cast(ToolDef, t) for t in tools]
        else:
            body["prompt"] = prompt or ""
        reply = await self.get_json("/tokenize", method="POST", json_body=body, timeout_s=self.timeout_s)
        if not isinstance(reply, dict) or not isinstance(reply.get("count"), int):
            raise ProtocolError(f"{self.base_url}/tokenize reply has no integer `count`")
        return TokenizeResult(count=reply["count"], max_model_len=reply.get("max_model_len"),
                              tokens=tuple(reply.get("tokens") or ()))

    # -- chat --------------------------------------------------------------------------------------------

    async def chat(self, messages: Sequence[ChatMessage], *, stream: bool = True,
                   max_tokens: int | None = None, tools: Sequence[ToolDef] | None = None,
                   strict: bool = True, request_id: str | None = None, timeout_s: float | None = None,
                   **params: Any) -> ChatRecord:
        """Send one chat completion. Extra keyword arguments go into the body (temperature, tool_choice…)."""
        body = cast(ChatBody, {"messages": list(messages), **params})
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if tools:
            body["tools"] = list(tools)
        body["stream"] = stream
        return await self.chat_body(body, strict=strict, request_id=request_id, timeout_s=timeout_s)

    async def chat_body(self, body: Mapping[str, Any], *, strict: bool = True, request_id: str | None = None,
                        timeout_s: float | None = None, enqueued_ns: int | None = None,
                        deadline_ns: int | None = None, semaphore: asyncio.Semaphore | None = None,
                        headers: Mapping[str, str] | None = None) -> ChatRecord:
        """Send a prepared body. `strict=False` returns failures as records with `error` set instead of raising.

        `deadline_ns` (a perf mark) is a hard stop shared by a load phase: a request still running then is
        recorded as cancelled. `semaphore`, when given, is acquired inside the measured client-queue window.
        With `strict=True` a raised TargetError carries the partial record (`record_of(exc)`).
        Each request ended counts once in the running axis' progress (`k3lib.core.progress`), which refuses one
        that would pass the plan's count (`ConsentExceeded`). `headers` are sent with the request (a session
        replay's affinity header).
        """
        progress.admit(self.base_url)  # past the plan the operator consented to: refused before it is sent
        try:
            rec = await self._chat_body(body, strict=strict, request_id=request_id, timeout_s=timeout_s,
                                        enqueued_ns=enqueued_ns, deadline_ns=deadline_ns, semaphore=semaphore,
                                        headers=headers)
        except BaseException as exc:
            if self.kept is not None and (failed := record_of(exc)) is not None:
                self.kept.append(failed)
            raise
        finally:
            progress.tick(url=self.base_url)
        if self.kept is not None:
            self.kept.append(rec)
        return rec

    async def _chat_body(self, body: Mapping[str, Any], *, strict: bool, request_id: str | None,
                         timeout_s: float | None, enqueued_ns: int | None, deadline_ns: int | None,
                         semaphore: asyncio.Semaphore | None,
                         headers: Mapping[str, str] | None = None) -> ChatRecord:
        # build the first pool (and the TLS context, ~20 ms) before the anchor: it is set-up, not queueing
        self._pools()
        if self._transport is None:
            self._session()
        wall_anchor = time.time_ns()
        perf_anchor = time.perf_counter_ns()
        enqueued = perf_anchor if enqueued_ns is None else enqueued_ns
        self._counter += 1
        rid = request_id or f"req-{self._counter}"
        body = cast(ChatBody, dict(body))
        stream = bool(body.get("stream", False))
        if stream:
            # tokens come from usage, never from chunk counts (vllm#27485)
            opts = dict(body.get("stream_options") or {})
            opts.setdefault("include_usage", True)
            body["stream_options"] = opts
        url = self.base_url + "/v1/chat/completions"
        state = _Attempt(rid=rid, url=url, stream=stream, wall_anchor=wall_anchor, perf_anchor=perf_anchor,
                         enqueued=enqueued, asked=asked_of(body))
        timeout = self.timeout_s if timeout_s is None else timeout_s
        own_deadline = perf_anchor + int(timeout * 1e9)
        hard_deadline = own_deadline if deadline_ns is None else min(own_deadline, deadline_ns)
        remaining_s = max(0.0, (hard_deadline - time.perf_counter_ns()) / 1e9)
        try:
            async with asyncio.timeout(remaining_s):
                if "model" not in body:
                    body["model"] = await self.resolve_model()
                    if enqueued_ns is None:
                        # the one-off /v1/models look-up is set-up, not client queueing
                        state.enqueued = time.perf_counter_ns()
                if semaphore is not None:
                    async with semaphore:
                        await self._exchange(body, state, headers)
                else:
                    await self._exchange(body, state, headers)
            await state.settle()  # a finished stream's decoding: outside the deadline, it was complete in time
        except TimeoutError as exc:
            phase_stop = deadline_ns is not None and deadline_ns <= own_deadline
            if phase_stop:
                state.fail("Cancelled", "phase deadline reached while the request was in flight", cancelled=True)
                error: Exception = ProtocolError(f"{rid}: cancelled at the phase deadline")
            elif state.first_byte_ns is None:
                state.fail("Timeout", f"no reply from {url} within {timeout:g} s")
                error = TargetUnreachable(f"no reply from {url} within {timeout:g} s — is the server up?")
            else:
                state.fail("Timeout", f"stream from {url} not finished within {timeout:g} s")
                error = ProtocolError(f"stream from {url} not finished within {timeout:g} s")
            return self._finish(state, error, strict, exc)
        except asyncio.CancelledError as exc:
            # cancelled from outside (a notebook interrupt, a phase tearing down): keep what arrived; a stream
            # that had ended is complete, only its decoding was still waiting for a turn
            if not state.unsettled:
                state.fail("Cancelled", "request cancelled by the caller", cancelled=True)
            else:
                try:
                    state.settle_now()
                except (ProtocolError, APIError) as failed:
                    state.fail(type(failed).__name__, str(failed),
                               api_error=failed if isinstance(failed, APIError) else None)
            exc.record = state.build(self.keep_raw)  # type: ignore[attr-defined]
            raise
        except (APIError, ProtocolError, TargetUnreachable) as exc:
            kind = type(exc).__name__
            state.fail(kind, str(exc), api_error=exc if isinstance(exc, APIError) else None)
            return self._finish(state, exc, strict, None)
        return state.build(self.keep_raw)

    def _finish(self, state: _Attempt, error: Exception, strict: bool, cause: BaseException | None) -> ChatRecord:
        rec = state.build(self.keep_raw)
        if not strict:
            return rec
        error.record = rec  # type: ignore[attr-defined]
        if error.__cause__ is None and cause is not None:
            raise error from cause
        raise error

    async def _exchange(self, body: ChatBody, state: _Attempt,
                        extra_headers: Mapping[str, str] | None = None) -> None:
        payload = json.dumps(body, ensure_ascii=False).encode()
        headers = {**(extra_headers or {}), "content-type": "application/json",
                   "accept": "text/event-stream" if state.stream else "application/json", **user_agent_headers()}
        if self._transport is None:
            await self._exchange_aiohttp(payload, headers, state)
            return
        pool = self._pick_pool()
        pool.in_flight += 1
        try:
            await self._exchange_httpx(pool.http, payload, headers, state)
        finally:
            pool.in_flight -= 1

    async def _exchange_aiohttp(self, payload: bytes, headers: dict[str, str], state: _Attempt) -> None:
        """Chat over aiohttp: its C HTTP parser and stream reader cost a streamed event about a third of
        what httpcore's pure-Python path does (benchmarks/client_vs_peer.py)."""
        session = self._session()
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["authorization"] = f"Bearer {key}"
        pre_send_ns = time.perf_counter_ns()
        try:
            response = await session.post(state.url, data=payload, headers=headers,
                                          trace_request_ctx=state)  # type: ignore[arg-type]
        except TRANSPORT_ERRORS as exc:
            raise _send_failure(state, exc) from exc
        _mark_reply(state, pre_send_ns, response.status)
        try:
            await self._take_reply(state, response.headers.get("content-type", ""), response.read,
                                   response.content.readany)
        except TRANSPORT_ERRORS as exc:
            raise _broken(state, exc) from exc
        finally:
            # back to the pool when the body was read to its end; a cut-off body closes its connection
            response.release()

    async def _exchange_httpx(self, http: httpx.AsyncClient, payload: bytes, headers: dict[str, str],
                              state: _Attempt) -> None:
        """Chat over httpx: used when the client was given an httpx transport (tests' MockTransport)."""

        async def trace(event: str, info: Mapping[str, Any]) -> None:
            t = time.perf_counter_ns()
            if event == "connection.connect_tcp.started":
                state.connect_start_ns = t
            elif event == "connection.connect_tcp.complete" and state.connect_start_ns is not None:
                state.connect_ms = (t - state.connect_start_ns) / 1e6
            elif event.endswith("send_request_headers.started") and state.sent_ns is None:
                state.sent_ns = t
            elif event.endswith("receive_response_headers.complete") and state.first_byte_ns is None:
                state.first_byte_ns = t

        request = http.build_request("POST", state.url, content=payload, headers=headers,
                                     extensions={"trace": trace})
        pre_send_ns = time.perf_counter_ns()
        try:
            response = await http.send(request, stream=True)
        except TRANSPORT_ERRORS as exc:
            raise _send_failure(state, exc) from exc
        _mark_reply(state, pre_send_ns, response.status_code)
        pieces = response.aiter_bytes()

        async def read_piece() -> bytes:
            try:
                return await pieces.__anext__()
            except StopAsyncIteration:
                return b""

        try:
            await self._take_reply(state, response.headers.get("content-type", ""), response.aread, read_piece)
        except TRANSPORT_ERRORS as exc:
            raise _broken(state, exc) from exc
        finally:
            await response.aclose()

    async def _take_reply(self, state: _Attempt, ctype: str, read_all: Callable[[], Awaitable[bytes]],
                          read_piece: Callable[[], Awaitable[bytes]]) -> None:
        """The reply after its headers, whichever HTTP stack brought it."""
        status = state.http_status or 0
        if status >= 400:
            text = (await read_all()).decode("utf-8", "replace")
            state.raw_json = _try_json(text) if self.keep_raw else None
            state.done_ns = time.perf_counter_ns()
            raise parse_error_body(status, text, url=state.url)
        if state.stream and "text/event-stream" in ctype:
            await _read_stream(read_piece, state, status, settle_later=True)
            return
        raw = await read_all()
        state.done_ns = time.perf_counter_ns()
        try:
            reply = json.loads(raw)
        except ValueError as exc:
            raise ProtocolError(f"{state.url} replied {status} with a body that is not "
                                f"JSON: {raw[:200]!r}") from exc
        state.raw_json = reply
        if isinstance(reply, dict) and ("error" in reply or reply.get("object") == "error"):
            raise parse_error_body(status, raw.decode("utf-8", "replace"), url=state.url)
        state.fields.update(completion_fields(reply))
