"""The embedded vLLM-compatible emulator: a real HTTP server with a scheduler, paged KV cache, GPU memory
model, vLLM's metric names and log formats, and switchable faults."""

from .config import EmulatorConfig
from .faults import FAULTS
from .profiles import PROFILES
from .server import EmulatorHandle, serve_forever, start_emulator, started_here

__all__ = ["EmulatorConfig", "EmulatorHandle", "FAULTS", "PROFILES", "serve_forever", "start_emulator", "started_here"]
