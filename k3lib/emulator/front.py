"""What may stand in front of the engine on the chat route: a gateway that rewrites the request (`strip-ignore-eos`,
`cap-max-tokens`) and a response cache that answers byte-identical bodies itself (`response-cache` on requests that
carry `tools`, `response-cache-all` on every one). Neither reaches the engine's counters: the cache's answers never
reach the engine at all, and the gateway's rewritten request is what the engine counts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, TypedDict, cast

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

Handler = Callable[[Request], Awaitable[Response]]
_CACHE_ATTR = "_front_response_cache"


class _Body(TypedDict, total=False):
    """The fields of a chat request the front-of-engine faults read (the rest is forwarded as it came)."""

    max_tokens: int
    max_completion_tokens: int
    ignore_eos: bool
    tools: list[Any]


#: a cached reply by its request's hash: (status, media type, body)
_Cache = dict[str, tuple[int, str, bytes]]


def _rewritten(rt: Any, body: _Body) -> _Body | None:
    """The body the gateway forwards, or None when no gateway fault applies."""
    faults = rt.faults
    out = body.copy()
    if "strip-ignore-eos" in faults:
        out.pop("ignore_eos", None)  # an allow-list gateway: not an OpenAI field
    if "cap-max-tokens" in faults:
        cap = int(faults.value("cap-max-tokens") or 64)
        if isinstance(asked := out.get("max_tokens"), int):
            out["max_tokens"] = min(asked, cap)
        if isinstance(asked := out.get("max_completion_tokens"), int):
            out["max_completion_tokens"] = min(asked, cap)
        if "max_tokens" not in out and "max_completion_tokens" not in out:
            out["max_tokens"] = cap
    return None if out == body else out


def _cached_scope(rt: Any, body: _Body) -> bool:
    return "response-cache-all" in rt.faults or ("response-cache" in rt.faults and bool(body.get("tools")))


async def _recorded(chunks: AsyncIterable[Any], store: _Cache, key: str, media: str) -> AsyncIterator[Any]:
    kept: list[bytes] = []
    async for chunk in chunks:
        kept.append(chunk.encode() if isinstance(chunk, str) else bytes(chunk))
        yield chunk
    store[key] = (200, media, b"".join(kept))


def fronted(handler: Handler) -> Handler:
    """`handler` behind the front-of-engine faults (a no-op when none is active)."""

    async def route(request: Request) -> Response:
        rt = request.app.state.emu.runtime
        if not any(f in rt.faults for f in ("strip-ignore-eos", "cap-max-tokens", "response-cache",
                                             "response-cache-all")):
            return await handler(request)
        try:
            body = json.loads(await request.body())
        except ValueError:
            return await handler(request)
        if not isinstance(body, dict):
            return await handler(request)
        body = cast(_Body, body)  # an untrusted body: the faults read only its length fields and tools
        changed = _rewritten(rt, body)
        if changed is not None:
            body = changed
            request._body = json.dumps(body).encode()  # what the engine behind the gateway reads
            request.__dict__.pop("_json", None)
        if not _cached_scope(rt, body):
            return await handler(request)
        store: _Cache = getattr(rt, _CACHE_ATTR, None) or {}
        setattr(rt, _CACHE_ATTR, store)
        key = hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=16).hexdigest()
        if key in store:
            status, media, content = store[key]
            return Response(content, status_code=status, media_type=media)
        reply = await handler(request)
        if reply.status_code != 200:
            return reply
        if isinstance(reply, StreamingResponse):
            reply.body_iterator = _recorded(reply.body_iterator, store, key, reply.media_type or "text/event-stream")
        else:
            store[key] = (200, reply.media_type or "application/json", bytes(reply.body))
        return reply

    return route
