"""Whether two URLs reach the same server, by what their names resolve to, never by how they are spelled:
`localhost`, `127.0.0.1`, `::1`, `0.0.0.0`, the machine's own name, every address its interfaces carry (a server
bound to all of them answers on each) and any other DNS name of the same address are one host. Resolution is the
system resolver's (`getaddrinfo`); a name it cannot resolve is compared as written, folded."""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["host_key", "same_host", "same_origin", "origin"]

_THIS_MACHINE = "this machine"


def _is_local(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    ip = mapped or ip
    return ip.is_loopback or ip.is_unspecified


@lru_cache(maxsize=64)
def _own_addresses() -> frozenset[str]:
    """What this machine's name resolves to, and every address its interfaces carry (the kernel's own tables where
    it shows them: Linux's /proc/net; a machine whose name resolves to 127.0.0.1 still answers on its eth0)."""
    try:
        named = {str(i[4][0]) for i in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        named = set()
    return frozenset(named | interface_addresses())


def interface_addresses(root: Path = Path("/proc/net")) -> frozenset[str]:
    """The IPv4 addresses the kernel routes as this host's own (`fib_trie`: `/32 host LOCAL`) and the IPv6 ones its
    interfaces carry (`if_inet6`); none where the tables cannot be read."""
    out: set[str] = set()
    try:
        last = None
        for line in (root / "fib_trie").read_text(encoding="ascii", errors="replace").splitlines():
            text = line.strip()
            if text.startswith("|-- "):
                last = text[4:].strip()
            elif last and text.startswith("/32 host LOCAL"):
                out.add(last)
    except OSError:
        pass
    try:
        for line in (root / "if_inet6").read_text(encoding="ascii", errors="replace").splitlines():
            raw = line.split()[0] if line.split() else ""
            if len(raw) == 32:
                out.add(str(ipaddress.IPv6Address(int(raw, 16))))
    except (OSError, ValueError):
        pass
    return frozenset(a for a in out if _valid(a))


def _valid(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=256)
def host_key(host: str | None) -> frozenset[str]:
    """The addresses `host` resolves to, every address of this machine (loopback, unspecified, its own name's) as
    one; a name that does not resolve stands for itself."""
    name = (host or "").strip("[]").rstrip(".").casefold()
    if not name:
        return frozenset()
    try:
        found = {str(i[4][0]) for i in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError):
        return frozenset({name})
    own = _own_addresses()
    return frozenset(_THIS_MACHINE if _is_local(a) or a in own else a for a in found) or frozenset({name})


def same_host(a: str | None, b: str | None) -> bool:
    """Whether two host names (or addresses) reach one host."""
    ka, kb = host_key(a), host_key(b)
    return bool(ka & kb)


def _port(url: str) -> int | None:
    parts = urlsplit(url)
    try:
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def same_origin(a: str, b: str) -> bool:
    """Whether two http(s) URLs reach the same host and port."""
    pa, pb = urlsplit(a), urlsplit(b)
    return pa.scheme in ("http", "https") and pb.scheme in ("http", "https") and _port(a) == _port(b) and \
        same_host(pa.hostname, pb.hostname)
