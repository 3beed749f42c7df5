"""Shared fixtures: where the real-world artifacts live, one emulator per test session on a real socket, and the
real servers (llama.cpp, real vLLM), each started at most once per session."""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

# The real servers' fixtures, registered here once for the whole session: a fixture imported into each test module
# that uses it is a fixture per module, and its server would start once per module (five CPU vLLM starts).
from realengine import real_engine  # noqa: F401
from realvllm import real_vllm, real_vllm_k3, real_vllm_small_kv  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
REAL_WORLD = ROOT.parent / "shared" / "real-world"


def needs_tool(available: bool, reason: str) -> pytest.MarkDecorator:
    """Skip a test whose Debian tool is missing here, but never in CI (`CI=true`): .ci/run installs every tool
    the tests use, so a missing one there fails the tests that need it instead of skipping them silently."""
    return pytest.mark.skipif(not available and os.environ.get("CI") != "true", reason=reason)


@pytest.fixture(scope="session")
def real_world() -> Path:
    if not REAL_WORLD.is_dir() or not (REAL_WORLD / "labels.json").is_file():
        pytest.fail(f"{REAL_WORLD} is missing: CI keeps ../shared beside the checkout")
    return REAL_WORLD


def real_world_missing(*values: object) -> object:
    """The one case a test parametrized over the real-world artifacts collects when they are absent: it fails
    (`pytest_runtest_setup` below), never a silent skip nor an empty parameter set that pytest skips."""
    return pytest.param(*values, id="real-world-missing", marks=pytest.mark.real_world_missing)


# A test that reads a real server, or a whole batch shared through a session fixture, is marked by what it uses: the
# unit layer (`make test-fast`: -m "not slow and not realengine and not realvllm and not airflow") leaves it out.
FIXTURE_MARKS = {"real_engine": "realengine", "real_vllm": "realvllm", "real_vllm_k3": "realvllm",
                 "real_vllm_small_kv": "realvllm", "healthy_run": "slow", "renewal_run": "slow"}


# Under pytest-xdist (`make test`: `-n 2 --dist loadgroup`) a group runs whole on one worker. Every test of a real
# server is in that server's group, so each server starts once and two CPU servers never share the two cores; any
# other test is grouped by its module, whose module fixtures (a batch, an emulator) are then built once. The real
# servers' groups are handed out first (the longest), then the modules holding whole batches, then the rest.
SERVER_GROUPS = ("realvllm", "realengine", "airflow")


def _group(item: pytest.Item) -> tuple[int, str]:
    for rank, mark in enumerate(SERVER_GROUPS):
        if item.get_closest_marker(mark) is not None:
            return rank, mark
    return len(SERVER_GROUPS), item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for mark in sorted({FIXTURE_MARKS[f] for f in getattr(item, "fixturenames", ()) if f in FIXTURE_MARKS}):
            item.add_marker(mark)
    groups = {item.nodeid: _group(item) for item in items}
    slow_modules = {groups[i.nodeid][1] for i in items if i.get_closest_marker("slow") is not None}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid][1]))
    # stable: the order inside a group is the collection's
    def order(item: pytest.Item) -> int:
        rank, group = groups[item.nodeid]
        return rank if rank < len(SERVER_GROUPS) else rank + (0 if group in slow_modules else 1)

    items.sort(key=order)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("real_world_missing") is not None:
        pytest.fail(f"{REAL_WORLD} is missing: CI keeps ../shared beside the checkout")


@pytest.fixture(scope="session")
def emulator():
    """A healthy demo emulator on 127.0.0.1:<free port>, shared by the whole session (read-mostly tests)."""
    from k3lib.emulator import EmulatorConfig, start_emulator

    handle = start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0)
    yield handle
    handle.stop()


@pytest.fixture()
def clean_env(monkeypatch):
    """No inherited K3_* or API-key variables leak into a test."""
    for name in list(os.environ):
        if name.startswith("K3_"):
            monkeypatch.delenv(name)
    return monkeypatch


# The healthy run's API key: the embedded emulator then guards /v1 with it (as `vllm serve --api-key`), so the batch
# must send it on every request, and tests/test_batch.py checks that its value reached no file of the run.
HEALTHY_KEY_ENV, HEALTHY_KEY = "K3_TEST_API_KEY", "k3-test-secret-6f1c2a9e4b7d"


@contextmanager
def built_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """A folder that the whole suite builds once: under pytest-xdist each worker is a session of its own, so the
    first worker to ask builds it in the run's shared temporary folder while the others wait on its lock, then
    read what it left. Yields (the folder, whether it is already built); the caller builds it when it is not, and
    the folder counts as built once the caller's block ends without an exception."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / name, shared / f"{name}.built"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        built = done.is_file()
        if not built:
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed half-way left it
            folder.mkdir(parents=True)
        yield folder, built
        done.touch()


@pytest.fixture(scope="session")
def healthy_run(tmp_path_factory):
    """`k3 validate -p parameters/emulator.yaml --set target.api_key_env=K3_TEST_API_KEY` once per suite (the
    workers share it: tests read it, or copy it before changing anything), the key set only while it runs:
    (exit code, RunStore)."""
    from k3lib.cli.main import main
    from k3lib.core.store import RunStore

    with built_once(tmp_path_factory, "healthy") as (out, built):
        if not built:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv(HEALTHY_KEY_ENV, HEALTHY_KEY)
                code = main(["validate", "-p", str(ROOT / "parameters" / "emulator.yaml"), "--out", str(out / "runs"),
                             "--set", f"target.api_key_env={HEALTHY_KEY_ENV}"])
            (out / "exit_code").write_text(str(code))
    (run,) = [p for p in (out / "runs").iterdir() if p.is_dir()]
    return int((out / "exit_code").read_text()), RunStore(run)


@pytest.fixture(scope="session")
def renewal_run(tmp_path_factory):
    """`k3 review --demo steady` once per suite (the workers share it): its RunStore (the steady demo renews:
    exit 0)."""
    from k3lib.cli.main import main
    from k3lib.core.store import RunStore

    with built_once(tmp_path_factory, "renewal") as (out, built):
        if not built:
            assert main(["review", "--demo", "steady", "--out", str(out)]) == 0  # renew; anything else regresses
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return RunStore(run)
