"""Stop means stop: SIGINT or SIGTERM ends every request the kit sends within 5 s, keeps the finished evidence and
names `k3 validate --resume RUN` (issue 36).

The bridge from notebook cells to the async client (`run_sync`, `SyncChatClient`) is interrupted under a request
that never answers; then a whole `k3 validate` is stopped in the agent axis and in the soak (over worker processes)
against a target in another process — the emulator, and real vLLM on CPU — while its own request counter is read:
it must stop moving within 5 s of the signal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from k3lib.core.store import RunStore
from realvllm import PROFILE

ROOT = Path(__file__).resolve().parents[1]
K3 = [sys.executable, "-m", "k3lib"]
STOP_BOUND_S = 5.0  # the bound: no request of the kit reaches the target after this
WATCH_S = 8.0  # how long the target's counter is watched after the signal


# -- the bridge ----------------------------------------------------------------------------------------------------

class _Silent:
    """A socket that accepts, reads the request and never answers; it notes when the client hangs up."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.closed = threading.Event()
        self.accepted = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.accepted.set()
        with conn:
            while conn.recv(65536):
                pass
        self.closed.set()  # recv returned b"": the client closed its side

    def close(self) -> None:
        self.sock.close()


@pytest.fixture()
def interrupt_soon() -> Iterator[Any]:
    """`fire(after_s)`: a KeyboardInterrupt in the main thread, raised by a real signal (SIGUSR1 here, so that
    pytest's own SIGINT handling stays out of it) as a terminal's Ctrl-C would raise it."""
    def raise_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGUSR1, raise_interrupt)
    timers: list[threading.Timer] = []

    def fire(after_s: float) -> None:
        timers.append(threading.Timer(after_s, os.kill, (os.getpid(), signal.SIGUSR1)))
        timers[-1].start()

    yield fire
    for t in timers:
        t.cancel()
    signal.signal(signal.SIGUSR1, before)


@pytest.mark.parametrize("bridge", ["run_sync", "SyncChatClient"])
def test_an_interrupt_cancels_the_request_in_flight(interrupt_soon, bridge):
    from k3lib.io.client import ChatClient, SyncChatClient, run_sync
    from k3lib.io.client.sync import STOP_GRACE_S

    server = _Silent()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    try:
        interrupt_soon(0.5)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            if bridge == "run_sync":
                run_sync(ChatClient(server.url, timeout_s=60).chat_body(body, strict=False))
            else:
                with SyncChatClient(server.url, timeout_s=60) as client:
                    client.chat_body(body, strict=False)
        took = time.monotonic() - t0
        assert server.accepted.is_set(), "the request never reached the server"
        assert server.closed.wait(2.0), "the request's connection stayed open after the interrupt"
        assert took < 0.5 + STOP_GRACE_S + 1.0, f"the interrupt took {took:.1f} s to come back"
    finally:
        server.close()


# -- a whole batch, stopped --------------------------------------------------------------------------------------

def _counter(metrics_url: str) -> tuple[float, float]:
    """(finished requests, running requests) as the target counts them."""
    text = httpx.get(metrics_url, timeout=5).text
    done = running = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total"):
            done += float(line.rsplit(" ", 1)[-1])
        elif line.startswith("vllm:num_requests_running"):
            running += float(line.rsplit(" ", 1)[-1])
    return done, running


def stop_during(params: Path, out: Path, metrics_url: str, *, axis: str, phase: str, signum: int,
                min_done: int = 3, start_timeout_s: float = 600) -> dict[str, Any]:
    """Run `k3 validate -p params`, send `signum` once `axis` reports `phase…` with `min_done` requests finished,
    and watch the target's counter: when it last moved after the signal, the exit code and stderr."""
    proc = subprocess.Popen(K3 + ["validate", "-p", str(params), "--out", str(out)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        run = _wait_for_phase(proc, err, axis, phase, min_done, start_timeout_s)
        before = _counter(metrics_url)
        t0 = time.monotonic()
        proc.send_signal(signum)
        seen, exited_s = [(0.0, *before)], None
        while time.monotonic() - t0 < WATCH_S:
            seen.append((time.monotonic() - t0, *_counter(metrics_url)))
            if exited_s is None and proc.poll() is not None:
                exited_s = time.monotonic() - t0
            time.sleep(0.2)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    moved = [t for (t, d, _), (_, d0, _) in zip(seen[1:], seen) if d != d0]
    print(f"\n{signal.Signals(signum).name} in {axis}/{phase}: the target's counter last moved "
          f"{max(moved, default=0.0):.2f} s after it, k3 exited after {exited_s} s")
    return {"code": code, "stderr": "".join(err), "run": run, "last_move_s": max(moved, default=0.0),
            "exited_s": exited_s, "running_at_end": seen[-1][2], "moves": len(moved), "before": before}


def _wait_for_phase(proc: subprocess.Popen, err: list[str], axis: str, phase: str, min_done: int,
                    timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    run = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the batch ended before the phase to stop in:\n" + "".join(err)
        found = [m.group(1) for line in err if (m := re.match(r"run: (.+)$", line.strip()))]
        run = Path(found[0]) if found else None
        status = _status(run, axis) if run else None
        if status and status["phase"].startswith(phase) and status.get("phase_done", status["done"]) >= min_done:
            return run  # type: ignore[return-value]
        time.sleep(0.2)
    raise AssertionError(f"{axis} never reached {phase!r} with {min_done} requests done:\n" + "".join(err))


def _status(run: Path, axis: str) -> dict[str, Any] | None:
    try:
        return json.loads((run / ".progress" / f"{axis}.json").read_text())
    except (OSError, ValueError):
        return None


def _assert_stopped(result: dict[str, Any], signum: int, axis: str, notebook: str) -> None:
    assert result["last_move_s"] <= STOP_BOUND_S, \
        f"the target still counted requests {result['last_move_s']:.1f} s after the signal"
    assert result["running_at_end"] == 0, "requests still running on the target"
    assert result["code"] == 128 + signum, result["stderr"][-2000:]
    assert result["exited_s"] is not None and result["exited_s"] <= STOP_BOUND_S + 2
    name = signal.Signals(signum).name
    run = result["run"]
    last = [line for line in result["stderr"].splitlines() if line.strip()][-1]
    assert last.startswith(f"k3: stopped by {name}") and f"k3 validate --resume {run}" in last
    said = result["stderr"]
    assert "Traceback" not in said, said[max(said.find("Traceback") - 300, 0):][:4000]
    store = RunStore(run)
    # every finished file as the manifest hashed it; only the stopped axis' own open streams (its request records,
    # appended after their last hash) may have grown since
    assert all(p.startswith(f"evidence/{axis}/") for p in store.verify()), store.verify()
    files = store.manifest()["files"]
    for kept in ("evidence/probe.json", "evidence/environment.json", "notebooks/00_probe.ipynb"):
        assert kept in files, f"{kept}: finished before the stop, it must be kept"
    # the stopped axis is neither a finished notebook nor a failing axis: --resume runs it again
    assert f"notebooks/{notebook}" not in files and not store.path(f"evidence/{axis}.json").exists()


@pytest.fixture(scope="module")
def emulator_process() -> Iterator[str]:
    """The emulator in its own process, as a real server would be: its counters are the target's own."""
    proc = subprocess.Popen(K3 + ["emulator", "--port", "0", "--time-scale", "0.2"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    url = proc.stdout.readline().strip().split()[-1]  # type: ignore[union-attr]
    assert url.startswith("http://127.0.0.1:"), url
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _params(tmp_path: Path, base: Path, url: str, extra: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(f"extends: {base}\ntarget:\n  base_url: {url}\n{extra}")
    return path


@pytest.mark.slow
def test_sigint_during_the_agent_axis_stops_the_load(tmp_path, emulator_process):
    params = _params(tmp_path, ROOT / "parameters" / "emulator.yaml", emulator_process,
                     "axes:\n  agent:\n    repetitions: 40\n    max_duration_s: 120\n")
    result = stop_during(params, tmp_path / "out", f"{emulator_process}/metrics", axis="agent", phase="level",
                         signum=signal.SIGINT)
    _assert_stopped(result, signal.SIGINT, "agent", "02_agent_tools.ipynb")


@pytest.mark.slow
def test_sigterm_during_the_soak_over_worker_processes_stops_the_load(tmp_path, emulator_process):
    params = _params(tmp_path, ROOT / "parameters" / "emulator.yaml", emulator_process,
                     "load:\n  workers: 2\naxes:\n  agent:\n    repetitions: 1\n    concurrency_levels: [1]\n"
                     "    tool_turns: 4\n"  # the soak is the point: not the contract's 381-turn series
                     "  capacity:\n    soak_duration_s: 120\n    soak_max_requests: 100000\n")
    result = stop_during(params, tmp_path / "out", f"{emulator_process}/metrics", axis="capacity", phase="soak",
                         signum=signal.SIGTERM)
    _assert_stopped(result, signal.SIGTERM, "capacity", "03_capacity.ipynb")


@pytest.mark.slow
@pytest.mark.realvllm
def test_sigint_during_the_soak_on_real_vllm_stops_the_load(tmp_path, real_vllm):
    params = _params(tmp_path, PROFILE, real_vllm.base_url,
                     f"  allow_remote_load: false\naxes:\n  environment:\n    server_log: {real_vllm.log_path}\n"
                     # the soak is the point: the agent and the phases before it at their smallest
                     "  agent:\n    repetitions: 1\n    tool_turns: 2\n  capacity:\n    step_max_requests: 6\n"
                     "    concurrency_steps: [2]\n    context_lengths_tokens: [512]\n"
                     "    soak_duration_s: 120\n    soak_max_requests: 100000\n")
    result = stop_during(params, tmp_path / "out", f"{real_vllm.base_url}/metrics", axis="capacity", phase="soak",
                         signum=signal.SIGINT)
    _assert_stopped(result, signal.SIGINT, "capacity", "03_capacity.ipynb")
