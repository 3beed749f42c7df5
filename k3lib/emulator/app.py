"""The emulator's ASGI app: its routes (vLLM's OpenAI-compatible API plus the emulator-only `/_emulator/*` admin
paths), the access log and, on node 0 of a multi-node layout, the routing of new requests to other nodes."""

from __future__ import annotations

import contextlib
import functools
from http import HTTPStatus
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .admin import (admin_attestation, admin_collect_env, admin_dcgm, admin_faults, admin_inspect, admin_log,
                    admin_nvidia_smi, admin_restart, admin_state)
from .config import EmulatorConfig
from .endpoints import detokenize, health, metrics, models, tokenize, version
from .front import fronted
from .generate import chat_completions, completions
from .state import EmulatorState


class _AccessLog:
    """Pure ASGI wrapper that writes uvicorn's access line into the emulated log (cheap on streams)."""

    def __init__(self, app, state: EmulatorState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"].startswith("/_emulator"):
            return await self.app(scope, receive, send)
        status = {}

        async def capture(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            code = status.get("code", 500)
            client = scope.get("client") or ("127.0.0.1", 0)
            try:
                phrase = HTTPStatus(code).phrase
            except ValueError:
                phrase = ""
            self.state.runtime.log.access(f"{client[0]}:{client[1]}", scope["method"], scope["path"], code, phrase)


def _routed(handler):
    """Node 0 of a multi-node layout sends a new request to the least-loaded rank, here or on another node."""

    @functools.wraps(handler)
    async def route(request: Request) -> Response:
        emu: EmulatorState = request.app.state.emu
        router = emu.router
        if router is not None and emu.runtime.ready and not emu.runtime.dead:
            peer = router.pick()
            if peer is not None:
                return await router.forward(request, peer)
            return await router.serve_locally(handler, request)
        return await handler(request)

    return route


def build_app(cfg: EmulatorConfig) -> tuple[Any, EmulatorState]:
    """The ASGI app for `cfg` and its shared state; the engine starts with the app's lifespan."""
    emu = EmulatorState(cfg)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await emu.runtime.start(emu.url)
        try:
            yield
        finally:
            await emu.runtime.stop()
            if emu.router is not None:
                await emu.router.aclose()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/v1/chat/completions", _routed(fronted(chat_completions)), methods=["POST"]),
        Route("/v1/completions", _routed(completions), methods=["POST"]),
        Route("/_emulator/faults", admin_faults, methods=["GET", "POST"]),
        Route("/_emulator/log", admin_log, methods=["GET"]),
        Route("/_emulator/collect_env", admin_collect_env, methods=["GET"]),
        Route("/_emulator/dcgm/metrics", admin_dcgm, methods=["GET"]),
        Route("/_emulator/inspect", admin_inspect, methods=["GET"]),
        Route("/_emulator/nvidia-smi", admin_nvidia_smi, methods=["GET"]),
        Route("/_emulator/attestation", admin_attestation, methods=["GET"]),
        Route("/_emulator/state", admin_state, methods=["GET"]),
        Route("/_emulator/restart", admin_restart, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.emu = emu
    return _AccessLog(app, emu), emu
