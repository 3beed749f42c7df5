"""Start and stop the emulator on a real socket: in a background thread (tests, the kit) or in the
foreground until SIGINT/SIGTERM (`k3 emulator`, `python -m k3lib.emulator`)."""

from __future__ import annotations

import gc
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import TargetUnreachable
from ..core.serving import ServingThread, bind_tcp, serve_in_thread
from .app import build_app
from .config import EmulatorConfig

if TYPE_CHECKING:
    pass


def _bind(host: str, port: int) -> socket.socket:
    sock = bind_tcp(host, port, backlog=2048)
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def _server(cfg: EmulatorConfig, url: str):
    import uvicorn  # the app is only built when a server is actually started

    app, emu = build_app(cfg)
    emu.url = url
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", loop="asyncio",
                            http="httptools", ws="none", timeout_graceful_shutdown=2, backlog=2048)
    return uvicorn.Server(config), emu


# The emulators this process started and still serves, by URL: a target the kit started itself (its demo stand-in may
# vouch for its own operations), as opposed to one at a URL someone gave it.
_RUNNING: set[str] = set()


def started_here(url: str | None) -> bool:
    """Whether `url` is an emulator this process started and still serves."""
    return bool(url) and str(url).rstrip("/") in _RUNNING


class EmulatorUrls:
    """Where an emulator (or one node of it) serves its `/metrics` and its dcgm-exporter page, from its `url`."""

    url: str

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    @property
    def dcgm_url(self) -> str:
        return self.url + "/_emulator/dcgm/metrics"


@dataclass
class EmulatorHandle(EmulatorUrls):
    """A running emulator; `stop()` shuts it down cleanly. Also a context manager."""

    url: str
    port: int
    config: EmulatorConfig
    _serving: ServingThread

    def stop(self, timeout_s: float = 10.0) -> None:
        _RUNNING.discard(self.url)
        self._serving.stop(timeout_s)

    def __enter__(self) -> "EmulatorHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_emulator(cfg: EmulatorConfig | None = None, host: str = "127.0.0.1", port: int = 0,
                   *, ready_timeout_s: float = 15.0) -> EmulatorHandle:
    """Serve `cfg` on a real socket from a daemon thread; returns once the server accepts requests."""
    cfg = cfg or EmulatorConfig.from_profile("demo")
    sock = _bind(host, port)
    real_port = sock.getsockname()[1]
    url = _url(host, real_port)
    server, _ = _server(cfg, url)
    serving = serve_in_thread(server, sock, name=f"k3-emulator-{real_port}", ready_timeout_s=ready_timeout_s)
    if serving is None:
        raise TargetUnreachable(f"the emulator did not start serving on {url} within {ready_timeout_s:.0f} s")
    _RUNNING.add(url)
    return EmulatorHandle(url, real_port, cfg, serving)


def _exit_with_parent() -> None:
    """A node process started by the kit (stdout a pipe to it) ends when the kit does, even after a kill -9."""

    parent = os.getppid()
    if sys.stdout.isatty() or parent == 1:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="k3-emulator-parent-watch", daemon=True).start()


def serve_forever(cfg: EmulatorConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
    """Print the URL alone on the first stdout line, then serve until SIGINT/SIGTERM."""
    cfg = cfg or EmulatorConfig.from_profile("demo")
    sock = _bind(host, port)
    url = _url(host, sock.getsockname()[1])
    server, _ = _server(cfg, url)
    # A process of its own: what start-up built (the tokenizer's vocabulary, the app) lives as long as the
    # process, so it leaves the collector's generations (gc.freeze, as vLLM does once warmed up: freeze_gc_heap);
    # a full collection then walks only what the requests made, not 46-71 ms of start-up objects in the middle of
    # a step (seen at 256 streams on 2 loaded cores).
    gc.collect()
    gc.freeze()
    _exit_with_parent()
    print(url, flush=True)
    sys.stdout.flush()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
