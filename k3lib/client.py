"""Chat client: one request to an OpenAI-compatible server becomes one frozen `ChatRecord`.

Timing uses `perf_counter_ns` marks plus one wall-clock anchor per request; tokens come from `usage`, never
from chunk counts. Also small probes (`/health`, `/version`, `/v1/models`, `/tokenize`) for the probe axis.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import json
import os
import ssl
import threading
import time
from collections.abc import Awaitable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from k3lib.errors import APIError, BadInputError, ProtocolError, TargetUnreachable

T = TypeVar("T")

#: How much of an error or probe body is kept as text (the whole JSON of a successful reply is always kept).
BODY_TEXT_LIMIT_CHARS = 4096


# ---------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One reassembled tool call. `arguments` is the JSON *string* the server sent, never parsed here."""

    index: int
    id: str | None
    type: str | None
    name: str | None
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The shape to send back in an assistant history message."""
        return {"id": self.id, "type": self.type or "function",
                "function": {"name": self.name, "arguments": self.arguments}}


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


class ToolCallAssembler:
    """Rebuilds tool calls from streamed deltas.

    The first delta of call *i* carries `index`, `id`, `type` and `function.name`; later ones only `index`
    and an `arguments` fragment. Some parsers (kimi_k3) send the whole argument string in one delta, and some
    servers omit `index` — then a delta with an `id` opens a new call and one without continues the last.
    """

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}

    def feed(self, deltas: Sequence[Any]) -> None:
        for delta in deltas:
            if not isinstance(delta, dict):
                continue
            index = delta.get("index")
            if not isinstance(index, int):
                if delta.get("id") is not None or not self._calls:
                    index = len(self._calls)
                else:
                    index = max(self._calls)
            call = self._calls.setdefault(index, {"id": None, "type": None, "name": None, "arguments": []})
            if delta.get("id") and call["id"] is None:
                call["id"] = delta["id"]
            if delta.get("type") and call["type"] is None:
                call["type"] = delta["type"]
            fn = delta.get("function") or {}
            if isinstance(fn, dict):
                if fn.get("name") and call["name"] is None:
                    call["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["arguments"].append(fn["arguments"])

    def result(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(index=i, id=c["id"], type=c["type"], name=c["name"],
                              arguments="".join(c["arguments"]))
                     for i, c in sorted(self._calls.items()))


class StreamAssembler:
    """Accumulates the SSE `data:` payloads of one streamed chat completion (choice 0) with their perf marks."""

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

    def feed(self, payload: str, t_ns: int, *, url: str | None = None, status: int = 200) -> None:
        """One `data:` payload. Raises ProtocolError on a payload that is not JSON."""
        self.raw_lines.append(payload)
        if payload.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(payload)
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


def is_loopback_url(url: str) -> bool:
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------------------
# The async client
# ---------------------------------------------------------------------------------------------------------


#: Connections per httpx pool; a client opens more pools as concurrency grows (see `ChatClient._pick_pool`).
POOL_CONNECTIONS = 16


@dataclass
class _Pool:
    http: httpx.AsyncClient
    in_flight: int = 0


class ChatClient:
    """Async chat client for one target. Cheap to share between thousands of concurrent requests.

    The API key is read from the environment variable *named* `api_key_env` at each send; the value is never
    stored, logged or put in a record. The httpx client is created per event loop, so one `ChatClient` can be
    driven by a notebook's loop and by `run_sync`'s private loop without sharing connections across loops.
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
        if api_key_env is not None and not os.environ.get(api_key_env):
            raise BadInputError(f"environment variable {api_key_env} is not set or empty; export the API key "
                                f"there (the kit only reads keys from the environment)", field="api_key_env")
        self._pool_list: list[_Pool] = []
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._ssl_context: Any = None
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
        if self._ssl_context is None and self._transport is None:
            # one TLS context for every pool: building one costs ~20 ms of blocked event loop
            self._ssl_context = httpx.create_ssl_context() if hasattr(httpx, "create_ssl_context") \
                else ssl.create_default_context()
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

    async def aclose(self) -> None:
        if self._pool_list and self._pool_loop is asyncio.get_running_loop():
            for pool in self._pool_list:
                await pool.http.aclose()
        self._pool_list = []
        self._pool_loop = None

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
        pool = self._pick_pool()
        pool.in_flight += 1
        try:
            await self._exchange_on(pool.http, body, state)
        finally:
            pool.in_flight -= 1

    async def _exchange_on(self, http: httpx.AsyncClient, body: dict[str, Any], state: _Attempt) -> None:

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

        payload = json.dumps(body, ensure_ascii=False).encode()
        request = http.build_request("POST", state.url, content=payload,
                                     headers={"content-type": "application/json",
                                              "accept": "text/event-stream" if state.stream else "application/json"},
                                     extensions={"trace": trace})
        pre_send_ns = time.perf_counter_ns()
        try:
            response = await http.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise TargetUnreachable(f"timed out connecting to {state.url}: {exc}") from exc
        except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
            raise TargetUnreachable(f"cannot connect to {state.url}: {exc} — is the server up?") from exc
        except httpx.HTTPError as exc:
            if state.first_byte_ns is None:
                raise TargetUnreachable(f"no reply from {state.url}: {type(exc).__name__}: {exc}") from exc
            raise ProtocolError(f"broken reply from {state.url}: {type(exc).__name__}: {exc}") from exc
        # a transport without tracing (MockTransport) still needs marks
        now = time.perf_counter_ns()
        if state.sent_ns is None:
            state.sent_ns = pre_send_ns
        if state.first_byte_ns is None:
            state.first_byte_ns = now
        state.http_status = response.status_code
        try:
            ctype = response.headers.get("content-type", "")
            if response.status_code >= 400:
                text = (await response.aread()).decode("utf-8", "replace")
                state.raw_json = _try_json(text) if self.keep_raw else None
                state.done_ns = time.perf_counter_ns()
                raise parse_error_body(response.status_code, text, url=state.url)
            if state.stream and "text/event-stream" in ctype:
                await self._read_stream(response, state)
            else:
                raw = await response.aread()
                state.done_ns = time.perf_counter_ns()
                try:
                    reply = json.loads(raw)
                except ValueError as exc:
                    raise ProtocolError(f"{state.url} replied {response.status_code} with a body that is not "
                                        f"JSON: {raw[:200]!r}") from exc
                state.raw_json = reply
                if isinstance(reply, dict) and ("error" in reply or reply.get("object") == "error"):
                    raise parse_error_body(response.status_code, raw.decode("utf-8", "replace"), url=state.url)
                state.fields.update(completion_fields(reply))
        except httpx.HTTPError as exc:
            state.done_ns = time.perf_counter_ns()
            raise ProtocolError(f"connection to {state.url} broke mid-reply after "
                                f"{state.assembler.chunk_count} events: {type(exc).__name__}: {exc}") from exc
        finally:
            await response.aclose()

    async def _read_stream(self, response: httpx.Response, state: _Attempt) -> None:
        asm = state.assembler
        data: list[str] = []
        t_event: int | None = None
        buf = bytearray()
        scan = 0

        def dispatch() -> None:
            nonlocal data, t_event
            if data:
                asm.feed("\n".join(data), t_event or time.perf_counter_ns(), url=state.url,
                         status=response.status_code)
                data, t_event = [], None
                if asm.stream_error is not None:
                    state.done_ns = time.perf_counter_ns()
                    raise asm.stream_error

        def take_line(raw: bytes, t_read: int) -> None:
            nonlocal t_event
            line = raw.decode("utf-8", "replace")
            if line.endswith("\r"):
                line = line[:-1]
            if line == "":
                dispatch()
            elif line.startswith("data:"):
                if t_event is None:
                    t_event = t_read
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
            # comments (":"), event:, id:, retry: lines carry nothing for chat completions

        # Our own line splitter over the decoded byte stream: no line-length cap, so a multi-MB event
        # (1M-token prompt echo, huge tool arguments) is assembled whole instead of hitting a fixed read
        # buffer (vllm#39963); and every event is stamped with the time its bytes came off the socket,
        # not the time the parser got to it, so parsing a burst does not inflate the later events' marks.
        async for piece in response.aiter_bytes():
            t_read = time.perf_counter_ns()
            buf += piece
            start = 0
            while (nl := buf.find(b"\n", scan)) >= 0:
                take_line(bytes(buf[start:nl]), t_read)
                start = scan = nl + 1
            if start:
                del buf[:start]
            scan = len(buf)
        if buf:
            take_line(bytes(buf), time.perf_counter_ns())
        dispatch()
        state.done_ns = time.perf_counter_ns()
        if not asm.done:
            raise ProtocolError(f"stream from {state.url} ended without `data: [DONE]` after "
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
