"""Ending the helper processes a test started (Prometheus, JupyterLab, emulator nodes): SIGTERM, then SIGKILL."""

from __future__ import annotations

import subprocess


def terminate(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM `proc` and wait up to `timeout_s`; SIGKILL it if it lingers. A process already gone is left as is."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)
