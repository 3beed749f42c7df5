"""Request admission: the checks a request meets before any work (auth, readiness, a dead engine, the model,
flaky 5xx), its JSON body, its prompt as token ids, and the vLLM-shaped error reply that refuses it."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import protocol
from .runtime import Runtime
from .tokenizer import render_chat


def error_reply(rt: Runtime, status: int, message: str, **kw: Any) -> JSONResponse:
    """The error reply vLLM sends for `status`, in the shape of the emulated version."""
    return JSONResponse(protocol.error_body(rt.cfg, status, message, **kw), status_code=status)


async def read_json(request: Request, rt: Runtime) -> dict | JSONResponse:
    """The request's JSON object, or the 400 reply vLLM gives a body that is not one."""
    raw = await request.body()
    # from here to the handler's next await is front-end work: one request's worth per loop iteration
    await rt.front_end.turn()
    try:
        body = json.loads(raw or b"{}")
    except json.JSONDecodeError as exc:
        return error_reply(rt, 400, f"JSON decode error: {exc.msg}")
    if not isinstance(body, dict):
        return error_reply(rt, 400, "Input should be a valid dictionary")
    return body


def gate(request: Request, rt: Runtime, body: dict | None, *, api: bool) -> JSONResponse | None:
    """Auth, readiness, dead engine, unknown model and flaky-5xx, in the order a real server meets them."""
    key = rt.cfg.api_key
    if key and request.url.path.startswith("/v1") and request.headers.get("authorization") != f"Bearer {key}":
        return JSONResponse({"error": "Unauthorized"}, status_code=401)
    if not rt.ready:
        return error_reply(rt, 503, "Engine core initialization failed. See root cause above. "
                              "Failed core proc(s): {'EngineCore_DP0': 1}")
    if body is not None:
        model = body.get("model")
        if model is not None and model not in (rt.cfg.served_model_name,):
            message = f"The model `{model}` does not exist."
            # vLLM logs the refusal as an ERROR line of its own (seen on 0.32.0), which the log reader counts
            rt.log.log(f"Error with model error=ErrorInfo(message={message!r}, type='NotFoundError', param='model', "
                       "code=404)", level="ERROR", where="serving.py:274")
            return error_reply(rt, 404, message, param="model")
    if api and rt.dead:
        return error_reply(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
    if api:
        rt.api_requests += 1
        if rt.faults.share_hit("flaky-5xx", rt.api_requests):
            if rt.faults.draw("flaky-5xx-kind", rt.api_requests) < 0.5:
                return error_reply(rt, 500, protocol.DEAD_ENGINE_MESSAGE)
            return error_reply(rt, 503, "Service Unavailable")
    return None


def encode_prompt(rt: Runtime, body: dict) -> list[int]:
    """The prompt's token ids: the chat template over `messages`, or the completion `prompt` (text or ids)."""
    if "messages" in body:
        messages = body.get("messages") or []
        if "history-reasoning-dropped" in rt.faults:
            # what a gateway, an SDK or a chat template that drops earlier reasoning leaves of the history
            messages = [{k: v for k, v in m.items() if k not in ("reasoning", "reasoning_content")}
                        if isinstance(m, dict) else m for m in messages]
        text = render_chat(messages, body.get("tools"),
                           add_generation_prompt=body.get("add_generation_prompt", True) is not False,
                           image_tokens=rt.cfg.image_tokens)
        return rt.tokenizer.encode(text)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        prompt = prompt[0] if prompt else ""
    return rt.tokenizer.encode(str(prompt))


async def admit(request: Request, *, api: bool) -> tuple[Runtime, dict[str, Any]] | Response:
    """The runtime and the JSON body of a request the server accepts, or the error reply that refuses it."""
    rt: Runtime = request.app.state.emu.runtime
    body = await read_json(request, rt)
    if isinstance(body, Response):
        return body
    return gate(request, rt, body, api=api) or (rt, body)
