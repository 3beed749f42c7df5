"""Probe one absolute URL (`/health`, `/version`, `/v1/models`): a `ProbeRecord`, failures as values."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .chat import ChatClient
from .records import BODY_TEXT_LIMIT_CHARS, ProbeRecord
from .sync import run_sync


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
