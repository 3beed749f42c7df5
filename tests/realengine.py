"""The real engine for tests: llama.cpp's server built by scripts/realengine.sh, on a free loopback port.

`tests/conftest.py` registers the fixture once for the session (`real_engine` by name); it skips with the reason when
the opt-in build (`make realengine`) is missing (fails under K3_REQUIRE_REALENGINE=1, as CI runs it), and
always terminates the server it started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "realengine.sh"
VENV = ROOT / ".venv-llama"
MODEL = ROOT / "models" / "gemma3-270m-q4_k_m.gguf"
# Loading a 253 MB model on two busy cores takes a few seconds; a minute means something is wrong.
READY_TIMEOUT_S = 90.0
# CI sets this after `make realengine`: a missing build is then a failure, not a silent skip.
REQUIRE_ENV = "K3_REQUIRE_REALENGINE"
STOP_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class RealEngine:
    """A running server: `base_url` is the kit's `target.base_url` (the root, without /v1)."""

    base_url: str
    log_path: Path
    pid: int


def missing_reason() -> str | None:
    """Why the engine cannot be started here, or None. The script holds the pinned versions, so it decides."""
    if not (VENV / "bin" / "python").exists():
        return f"{VENV.name}/ is missing: run `make realengine` (builds llama-cpp-python, ~5 min) to enable this test"
    done = subprocess.run(["bash", str(SCRIPT), "check"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else (done.stdout.strip() or done.stderr.strip() or "not built")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_ready(base_url: str, proc: subprocess.Popen, log_path: Path, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Poll `/v1/models` until it answers 200; fail with the server's own last lines if it dies or hangs."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode} before it was ready:\n"
                                   f"{_log_tail(log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{base_url}/v1/models").status_code == 200:
                    return
            time.sleep(0.5)
    raise RuntimeError(f"{base_url}/v1/models not ready after {timeout_s:.0f}s:\n{_log_tail(log_path)}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's own process group (it was started in a new session), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def serve(log_path: Path, *, ready_timeout_s: float = READY_TIMEOUT_S) -> Iterator[RealEngine]:
    """Start `scripts/realengine.sh serve PORT` (the script execs the server, so the pid is the server's)."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    # one engine thread: the suite's two workers share the two cores (scripts/realengine.sh, K3_REALENGINE_THREADS)
    env = {"K3_REALENGINE_THREADS": "1", **os.environ, "K3_REALENGINE_LOG": str(log_path)}
    # the script's own words (before it execs the server) go beside the server's log, for the failure message
    script_out = log_path.with_name(log_path.stem + ".script.txt")
    with open(script_out, "wb") as out:
        proc = subprocess.Popen(["bash", str(SCRIPT), "serve", str(port)], cwd=ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        try:
            wait_ready(base_url, proc, log_path, ready_timeout_s)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{SCRIPT.name}: {_log_tail(script_out, 5)}") from None
        yield RealEngine(base_url=base_url, log_path=log_path, pid=proc.pid)
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def real_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    """One llama.cpp server for the whole session (tests/conftest.py registers it); skipped (with the reason) when
    the opt-in build is missing, failed instead when K3_REQUIRE_REALENGINE=1."""
    reason = missing_reason()
    if reason and os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    if reason:
        pytest.skip(reason)
    log_path = tmp_path_factory.mktemp("realengine") / "server.log"
    with serve(log_path) as engine:
        yield engine
