"""The long exchange's filler: deterministic log lines that grow the context without asking for a tool.

Standard library only, so scripts/vllm_tiny_k3.py (run by the vLLM environment's python) loads this file by path to
train the tiny K3 model on the very lines the runner sends.
"""

from __future__ import annotations

import hashlib

_SERVICES = ("checkout", "payments", "inventory", "search", "gateway")
_ROUTES = ("/api/cart", "/api/pay", "/api/items", "/api/query", "/healthz")
_STATUSES = (200, 200, 200, 200, 201, 404, 500, 502, 503, 200)


def filler_lines(seed: str, n: int) -> str:
    """Deterministic log lines for the long exchange. The words avoid every sample tool's name and enum values,
    so the filler never makes a model (or the emulator) call a tool the turn did not ask for."""
    out = []
    for i in range(n):
        k = _mix(seed, i)
        out.append(f"2026-08-13t{(k >> 8) % 6:02d}:{(k >> 16) % 60:02d}:{(k >> 24) % 60:02d}z "
                   f"svc={_SERVICES[k % 5]} route={_ROUTES[(k >> 3) % 5]} status={_STATUSES[(k >> 5) % 10]} "
                   f"latency_ms={(k >> 32) % 2000} trace={(k >> 40) & 0xffffff:06x}")
    return "\n".join(out)


def _mix(seed: str, i: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "big")
