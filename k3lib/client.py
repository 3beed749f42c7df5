"""Chat client: one request to an OpenAI-compatible server becomes one frozen `ChatRecord`.

Timing uses `perf_counter_ns` marks plus one wall-clock anchor per request; tokens come from `usage`, never
from chunk counts. Also small probes (`/health`, `/version`, `/v1/models`, `/tokenize`) for the probe axis.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx
import msgspec

from k3lib.chatstream import SSEDecoder, ToolCall, ToolCallAssembler
from k3lib.errors import APIError, BadInputError, ProtocolError, TargetUnreachable
from k3lib.guards import require_key_env

T = TypeVar("T")

#: How much of an error or probe body is kept as text (the whole JSON of a successful reply is always kept).
BODY_TEXT_LIMIT_CHARS = 4096


# ---------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRecord:
    """What the client saw for one chat request.

    All `*_ns` marks are `time.perf_counter_ns()` values; `wall_anchor_ns` (`time.time_ns()`) was taken at the
    same instant as `perf_anchor_ns`, so `wall_ns(mark)` places any mark on the Prometheus/NVML time axis.
    `enqueued_ns` is when the caller handed the request over (or its scheduled arrival, for open-loop load);
    `sent_ns` when the request headers started onto the wire. TTFT, ITL and e2e are measured from `sent_ns`;
    the wait before it is `client_queue_ms`, reported apart (vllm#54101).
    """

    request_id: str
    url: str
    stream: bool
    wall_anchor_ns: int
    perf_anchor_ns: int
    enqueued_ns: int
    sent_ns: int | None = None
    first_byte_ns: int | None = None
    first_content_ns: int | None = None
    first_reasoning_ns: int | None = None
    first_tool_call_ns: int | None = None
    last_token_ns: int | None = None
    done_ns: int | None = None
    #: perf marks of the SSE events that carried output (content, reasoning or a tool-call delta)
    output_chunk_ns: tuple[int, ...] = ()
    #: every SSE data event, output or not (role-only first delta, usage chunk…)
    chunk_count: int = 0
    connect_ms: float | None = None
    http_status: int | None = None
    model: str | None = None
    response_id: str | None = None
    system_fingerprint: str | None = None
    finish_reason: str | None = None
    content: str | None = None
    reasoning: str | None = None
    #: which field carried reasoning: "reasoning" (vLLM 0.12+), "reasoning_content" (≤0.14), or both
    reasoning_field: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    #: None when the server sent no `prompt_tokens_details` (vLLM ≤0.22 on a miss, or the flag is off); 0 is a miss
    cached_tokens: int | None = None
    usage_present: bool = False
    #: the full JSON reply (non-stream) — kept so the agent axis can show a failing reply raw
    raw_json: Any = None
    #: every raw `data:` payload of a stream, in order, including `[DONE]`
    raw_lines: tuple[str, ...] = ()
    error: str | None = None
    #: "APIError", "ProtocolError", "TargetUnreachable", "Timeout" or "Cancelled"
    error_kind: str | None = None
    api_error_type: str | None = None
    api_error_param: str | None = None
    cancelled: bool = False

    # -- derived, in ms ------------------------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        return self.error is None and self.http_status == 200

    @property
    def first_token_ns(self) -> int | None:
        marks = [m for m in (self.first_content_ns, self.first_reasoning_ns, self.first_tool_call_ns)
                 if m is not None]
        return min(marks) if marks else None

    @property
    def ttft_ms(self) -> float | None:
        """First content, reasoning or tool-call token, from send. None for a non-streamed request."""
        return _ms(self.sent_ns, self.first_token_ns)

    @property
    def itl_ms(self) -> tuple[float, ...]:
        """Gaps between successive output-carrying chunks (one chunk may hold several tokens)."""
        marks = self.output_chunk_ns
        return tuple((b - a) / 1e6 for a, b in zip(marks, marks[1:]))

    @property
    def e2e_ms(self) -> float | None:
        return _ms(self.sent_ns, self.done_ns)

    @property
    def client_queue_ms(self) -> float | None:
        """Time between hand-over and send: our semaphore, the connection pool, TCP connect."""
        return _ms(self.enqueued_ns, self.sent_ns)

    @property
    def tpot_ms(self) -> float | None:
        """Mean time per output token after the first, from usage (not from chunks)."""
        if self.completion_tokens is None or self.completion_tokens < 2:
            return None
        span = _ms(self.first_token_ns, self.last_token_ns)
        return None if span is None else span / (self.completion_tokens - 1)

    def wall_ns(self, perf_mark_ns: int | None) -> int | None:
        """Convert a perf mark of this record to wall-clock nanoseconds since the epoch."""
        if perf_mark_ns is None:
            return None
        return self.wall_anchor_ns + (perf_mark_ns - self.perf_anchor_ns)

    def to_dict(self, *, include_raw: bool = True) -> dict[str, Any]:
        d = asdict(self)
        d["tool_calls"] = [asdict(tc) for tc in self.tool_calls]
        d["output_chunk_ns"] = list(self.output_chunk_ns)
        d["raw_lines"] = list(self.raw_lines) if include_raw else None
        if not include_raw:
            d["raw_json"] = None
        d.update(ok=self.ok, ttft_ms=self.ttft_ms, itl_ms=list(self.itl_ms), e2e_ms=self.e2e_ms,
                 client_queue_ms=self.client_queue_ms, tpot_ms=self.tpot_ms,
                 sent_wall_ns=self.wall_ns(self.sent_ns))
        return d


@dataclass(frozen=True)
class ProbeRecord:
    """One probe of an endpoint. Failures are values here: the probe axis reports them, it does not stop."""

    url: str
    method: str
    status: int | None
    latency_ms: float | None
    body_text: str
    body_truncated: bool
    wall_ns: int
    error: str | None = None
    error_kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty, truncated or not JSON."""
        if self.body_truncated or not self.body_text:
            return None
        try:
            return json.loads(self.body_text)
        except ValueError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class TokenizeResult:
    count: int
    max_model_len: int | None
    tokens: tuple[int, ...] = ()


def _ms(start_ns: int | None, end_ns: int | None) -> float | None:
    if start_ns is None or end_ns is None:
        return None
    return (end_ns - start_ns) / 1e6


def record_of(exc: BaseException) -> ChatRecord | None:
    """The partial record a failed `chat` attached to its exception (what was received before the failure)."""
    rec = getattr(exc, "record", None)
    return rec if isinstance(rec, ChatRecord) else None


# ---------------------------------------------------------------------------------------------------------
# Pure parsing
# ---------------------------------------------------------------------------------------------------------


def parse_error_body(status: int, text: str, *, url: str | None = None) -> APIError:
    """Fold every error-body shape a vLLM-compatible server sends into one `APIError`.

    ≤0.10.0: flat `{"object":"error","message","type","param","code"}`; 0.10.1+: nested `{"error":{...}}`;
    auth middleware: `{"error":"Unauthorized"}`; FastAPI defaults: `{"detail": ...}`; proxies: HTML or text.
    """
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        body = None
    message: str | None = None
    etype = param = None
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            message, etype, param = inner.get("message"), inner.get("type"), inner.get("param")
        elif isinstance(inner, str):
            message = inner
        elif "message" in body:
            message, etype, param = body.get("message"), body.get("type"), body.get("param")
        elif "detail" in body:
            detail = body["detail"]
            message = detail if isinstance(detail, str) else json.dumps(detail)[:BODY_TEXT_LIMIT_CHARS]
    if message is None:
        snippet = " ".join(text.split())[:500]
        message = f"non-JSON error body: {snippet}" if snippet else "empty error body"
    return APIError(status, str(message), type=None if etype is None else str(etype),
                    param=None if param is None else str(param), url=url)


_decode_json = msgspec.json.Decoder().decode


def loads_json(text: str) -> Any:
    """`json.loads`, with msgspec (about 2× faster on a chunk) where it can.

    msgspec refuses what the standard library alone reads (NaN, Infinity, 1e400, lone surrogate escapes);
    those go to `json.loads`, so every reply decodes to exactly what it did before. (orjson was not used: it
    turns integers past 64 bits into floats without a word.)
    """
    try:
        return _decode_json(text)
    except msgspec.MsgspecError:
        return json.loads(text)


def _usage_fields(usage: Any) -> dict[str, Any]:
    if not isinstance(usage, dict):
        return {}
    out: dict[str, Any] = {"usage_present": True, "prompt_tokens": usage.get("prompt_tokens"),
                           "completion_tokens": usage.get("completion_tokens"),
                           "total_tokens": usage.get("total_tokens")}
    details = usage.get("prompt_tokens_details")
    # null details (vLLM ≤0.22 on a cache miss) and a 0 are different facts: keep None for the former
    out["cached_tokens"] = details.get("cached_tokens") if isinstance(details, dict) else None
    cdetails = usage.get("completion_tokens_details")
    out["reasoning_tokens"] = cdetails.get("reasoning_tokens") if isinstance(cdetails, dict) else None
    return out


def _reasoning_of(obj: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(text, field name): vLLM ≤0.11 sends `reasoning_content`, 0.12–0.14 both, 0.16+ only `reasoning`."""
    r, rc = obj.get("reasoning"), obj.get("reasoning_content")
    if r and rc:
        return r, "both"
    if r:
        return r, "reasoning"
    if rc:
        return rc, "reasoning_content"
    return None, None


class StreamAssembler:
    """Accumulates the SSE `data:` payloads of one streamed chat completion (choice 0) with their perf marks.

    The read loop only calls `arrived` (keep the bytes and the mark of their arrival); framing, JSON decoding,
    tool-call assembly and token accounting wait for `drain`, so a burst of events costs the timing path a
    clock read each. An event is stamped with the arrival of the read that completed its first `data:` line,
    whenever it is decoded, so deferral changes no mark.
    """

    #: undecoded reads kept before `arrived` asks for a drain (bounds memory on a very long stream)
    MAX_PENDING_READS = 4096

    def __init__(self) -> None:
        self.raw_lines: list[str] = []
        self.chunk_count = 0
        self.output_chunk_ns: list[int] = []
        self.first_content_ns: int | None = None
        self.first_reasoning_ns: int | None = None
        self.first_tool_call_ns: int | None = None
        self.done = False
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_field: str | None = None
        self.tools = ToolCallAssembler()
        self.fields: dict[str, Any] = {}
        self.stream_error: APIError | None = None
        #: (bytes of one read, its arrival mark), not yet framed
        self.pending: list[tuple[bytes, int]] = []
        self._buf = bytearray()
        self._scan = 0
        self._sse = SSEDecoder()
        self._t_event: int | None = None
        self._eager = False
        self._edge = b""

    # -- the hot path and the deferred framing ----------------------------------------------------------

    def arrived(self, piece: bytes, t_ns: int) -> bool:
        """Keep one read and its arrival mark. True when it should be decoded now: the backlog is long, or the
        stream may carry an error event (vLLM's failure after the 200 header ends the request as it arrives).
        From the first read that may, even cut across two reads, every read is decoded on arrival."""
        pending = self.pending
        pending.append((piece, t_ns))
        if not self._eager:
            seam = self._edge + piece[:4]
            self._eager = b"error" in piece or b"error" in seam
            self._edge = piece[-4:] if len(piece) >= 4 else seam[-4:]
        return self._eager or len(pending) >= self.MAX_PENDING_READS

    def drain(self, *, url: str | None = None, status: int = 200) -> None:
        """Frame and decode every pending read. Raises ProtocolError on a payload that is not JSON, and the
        stream's APIError on an error event (what follows it is dropped, as the reader stops there)."""
        pending, self.pending = self.pending, []
        buf = self._buf
        for piece, t_read in pending:
            if not buf:
                lines = piece.split(b"\n")
                tail = lines.pop()
                for raw in lines:
                    self._line(raw, t_read, url, status)
                if tail:
                    buf += tail
                    self._scan = len(buf)
                continue
            # an event spread over many reads (a multi-MB tool argument): scan only the new bytes (vllm#39963)
            buf += piece
            start = 0
            while (nl := buf.find(b"\n", self._scan)) >= 0:
                self._line(bytes(buf[start:nl]), t_read, url, status)
                start = self._scan = nl + 1
            if start:
                del buf[:start]
            self._scan = len(buf)

    def finish(self, end_ns: int, *, url: str | None = None, status: int = 200) -> None:
        """The body ended: decode what is left, including a last line without its newline."""
        self.drain(url=url, status=status)
        if self._buf:
            raw, self._buf = bytes(self._buf), bytearray()
            self._scan = 0
            self._line(raw, end_ns, url, status)
        self._dispatch(end_ns, url, status)

    def _line(self, raw: bytes, t_read: int, url: str | None, status: int) -> None:
        line = raw.decode("utf-8", "replace")
        if self._t_event is None and line.startswith("data:"):
            self._t_event = t_read
        payload = self._sse.line(line)
        if payload is not None:
            self._emit(payload, t_read, url, status)

    def _dispatch(self, t_now: int, url: str | None, status: int) -> None:
        payload = self._sse.flush()
        if payload is not None:
            self._emit(payload, t_now, url, status)

    def _emit(self, payload: str, t_now: int, url: str | None, status: int) -> None:
        t_event = self._t_event if self._t_event is not None else t_now
        self._t_event = None
        self.feed(payload, t_event, url=url, status=status)
        if self.stream_error is not None:
            self.pending = []
            raise self.stream_error

    # -- one event ----------------------------------------------------------------------------------------

    def feed(self, payload: str, t_ns: int, *, url: str | None = None, status: int = 200) -> None:
        """One `data:` payload. Raises ProtocolError on a payload that is not JSON."""
        self.raw_lines.append(payload)
        if payload.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = loads_json(payload)
        except ValueError as exc:
            raise ProtocolError(f"invalid JSON in SSE event #{self.chunk_count + 1} from {url}: "
                                f"{payload[:200]!r}") from exc
        self.chunk_count += 1
        if not isinstance(chunk, dict):
            raise ProtocolError(f"SSE event #{self.chunk_count} from {url} is not a JSON object: {payload[:200]!r}")
        if "error" in chunk or chunk.get("object") == "error":
            # vLLM reports a failure after the 200 header as an error event followed by [DONE]
            err = parse_error_body(status, payload, url=url)
            code = (chunk.get("error") or {}).get("code") if isinstance(chunk.get("error"), dict) \
                else chunk.get("code")
            self.stream_error = APIError(code if isinstance(code, int) else status, err.message,
                                         type=err.type, param=err.param, url=url)
            return
        for key, name in (("model", "model"), ("id", "response_id"), ("system_fingerprint", "system_fingerprint")):
            if chunk.get(key) is not None:
                self.fields[name] = chunk[key]
        if chunk.get("usage"):
            # vLLM's continuous_usage_stats repeats usage on every chunk: the last one wins
            self.fields.update(_usage_fields(chunk["usage"]))
        carried = False
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta, dict):
                if delta.get("content"):
                    self.content.append(delta["content"])
                    carried = True
                    if self.first_content_ns is None:
                        self.first_content_ns = t_ns
                text, fname = _reasoning_of(delta)
                if text:
                    self.reasoning.append(text)
                    self.reasoning_field = fname if self.reasoning_field in (None, fname) else "both"
                    carried = True
                    if self.first_reasoning_ns is None:
                        self.first_reasoning_ns = t_ns
                if delta.get("tool_calls"):
                    self.tools.feed(delta["tool_calls"])
                    carried = True
                    if self.first_tool_call_ns is None:
                        self.first_tool_call_ns = t_ns
            if choice.get("finish_reason"):
                self.fields["finish_reason"] = choice["finish_reason"]
        if carried:
            self.output_chunk_ns.append(t_ns)

    def record_fields(self) -> dict[str, Any]:
        return {
            **self.fields,
            "raw_lines": tuple(self.raw_lines),
            "chunk_count": self.chunk_count,
            "output_chunk_ns": tuple(self.output_chunk_ns),
            "first_content_ns": self.first_content_ns,
            "first_reasoning_ns": self.first_reasoning_ns,
            "first_tool_call_ns": self.first_tool_call_ns,
            "last_token_ns": self.output_chunk_ns[-1] if self.output_chunk_ns else None,
            "content": "".join(self.content) if self.content else None,
            "reasoning": "".join(self.reasoning) if self.reasoning else None,
            "reasoning_field": self.reasoning_field,
            "tool_calls": self.tools.result(),
        }


def completion_fields(body: Any) -> dict[str, Any]:
    """Record fields from a non-streamed chat completion (choice 0)."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise ProtocolError("reply is not a chat completion: no `choices` list")
    out: dict[str, Any] = {"model": body.get("model"), "response_id": body.get("id"),
                           "system_fingerprint": body.get("system_fingerprint"), **_usage_fields(body.get("usage"))}
    choice = next((c for c in body["choices"] if isinstance(c, dict) and c.get("index", 0) == 0), None)
    if choice is not None:
        message = choice.get("message") or {}
        out["finish_reason"] = choice.get("finish_reason")
        out["content"] = message.get("content")
        out["reasoning"], out["reasoning_field"] = _reasoning_of(message)
        calls = []
        for i, tc in enumerate(message.get("tool_calls") or ()):
            if isinstance(tc, dict):
                fn = tc.get("function") or {}
                args = fn.get("arguments")
                # arguments must be a JSON string; an object here is itself a finding, kept re-serialized
                args = args if isinstance(args, str) else ("" if args is None else json.dumps(args))
                calls.append(ToolCall(index=tc.get("index", i), id=tc.get("id"), type=tc.get("type"),
                                      name=fn.get("name"), arguments=args))
        out["tool_calls"] = tuple(calls)
    return out


# ---------------------------------------------------------------------------------------------------------
# Auth and URLs
# ---------------------------------------------------------------------------------------------------------


class _EnvBearerAuth(httpx.Auth):
    """Reads the key from the environment at send time, so the value is never stored on any kit object."""

    def __init__(self, env_name: str) -> None:
        self.env_name = env_name

    def auth_flow(self, request: httpx.Request):  # type: ignore[override]
        value = os.environ.get(self.env_name)
        if value:
            request.headers["Authorization"] = f"Bearer {value}"
        yield request

    def __repr__(self) -> str:
        return f"_EnvBearerAuth(env={self.env_name!r})"


def root_url(base_url: str) -> str:
    """`http://h:8000/v1/` → `http://h:8000`: vLLM serves `/health`, `/tokenize` beside `/v1`, not under it."""
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadInputError(f"target URL {base_url!r} is not an http(s) URL; expected e.g. http://127.0.0.1:8000",
                            field="base_url")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


# ---------------------------------------------------------------------------------------------------------
# The async client
# ---------------------------------------------------------------------------------------------------------


#: Connections per httpx pool; a client opens more pools as concurrency grows (see `ChatClient._pick_pool`).
POOL_CONNECTIONS = 16


@dataclass
class _Pool:
    http: httpx.AsyncClient
    in_flight: int = 0


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


class ChatClient:
    """Async chat client for one target. Cheap to share between thousands of concurrent requests.

    The API key is read from the environment variable *named* `api_key_env` at each send; the value is never
    stored, logged or put in a record. The httpx client is created per event loop, so one `ChatClient` can be
    driven by a notebook's loop and by `run_sync`'s private loop without sharing connections across loops.
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
        self._ssl_context: Any = None
        self._aio: aiohttp.ClientSession | None = None
        self._aio_loop: asyncio.AbstractEventLoop | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._counter = 0

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
            self._add_pool()
        return self._pool_list

    def _add_pool(self) -> _Pool:
        # pool=None: waiting for a pooled connection is client queueing, measured, not an error;
        # read=None: stalls are bounded by our own per-request deadline, which knows the phase deadline.
        timeout = httpx.Timeout(connect=self.connect_timeout_s, read=None, write=None, pool=None)
        size = min(POOL_CONNECTIONS, self.max_connections)
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        self._ssl()
        kwargs: dict[str, Any] = {"verify": self._ssl_context} if self._transport is None else {}
        http = httpx.AsyncClient(timeout=timeout, limits=limits, transport=self._transport, auth=self._auth,
                                 trust_env=False, **kwargs)
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
            # its loop is gone (a finished asyncio.run): closing it touches nothing of that loop
            task = loop.create_task(old.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self._ssl()
        trace = aiohttp.TraceConfig()
        trace.on_connection_create_start.append(_on_connect_start)
        trace.on_connection_create_end.append(_on_connection)
        trace.on_connection_reuseconn.append(_on_connection)
        # sock_connect only: waiting for a pooled connection is client queueing (measured, not an error), and a
        # stalled read is bounded by our own per-request deadline, which knows the phase deadline
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s)
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ssl=self._ssl_context)
        self._aio = aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[trace],
                                          trust_env=False)
        self._aio_loop = loop
        return self._aio

    def _ssl(self) -> None:
        if self._ssl_context is None and self._transport is None:
            # one TLS context for every pool: building one costs ~20 ms of blocked event loop
            self._ssl_context = httpx.create_ssl_context() if hasattr(httpx, "create_ssl_context") \
                else ssl.create_default_context()

    async def aclose(self) -> None:
        if self._pool_list and self._pool_loop is asyncio.get_running_loop():
            for pool in self._pool_list:
                await pool.http.aclose()
        if self._aio is not None and self._aio_loop is asyncio.get_running_loop():
            await self._aio.close()
        self._pool_list = []
        self._pool_loop = None
        self._aio = None
        self._aio_loop = None

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

    async def tokenize(self, *, prompt: str | None = None, messages: Sequence[Mapping[str, Any]] | None = None,
                       tools: Sequence[Mapping[str, Any]] | None = None) -> TokenizeResult:
        """vLLM's `/tokenize`, text or chat form (the chat form counts the template, as the server will)."""
        body: dict[str, Any] = {"model": await self.resolve_model()}
        if messages is not None:
            body.update(messages=list(messages), add_generation_prompt=True)
            if tools:
                body["tools"] = list(tools)
        else:
            body["prompt"] = prompt or ""
        reply = await self.get_json("/tokenize", method="POST", json_body=body, timeout_s=self.timeout_s)
        if not isinstance(reply, dict) or not isinstance(reply.get("count"), int):
            raise ProtocolError(f"{self.base_url}/tokenize reply has no integer `count`")
        return TokenizeResult(count=reply["count"], max_model_len=reply.get("max_model_len"),
                              tokens=tuple(reply.get("tokens") or ()))

    # -- chat --------------------------------------------------------------------------------------------

    async def chat(self, messages: Sequence[Mapping[str, Any]], *, stream: bool = True,
                   max_tokens: int | None = None, tools: Sequence[Mapping[str, Any]] | None = None,
                   strict: bool = True, request_id: str | None = None, timeout_s: float | None = None,
                   **params: Any) -> ChatRecord:
        """Send one chat completion. Extra keyword arguments go into the body (temperature, tool_choice…)."""
        body: dict[str, Any] = {"messages": list(messages), **params}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if tools:
            body["tools"] = list(tools)
        body["stream"] = stream
        return await self.chat_body(body, strict=strict, request_id=request_id, timeout_s=timeout_s)

    async def chat_body(self, body: Mapping[str, Any], *, strict: bool = True, request_id: str | None = None,
                        timeout_s: float | None = None, enqueued_ns: int | None = None,
                        deadline_ns: int | None = None, semaphore: asyncio.Semaphore | None = None) -> ChatRecord:
        """Send a prepared body. `strict=False` returns failures as records with `error` set instead of raising.

        `deadline_ns` (a perf mark) is a hard stop shared by a load phase: a request still running then is
        recorded as cancelled. `semaphore`, when given, is acquired inside the measured client-queue window.
        With `strict=True` a raised TargetError carries the partial record (`record_of(exc)`).
        """
        # build the first pool (and the TLS context, ~20 ms) before the anchor: it is set-up, not queueing
        self._pools()
        if self._transport is None:
            self._session()
        wall_anchor = time.time_ns()
        perf_anchor = time.perf_counter_ns()
        enqueued = perf_anchor if enqueued_ns is None else enqueued_ns
        self._counter += 1
        rid = request_id or f"req-{self._counter}"
        body = dict(body)
        stream = bool(body.get("stream", False))
        if stream:
            # tokens come from usage, never from chunk counts (vllm#27485)
            opts = dict(body.get("stream_options") or {})
            opts.setdefault("include_usage", True)
            body["stream_options"] = opts
        url = self.base_url + "/v1/chat/completions"
        state = _Attempt(rid=rid, url=url, stream=stream, wall_anchor=wall_anchor, perf_anchor=perf_anchor,
                         enqueued=enqueued)
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
                        await self._exchange(body, state)
                else:
                    await self._exchange(body, state)
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
            # cancelled from outside (a notebook interrupt, a phase tearing down): keep what arrived
            state.fail("Cancelled", "request cancelled by the caller", cancelled=True)
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

    async def _exchange(self, body: dict[str, Any], state: _Attempt) -> None:
        payload = json.dumps(body, ensure_ascii=False).encode()
        headers = {"content-type": "application/json",
                   "accept": "text/event-stream" if state.stream else "application/json"}
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
            await _read_stream(read_piece, state, status)
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
                       clock: Callable[[], int] = time.perf_counter_ns) -> None:
    """The timing path: each read gets its arrival mark and waits, undecoded, for the end of the body.

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
    end_ns = clock()
    try:
        asm.finish(end_ns, url=url, status=status)
    finally:
        state.done_ns = end_ns
    if not asm.done:
        raise ProtocolError(f"stream from {url} ended without `data: [DONE]` after "
                            f"{asm.chunk_count} events — truncated reply or server crash")


def _try_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text[:BODY_TEXT_LIMIT_CHARS]


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
    first_byte_ns: int | None = None
    done_ns: int | None = None
    connect_start_ns: int | None = None
    connect_ms: float | None = None
    http_status: int | None = None
    raw_json: Any = None
    fields: dict[str, Any] = field(default_factory=dict)
    assembler: StreamAssembler = field(default_factory=StreamAssembler)
    error: dict[str, Any] = field(default_factory=dict)

    def fail(self, kind: str, message: str, *, cancelled: bool = False, api_error: APIError | None = None) -> None:
        if self.error:  # keep the first cause
            return
        self.error = {"error": message, "error_kind": kind, "cancelled": cancelled}
        if api_error is not None:
            self.error.update(api_error_type=api_error.type, api_error_param=api_error.param)
        if self.done_ns is None:
            self.done_ns = time.perf_counter_ns()

    def build(self, keep_raw: bool) -> ChatRecord:
        fields = dict(self.fields)
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
                          **fields, **self.error)


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


async def aprobe_endpoint(url: str, *, method: str = "GET", json_body: Any = None, timeout_s: float = 10.0,
                          api_key_env: str | None = None,
                          body_limit_chars: int = BODY_TEXT_LIMIT_CHARS) -> ProbeRecord:
    """Probe one absolute URL (`http://h:8000/health`)."""
    parts = urlsplit(url)
    client = ChatClient(f"{parts.scheme}://{parts.netloc}", api_key_env=api_key_env)
    try:
        return await client.probe(url, method=method, json_body=json_body, timeout_s=timeout_s,
                                  body_limit_chars=body_limit_chars)
    finally:
        await client.aclose()


def probe_endpoint(url: str, **kwargs: Any) -> ProbeRecord:
    """Blocking `aprobe_endpoint`, usable from a notebook cell."""
    return run_sync(aprobe_endpoint(url, **kwargs))
