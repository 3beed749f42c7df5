"""Shared fixtures: where the real-world artifacts live, one emulator per test session on a real socket, and the
real servers (llama.cpp, real vLLM), each started at most once per session."""

from __future__ import annotations

import os
from pathlib import Path

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
    if not REAL_WORLD.is_dir():
        pytest.fail(f"{REAL_WORLD} is missing: CI keeps ../shared beside the checkout")
    return REAL_WORLD


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


@pytest.fixture(scope="session")
def healthy_run(tmp_path_factory):
    """`k3 validate -p parameters/emulator.yaml` once per session: (exit code, RunStore)."""
    from k3lib.cli.main import main
    from k3lib.core.store import RunStore

    out = tmp_path_factory.mktemp("healthy")
    code = main(["validate", "-p", str(ROOT / "parameters" / "emulator.yaml"), "--out", str(out)])
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return code, RunStore(run)


@pytest.fixture(scope="session")
def renewal_run(tmp_path_factory):
    """`k3 review --demo steady` once per session: its RunStore (the steady demo renews: exit 0)."""
    from k3lib.cli.main import main
    from k3lib.core.store import RunStore

    out = tmp_path_factory.mktemp("renewal")
    assert main(["review", "--demo", "steady", "--out", str(out)]) == 0  # renew; any other decision is a regression
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return RunStore(run)
