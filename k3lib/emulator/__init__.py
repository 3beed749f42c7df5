"""The embedded vLLM-compatible emulator: a real HTTP server with a scheduler, paged KV cache, GPU memory
model, vLLM's metric names and log formats, and switchable faults.

The server (`start_emulator`, `serve_forever`...) loads on first use: `k3 --help` builds the emulator's arguments
from its configuration, profiles and faults without loading the HTTP stack."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import EmulatorConfig
from .faults import FAULTS
from .profiles import PROFILES

if TYPE_CHECKING:
    from .server import EmulatorHandle, serve_forever, start_emulator, started_here

_SERVER = ("EmulatorHandle", "serve_forever", "start_emulator", "started_here")

__all__ = ["EmulatorConfig", "EmulatorHandle", "FAULTS", "PROFILES", "serve_forever", "start_emulator", "started_here"]


def __getattr__(name: str) -> Any:
    if name in _SERVER:
        return getattr(importlib.import_module(f"{__name__}.server"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
