"""Ending a child process the kit (or a test) started: SIGTERM, a bounded wait, then SIGKILL.

A foundation module (standard library only): the known-timing server, the emulator's node processes and the
tests' helper servers (Prometheus, JupyterLab) end the same way."""

from __future__ import annotations

import subprocess

__all__ = ["end_process"]


def end_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM `proc` and wait up to `timeout_s`; SIGKILL it if it lingers. A process already gone is left as is."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)
