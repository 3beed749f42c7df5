"""Issue 43, proof by effect: an operator's action counts by what it did to the target, never by its surface (a
command that exits 0, a host string). A restart is observed only when /health left 200 or the server's process start
time changed; a source served by the target under any of its names (localhost, 127.0.0.1, ::1, another DNS name of
the same address) is the target's word about itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import k3lib
from k3lib.axes.capacity.coldload import restart_effect
from k3lib.axes.capacity.run import CapacityRunner
from k3lib.emulator import EmulatorConfig, start_emulator

ROOT = Path(__file__).resolve().parents[1]
PARAMS = str(ROOT / "parameters" / "emulator.yaml")


def _cold_load(tmp_path, url: str, restart: str) -> dict:
    ctx = k3lib.open_axis("capacity", PARAMS, [f"target.base_url={url}", f"target.restart={restart}",
                                               "axes.capacity.ready_timeout_s=5", "axes.environment.timeout_s=3"],
                          str(tmp_path / "run"))
    runner = CapacityRunner(ctx)
    asyncio.run(runner._cold_load())
    return runner.ready


def test_attack_a_restart_command_that_restarts_nothing_observes_no_cold_load(tmp_path):
    """Attack 5: `target.restart: ["true"]` exits 0 on a server that never restarts — before the fix the cold load
    counted as "not ready → ready"; the emulator's own restart (a new process start time) still counts."""
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0) as h:
        idle = _cold_load(tmp_path / "a", h.url, '["true"]')
        real = _cold_load(tmp_path / "b", h.url, "'http:POST:{base_url}/_emulator/restart:{}'")
    assert idle["restart"]["ok"] is True and idle["observed_transition"] is False
    assert "nothing restarted" in idle["restart"]["effect"]
    assert real["observed_transition"] is True
    assert "changed" in real["restart"]["effect"] or "left 200" in real["restart"]["effect"]


@pytest.mark.parametrize("not_ready, before, after, seen", [
    pytest.param(2, 10.0, 10.0, True, id="health left 200"),
    pytest.param(0, 10.0, 11.5, True, id="a new process"),
    pytest.param(0, 10.0, 10.0, False, id="same process, always ready"),
    pytest.param(0, None, None, False, id="no start time stated, always ready"),
])
def test_a_restart_is_proven_by_health_or_start_time(not_ready, before, after, seen):
    assert restart_effect(not_ready, before, after)[0] is seen
