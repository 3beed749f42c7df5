"""How the client reaches its target: the root URL of an OpenAI-compatible server, and the bearer key read from
the environment at each send, never stored."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import httpx

from k3lib.core.errors import BadInputError


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


#: The environment variable whose value every request of the kit sends as its User-Agent (an operator gives the one
#: their production clients send, so that nothing tells a gateway or a cache the kit's requests from theirs). Unset:
#: the HTTP library's own (aiohttp's, httpx's), which names no kit. A worker process inherits it.
USER_AGENT_ENV = "K3_USER_AGENT"


def user_agent_headers() -> dict[str, str]:
    """`{"user-agent": …}` when `K3_USER_AGENT` is set, else empty."""
    value = os.environ.get(USER_AGENT_ENV, "").strip()
    return {"user-agent": value} if value else {}


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
