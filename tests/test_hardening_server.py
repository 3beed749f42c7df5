"""A misbehaving OpenAI-compatible server for the hardening tests, and checks that it misbehaves as designed.

`Misbehaving(upstream_url, mode)` listens on 127.0.0.1:<free port> and forwards everything (`/health`,
`/v1/models`, `/metrics`, `/tokenize`, the emulator's admin paths) to a healthy upstream emulator, except
`POST /v1/chat/completions`, which it breaks in the chosen `mode` (see `MODES`). The checks below drive each
mode with the kit's own client, so a mode that stopped breaking things would be caught here first.
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import struct
import threading
from typing import Any

import httpx
import pytest

#: mode → how `POST /v1/chat/completions` misbehaves
MODES = {
    "die-mid-stream": "forwards two events, then resets the connection in the middle of the chunked body",
    "truncated-sse": "forwards two events, then ends the body cleanly without `data: [DONE]`",
    "invalid-sse": "every event's JSON is cut in half (then a proper `data: [DONE]`)",
    "unknown-shape": "a 200 JSON body that is not a chat completion (no `choices`), streamed or not",
    "inject": "forwards, with HTML/JS markup prepended to every reply's content/reasoning, to the server log's "
              "OOM lines, and in an error line at the log's end",
}

# Markup a reviewer's browser must never run. Both would add a <k3-pwned> element and retitle the page; neither
# contains a double quote or a backslash, so they survive JSON, Prometheus labels and log lines unchanged.
_RUN = "document.title='K3PWNED';document.body.appendChild(document.createElement('k3-pwned'))"
SCRIPT_PAYLOAD = f"<script>{_RUN}</script>"
IMG_PAYLOAD = f"<img src=x onerror={_RUN}>"
PAYLOAD = SCRIPT_PAYLOAD + IMG_PAYLOAD
LOG_PAYLOAD = "<img src=x onerror=document.title='K3PWNED'>"  # short: it heads a log line, like a collector prefix


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args: Any) -> None:
        pass

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _forward_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type", "accept")}

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _start_chunked(self, status: int = 200, ctype: str = "text/event-stream") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _reset(self) -> None:
        """Die: an RST instead of the rest of the message (SO_LINGER 0), the way a killed process's socket goes."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.connection.close()

    def finish(self) -> None:
        try:
            super().finish()
        except (OSError, ValueError):
            pass  # the socket was reset on purpose

    def _proxy(self, method: str) -> None:
        body = self._body() if method == "POST" else None
        try:
            r = self.server.http.request(method, self.path, content=body, headers=self._forward_headers())
        except httpx.HTTPError as exc:
            self._send(502, json.dumps({"error": {"message": f"upstream: {exc}"}}).encode())
            return
        data = r.content
        if self.server.mode == "inject" and self.path.startswith("/_emulator/log"):
            # the markup rides on the lines a report quotes: the OOM lines, and an error line at the end
            # (at the head of the OOM lines: a report's table may cut a long line after 50 characters)
            lines = [(f"{LOG_PAYLOAD} " if re.search(r"out of memory|OutOfMemory", line, re.I) else "") + line
                     for line in r.text.splitlines()]
            lines.append(f"ERROR 08-13 10:00:00 [api_server.py:1] injected {PAYLOAD}")
            data = ("\n".join(lines) + "\n").encode()
        self._send(r.status_code, data, r.headers.get("content-type", "application/octet-stream"))

    # -- verbs ---------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        self._proxy("GET")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?")[0] != "/v1/chat/completions":
            self._proxy("POST")
            return
        raw = self._body()
        try:
            req = json.loads(raw)
        except ValueError:
            req = {}
        self.server.chat_requests += 1
        getattr(self, "_" + self.server.mode.replace("-", "_"))(raw, bool(req.get("stream")))

    # -- the modes -----------------------------------------------------------------------------------------------
    def _upstream_events(self, raw: bytes):
        """The upstream's SSE events, one `data: …` block at a time (None for a non-streamed reply: the body)."""
        with self.server.http.stream("POST", "/v1/chat/completions", content=raw,
                                     headers=self._forward_headers()) as r:
            if "text/event-stream" not in r.headers.get("content-type", ""):
                yield r.status_code, r.read()
                return
            buf = b""
            for piece in r.iter_bytes():
                buf += piece
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    yield r.status_code, event + b"\n\n"

    def _die_mid_stream(self, raw: bytes, stream: bool) -> None:
        if not stream:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "4096")
            self.end_headers()
            self.wfile.write(b'{"id": "chatcmpl-1", "object": "chat.completion", "choi')
            self._reset()
            return
        self._start_chunked()
        for n, (_, event) in enumerate(self._upstream_events(raw)):
            if n == 2:
                break
            self._chunk(event)
        self._reset()

    def _truncated_sse(self, raw: bytes, stream: bool) -> None:
        if not stream:
            self._send(200, b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mess')
            return
        self._start_chunked()
        for n, (_, event) in enumerate(self._upstream_events(raw)):
            if n == 2:
                break
            self._chunk(event)
        self._end_chunked()

    def _invalid_sse(self, raw: bytes, stream: bool) -> None:
        if not stream:
            self._send(200, b"data: {not json at all\n\n", "application/json")
            return
        self._start_chunked()
        for _, event in self._upstream_events(raw):
            payload = event.strip()
            if payload == b"data: [DONE]":
                continue
            self._chunk(payload[: max(8, len(payload) // 2)] + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._end_chunked()

    def _unknown_shape(self, raw: bytes, stream: bool) -> None:
        body = {"object": "text_completion.v9", "result": {"output": [{"text": "hello"}]}, "status": "ok"}
        self._send(200, json.dumps(body).encode())

    def _inject(self, raw: bytes, stream: bool) -> None:
        first = True
        for status, event in self._upstream_events(raw):
            if not event.startswith(b"data:"):  # a whole non-streamed body
                try:
                    reply = json.loads(event)
                    for choice in reply.get("choices") or ():
                        msg = choice.get("message") or {}
                        for key in ("content", "reasoning", "reasoning_content"):
                            if msg.get(key) or key == "content":
                                msg[key] = PAYLOAD + (msg.get(key) or "")
                    event = json.dumps(reply).encode()
                except (ValueError, AttributeError):
                    pass
                self._send(status, event)
                return
            if first:
                self._start_chunked(status)
                first = False
            payload = event[5:].strip()
            if payload != b"[DONE]":
                try:
                    chunk = json.loads(payload)
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        for key in ("content", "reasoning", "reasoning_content"):
                            if delta.get(key):
                                delta[key] = PAYLOAD + delta[key]
                    event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
                except ValueError:
                    pass
            self._chunk(event)
        if not first:
            self._end_chunked()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    mode: str
    http: httpx.Client
    chat_requests: int

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # resets and client disconnects are the point here


class Misbehaving:
    """The proxy; `with Misbehaving(upstream, mode) as m: m.url`."""

    def __init__(self, upstream_url: str, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.mode = mode
        self.server.http = httpx.Client(base_url=upstream_url, timeout=60.0)
        self.server.chat_requests = 0
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"misbehaving-{mode}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def chat_requests(self) -> int:
        return self.server.chat_requests

    def __enter__(self) -> "Misbehaving":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.server.http.close()


# ---------------------------------------------------------------------------------------------------------------
# The server misbehaves as designed (seen through the kit's own client)

CHAT = {"messages": [{"role": "user", "content": "Say hello in five words."}], "max_tokens": 16}

EXPECTED = [
    # mode, stream, error_kind, a phrase of the recorded error
    pytest.param("die-mid-stream", True, "ProtocolError", "broke mid-reply", id="die-mid-stream"),
    pytest.param("die-mid-stream", False, "ProtocolError", "broke mid-reply", id="die-mid-stream-whole"),
    pytest.param("truncated-sse", True, "ProtocolError", "without `data: [DONE]`", id="truncated-sse"),
    pytest.param("truncated-sse", False, "ProtocolError", "not JSON", id="truncated-whole"),
    pytest.param("invalid-sse", True, "ProtocolError", "invalid JSON in SSE event", id="invalid-sse"),
    pytest.param("unknown-shape", True, "ProtocolError", "not a chat completion", id="unknown-shape-stream"),
    pytest.param("unknown-shape", False, "ProtocolError", "not a chat completion", id="unknown-shape"),
]


@pytest.mark.parametrize("mode, stream, kind, phrase", EXPECTED)
def test_each_mode_breaks_the_reply_as_designed(emulator, mode, stream, kind, phrase):
    from k3lib.io.client import SyncChatClient

    with Misbehaving(emulator.url, mode) as m, SyncChatClient(m.url, timeout_s=10) as client:
        assert httpx.get(f"{m.url}/health", timeout=5).status_code == 200
        assert httpx.get(f"{m.url}/v1/models", timeout=5).json()["data"][0]["id"] == "kimi-k3"
        rec = client.chat_body({**CHAT, "stream": stream}, strict=False)
    assert not rec.ok
    assert rec.error_kind == kind, rec.error
    assert phrase in (rec.error or ""), rec.error
    assert m.chat_requests == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_inject_mode_carries_the_markup_in_an_otherwise_valid_reply(emulator, stream):
    from k3lib.io.client import SyncChatClient

    with Misbehaving(emulator.url, "inject") as m, SyncChatClient(m.url, timeout_s=10) as client:
        rec = client.chat_body({**CHAT, "stream": stream}, strict=False)
        log = httpx.get(f"{m.url}/_emulator/log", timeout=5).text
    assert rec.ok, rec.error
    assert PAYLOAD in (rec.content or "") + (rec.reasoning or "")
    assert PAYLOAD in log
    assert all(line.startswith(LOG_PAYLOAD) for line in log.splitlines() if "out of memory" in line.lower())


def test_closed_port_refuses():
    from k3lib.io.client import SyncChatClient

    with SyncChatClient(f"http://127.0.0.1:{closed_port()}", model="m", timeout_s=5) as client:
        rec = client.chat_body(CHAT, strict=False)
    assert rec.error_kind == "TargetUnreachable" and "cannot connect" in (rec.error or "")
