"""A server on a real socket, served from a daemon thread: the one starter of the embedded emulator and the
known-timing server (tests, the kit's own stand-ins).

A foundation module (standard library only): it runs the server it is given (uvicorn's `Server`, or anything with
`run(sockets=...)`, `started` and `should_exit`) and imports none.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["ServingThread", "bind_tcp", "serve_in_thread"]


def bind_tcp(host: str = "127.0.0.1", port: int = 0, *, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket (IPv6 when `host` has a colon), port 0: chosen by the OS.

    proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP, and without
    it Nagle and the delayed ACK hold each small write (an SSE event, a body after its headers) about 40 ms: a fake
    TTFT floor."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


@dataclass
class ServingThread:
    """A server serving `sock` from `thread`; `stop()` asks it to exit, waits, and closes the socket."""

    server: Any
    thread: threading.Thread
    sock: socket.socket

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)
        try:
            self.sock.close()
        except OSError:
            pass


def serve_in_thread(server: Any, sock: socket.socket, *, name: str,
                    ready_timeout_s: float) -> ServingThread | None:
    """Run `server` on `sock` in a daemon thread named `name`; returns once it serves, or None (the server told to
    exit and the socket closed) when it has not started within `ready_timeout_s` or its thread ended first: the
    caller says so in its own words."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + ready_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            ServingThread(server, thread, sock).stop(timeout_s=1.0)
            return None
        time.sleep(0.01)
    return ServingThread(server, thread, sock)
