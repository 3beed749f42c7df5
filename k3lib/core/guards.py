"""Checks made before anything is sent to a server: is the URL on this machine, is the API key's variable set.

A foundation module (standard library and `errors` only), so the client, the parameters and the axes share one
definition of each."""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from .errors import BadInputError

__all__ = ["api_key", "is_loopback_url", "require_key_env"]


def is_loopback_url(url: str) -> bool:
    """True when the URL's host is on this machine: 127.0.0.0/8, ::1, `localhost` or a `*.localhost` name
    (RFC 6761 reserves those for loopback)."""
    host = (urlsplit(url).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_key_env(name: str | None, *, source: str | None = None, field: str | None = None) -> None:
    """Refuse, before anything starts, a key variable that is named but unset or empty. The kit reads keys only
    from the environment, by the variable's name; the value is never stored or shown."""
    if name and not os.environ.get(name):
        raise BadInputError(f"environment variable {name} is not set or empty; export the API key there (the kit "
                            "only reads keys from the environment)", source=source, field=field)


def api_key(name: str | None, *, source: str | None = None, field: str | None = None) -> str | None:
    """The key held by the variable `name` (None when no variable is named), read now; refused as
    `require_key_env` does when the variable is unset or empty."""
    if not name:
        return None
    require_key_env(name, source=source, field=field)
    return os.environ[name]
