"""The known-timing server: a stand-in for vLLM whose every reply follows a fixed schedule, the yardstick the client's
own timing error is measured against (k3lib.io.calibration).

`KnownTimingServer` streams chunks on that schedule (TTFT, then one chunk per gap, 2 tokens per chunk) and stamps
each chunk with its own `perf_counter_ns`; it runs in a thread or in a child process of its own.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

import httpx

from k3lib.core.procs import end_process
from k3lib.core.serving import ServingThread, bind_tcp, serve_in_thread
from k3lib.core.turns import loop_turns


@dataclass(frozen=True)
class KnownTimingConfig:
    """The schedule every reply follows. A request may override it with `k3_ttft_ms`, `k3_itl_ms`,
    `k3_chunks` or `k3_stall_s` body fields (a test server's private knobs; vLLM would reject them)."""

    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    chunks: int = 20
    #: tokens per chunk: 2 proves that a client counting chunks as tokens is wrong (vllm#27485)
    tokens_per_chunk: int = 2
    model: str = "known-timing"
    #: SSE events sent per socket write once the schedule is due — >1 only to measure client parse throughput
    events_per_write: int = 1
    max_model_len: int = 1_048_576


def _words(text: str) -> int:
    return len(text.split())


def _message_text(messages: Any) -> str:
    parts: list[str] = []
    for m in messages or ():
        if isinstance(m, dict):
            c = m.get("content")
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return " ".join(parts)


def _chat_prompt_tokens(messages: Any) -> int:
    # a toy tokenizer: one token per whitespace word plus 3 template tokens per message and 2 for the prompt
    msgs = [m for m in messages or () if isinstance(m, dict)]
    return sum(_words(_message_text([m])) + 3 for m in msgs) + 2


def build_known_timing_app(config: KnownTimingConfig) -> Any:
    """The Starlette app. Imported lazily so nothing heavy happens at `import k3lib.io.knowntiming`."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse

    chat = _ChatRoute(config, JSONResponse)
    rest = Starlette(routes=_rest_routes(config))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        # the chat route ahead of the router and its middleware: a burst of requests queues behind every
        # handler's start on the server's one loop, so what each costs is what the last one waits
        if scope["type"] == "http" and scope["path"] == "/v1/chat/completions" and scope["method"] == "POST":
            await chat(scope, receive, send)
        else:
            await rest(scope, receive, send)

    return app


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _sleep_until(target_ns: int) -> None:
    # again while early: a loop's timers may wake up to a millisecond before their time (libuv's resolution),
    # and a chunk sent before its schedule would hide the client's own delay
    while (delay := (target_ns - time.perf_counter_ns()) / 1e9) > 0:
        await asyncio.sleep(delay)


async def _read_body(receive: Any) -> bytes:
    raw = bytearray()
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            return bytes(raw)


class _Knobs(TypedDict, total=False):
    """The schedule a calibration request asks of the server (`k3lib.io.calibration.CalibrationBody`)."""

    k3_ttft_ms: float
    k3_itl_ms: float
    k3_chunks: int
    k3_stall_s: float


@dataclass(frozen=True)
class _Schedule:
    """One reply's schedule: the server's, or the request's `k3_*` overrides."""

    ttft_ns: int
    itl_ns: int
    chunks: int
    stall_s: float

    @classmethod
    def of(cls, body: _Knobs, config: KnownTimingConfig) -> _Schedule:
        return cls(ttft_ns=int(float(body.get("k3_ttft_ms", config.ttft_ms)) * 1e6),
                   itl_ns=int(float(body.get("k3_itl_ms", config.itl_ms)) * 1e6),
                   chunks=int(body.get("k3_chunks", config.chunks)), stall_s=float(body.get("k3_stall_s", 0.0)))


class _ChatRoute:
    """The chat route as a bare ASGI app: each event goes straight to the server's `send`, without a streaming
    response's task group in between."""

    def __init__(self, config: KnownTimingConfig, json_response: Any) -> None:
        self.config = config
        self.json_response = json_response
        self.base = {"id": "chatcmpl-known", "model": config.model, "system_fingerprint": "known-timing-1"}
        self.tpc = tpc = config.tokens_per_chunk
        # one content event, split around its send stamp: the server's cost per event is what bounds how late a
        # burst of streams gets its chunks, so each is two joins and one integer, no JSON encoder
        stamped = _sse({**self.base, "object": "chat.completion.chunk", "k3_sent_ns": 0,
                        "choices": [{"index": 0, "delta": {"content": "\x00"}}]})
        head, remainder = stamped.split(b'"k3_sent_ns":0', 1)
        self.head = head + b'"k3_sent_ns":'
        self.middle, self.tail = remainder.split(b"\\u0000", 1)
        self.burst = b"".join(_sse({**self.base, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"content": " w0 w1"[: 3 * tpc]}}]}) for _ in range(config.events_per_write))
        self.role = _sse({**self.base, "object": "chat.completion.chunk",
                          "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        self.finish = _sse({**self.base, "object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self.sse_headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # the schedule runs from the request's arrival (see `_arrival_stamped_protocol`), not from when this
        # handler got its turn: a burst of requests waits behind the others' handlers on the server's one loop,
        # and that wait is the instrument's own, not the client's timing error
        t0 = (scope.get("extensions") or {}).get(ARRIVAL_EXTENSION) or time.perf_counter_ns()
        # one handler start per loop iteration (k3lib.core.turns): a burst of hundreds of requests (several load workers
        # sending at once) otherwise starts all its handlers in one iteration, and the arrivals still in the socket
        # buffers behind it are stamped only once that long iteration ends, late by all of it
        await loop_turns().turn()
        raw = await _read_body(receive)
        try:
            body = json.loads(raw)
        except ValueError:
            await self.json_response({"object": "error", "message": "body is not JSON", "type": "BadRequestError",
                                      "code": 400}, status_code=400)(scope, receive, send)
            return
        plan = _Schedule.of(body, self.config)
        prompt_tokens = _chat_prompt_tokens(body.get("messages"))
        out_tokens = plan.chunks * self.tpc
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                 "total_tokens": prompt_tokens + out_tokens, "prompt_tokens_details": {"cached_tokens": 0}}
        if not body.get("stream"):
            await _sleep_until(t0 + plan.ttft_ns + max(0, plan.chunks - 1) * plan.itl_ns)
            if plan.stall_s:
                await asyncio.sleep(plan.stall_s)
            text = " ".join(f"w{i}" for i in range(out_tokens))
            await self.json_response({**self.base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
            )(scope, receive, send)
            return
        await self._stream(plan, t0, send)
        if (body.get("stream_options") or {}).get("include_usage"):
            await send({"type": "http.response.body", "more_body": True,
                        "body": _sse({**self.base, "object": "chat.completion.chunk", "choices": [], "usage": usage})})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    async def _stream(self, plan: _Schedule, t0: int, send: Any) -> None:
        """The streamed reply on its schedule, up to its finish event."""
        events_per_write = self.config.events_per_write
        await send({"type": "http.response.start", "status": 200, "headers": self.sse_headers})
        # the role event goes out with the first output, as vLLM's stream sends it once the first token exists
        lead = self.role
        k = 0
        while k < plan.chunks:
            await _sleep_until(t0 + plan.ttft_ns + k * plan.itl_ns)
            n = min(events_per_write, plan.chunks - k)
            if plan.itl_ns == 0 and n == events_per_write > 1:
                # throughput mode: one pre-serialized block, so the server's cost per event stays far
                # below the client's and the client is what gets measured
                block = self.burst
            else:
                block = self._stamped(k, n)
            if lead:
                block, lead = lead + block, b""
            await send({"type": "http.response.body", "body": block, "more_body": True})
            k += n
            if plan.stall_s and k == 1:
                await asyncio.sleep(plan.stall_s)
        await send({"type": "http.response.body", "body": lead + self.finish, "more_body": True})

    def _stamped(self, k: int, n: int) -> bytes:
        """Content events k … k+n-1, each stamped with the `perf_counter_ns` it is built at."""
        tpc, head, middle, tail = self.tpc, self.head, self.middle, self.tail
        parts: list[bytes] = []
        for j in range(k, k + n):
            words = "".join(f" w{j * tpc + i}" for i in range(tpc)).encode()
            parts += (head, b"%d" % time.perf_counter_ns(), middle, words, tail)
        return b"".join(parts)


def _rest_routes(config: KnownTimingConfig) -> list[Any]:
    """Everything but the chat route: /tokenize (the toy tokenizer), /v1/models, /health, /version."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def tokenize(request: Request) -> Response:
        body = await request.json()
        if "messages" in body:
            count = _chat_prompt_tokens(body["messages"])
        else:
            count = _words(body.get("prompt", ""))
        return JSONResponse({"count": count, "max_model_len": config.max_model_len,
                             "tokens": list(range(count)), "token_strs": None})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": config.model, "object": "model", "owned_by": "k3kit", "root": config.model,
             "max_model_len": config.max_model_len}]})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def version(request: Request) -> Response:
        return JSONResponse({"version": "known-timing"})

    return [Route("/tokenize", tokenize, methods=["POST"]), Route("/v1/models", models), Route("/health", health),
            Route("/version", version)]


#: ASGI scope extension carrying the `perf_counter_ns` at which the server read a request's first bytes
ARRIVAL_EXTENSION = "k3.arrival_ns"


def _arrival_stamped_protocol() -> Any:
    """uvicorn's httptools protocol, stamping each request when its first bytes are parsed (inside
    `data_received`, before the request waits for the event loop). "auto" when httptools is missing: the
    schedule then runs from the handler's start, an upper bound."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return "auto"

    class ArrivalStamped(HttpToolsProtocol):  # type: ignore[misc]
        def on_message_begin(self) -> None:
            super().on_message_begin()
            scope = getattr(self, "scope", None)
            if isinstance(scope, dict):
                scope["extensions"] = {**(scope.get("extensions") or {}), ARRIVAL_EXTENSION: time.perf_counter_ns()}

    return ArrivalStamped


def _uvicorn_server(config: KnownTimingConfig) -> Any:
    import uvicorn

    # uvloop where installed, as vLLM serves (uvicorn[standard]): its cost per event is what bounds how late a
    # burst of hundreds of streams gets its chunks, and so the client error this instrument can vouch for
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    cfg = uvicorn.Config(build_known_timing_app(config), log_level="warning", access_log=False, loop=loop,
                         lifespan="off", timeout_graceful_shutdown=1, backlog=4096,
                         http=_arrival_stamped_protocol(), proxy_headers=False)
    return uvicorn.Server(cfg)


def serve_forever_from_argv(argv: Sequence[str]) -> None:
    """Child-process entry: `argv[0]` is the config as JSON, `argv[1]` an optional CPU to pin to.

    Prints the bound port on stdout, then serves until terminated.
    """

    config = KnownTimingConfig(**json.loads(argv[0]))
    if len(argv) > 1 and argv[1] != "" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(argv[1])})
    sock = bind_tcp("127.0.0.1", 0, backlog=4096)
    sys.stdout.write(f"{sock.getsockname()[1]}\n")
    sys.stdout.flush()
    server = _uvicorn_server(config)
    # the start-up heap (imports, the app) out of the collector: a full collection of it stalled the loop ~30 ms
    # in the middle of a 64-request burst
    gc.freeze()
    server.run(sockets=[sock])


class KnownTimingServer:
    """A running known-timing server on 127.0.0.1, port chosen by the OS. Use as a context manager.

    `in_process=True` runs uvicorn in a thread (fast to start, fine for tests); `False` runs it in a child
    process, optionally pinned to `cpu`, so its work does not steal the client's GIL — use that to calibrate.
    """

    def __init__(self, config: KnownTimingConfig | None = None, *, in_process: bool = True,
                 cpu: int | None = None) -> None:
        self.config = config or KnownTimingConfig()
        self.in_process = in_process
        self.cpu = cpu
        self.url = ""
        self._serving: ServingThread | None = None
        self._process: Any = None

    def start(self, timeout_s: float = 20.0) -> KnownTimingServer:
        if self.in_process:
            sock = bind_tcp("127.0.0.1", 0, backlog=4096)
            port = sock.getsockname()[1]
            self._serving = serve_in_thread(_uvicorn_server(self.config), sock, name="k3lib-known-timing",
                                            ready_timeout_s=timeout_s)
            if self._serving is None:
                raise RuntimeError("known-timing server did not start")
        else:
            # a plain subprocess, not multiprocessing: spawn would re-import a notebook's or script's __main__
            code = "import sys; from k3lib.io.knowntiming import serve_forever_from_argv as s; s(sys.argv[1:])"
            args = [sys.executable, "-c", code, json.dumps(asdict(self.config)),
                    "" if self.cpu is None else str(self.cpu)]
            self._process = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            line = _read_line(self._process.stdout, timeout_s)
            if not line.strip().isdigit():
                self._process.kill()
                raise RuntimeError("known-timing server process did not report its port")
            port = int(line)
            _wait_healthy(f"http://127.0.0.1:{port}", timeout_s)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.stop(timeout_s=10)
            self._serving = None
        if self._process is not None:
            end_process(self._process)
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None

    def __enter__(self) -> KnownTimingServer:
        return self.start() if not self.url else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_line(stream: Any, timeout_s: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline().decode()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return box[0] if box else ""


def _wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1.0, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"known-timing server at {url} never became healthy")

