"""Load goes to loopback only, and every load phase is bounded.

Each load-bearing axis refuses a non-loopback `target.base_url` before it opens a single connection (the
refusal is recorded as that axis' evidence by the batch), unless `target.allow_remote_load: true`; and every
axis section that sends load has a request bound and a time bound the parameters cannot set to zero.
"""

from __future__ import annotations

import io
import ipaddress
import json
import socket
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from k3lib.core import params as P
from k3lib.core.errors import BadInputError

ROOT = Path(__file__).resolve().parents[1]
EMULATOR_YAML = str(ROOT / "parameters" / "emulator.yaml")
REMOTE = "http://192.0.2.1:9"  # TEST-NET-1 (RFC 5737): never routed, and never to be contacted by these tests

# section → (its model, the fields that bound requests, the fields that bound time). A section that sends load
# and is not listed here fails `test_every_axis_section_is_classified`.
LOAD_BOUNDS = {
    "agent": (P.AgentParams, ("max_requests", "repetitions"), ("max_duration_s", "request_timeout_s")),
    "capacity": (P.CapacityParams,
                 ("step_max_requests", "soak_max_requests", "explore_max_requests", "long_context_repeats"),
                 ("step_duration_s", "soak_duration_s", "explore_duration_s", "request_timeout_s",
                  "ready_timeout_s")),
    "prefix_cache": (P.PrefixCacheParams, ("sessions",), ("max_duration_s", "request_timeout_s", "settle_s")),
}
NO_LOAD = {"probe", "environment", "operations"}  # one request per endpoint, file reads, operator commands


def test_every_axis_section_is_classified():
    sections = set(P.AxesParams.model_fields)
    assert sections == set(LOAD_BOUNDS) | NO_LOAD, \
        f"classify the new section(s) {sections - set(LOAD_BOUNDS) - NO_LOAD} as load-bearing (with bounds) or not"


@pytest.mark.parametrize("section", list(LOAD_BOUNDS))
def test_every_load_phase_has_a_request_and_a_time_bound(section):
    model, requests, times = LOAD_BOUNDS[section]
    assert requests and times
    default = model()
    for name in (*requests, *times):
        assert name in model.model_fields, f"{section}.{name} is gone"
        assert getattr(default, name) > 0, f"{section}.{name} defaults to {getattr(default, name)}"
        for bad in (0, -1):
            with pytest.raises(ValidationError):
                model.model_validate({name: bad})
    # the prefix protocol's request count is sessions × prefix lengths: a length list cannot be empty either
    if section == "prefix_cache":
        with pytest.raises(ValidationError):
            model.model_validate({"prefix_tokens": [0]})


def test_the_load_generator_refuses_an_unbounded_phase():
    from k3lib.io.load import _Phase

    with pytest.raises(BadInputError):
        _Phase(None, [{"messages": []}], name="x", max_requests=10, max_duration_s=0, request_timeout_s=1,
               sink=None)


# ---------------------------------------------------------------------------------------------------------------
# Refusal before any connection


@pytest.fixture()
def connections(monkeypatch):
    """Every connection attempt to a non-loopback address is recorded and refused here (loopback ones go
    through: the capacity axis' calibration server is in-process)."""
    seen: list[tuple] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def remote(address) -> bool:
        try:
            return not ipaddress.ip_address(address[0]).is_loopback
        except (ValueError, TypeError, IndexError):
            return address[0] != "localhost"

    def connect(self, address):
        if remote(address):
            seen.append(address)
            raise ConnectionRefusedError(111, "refused by the test: remote connection")
        return real_connect(self, address)

    def connect_ex(self, address):
        if remote(address):
            seen.append(address)
            return 111
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    return seen


def _run(axis: str):
    import k3lib.axes.agent
    import k3lib.axes.capacity
    import k3lib.axes.prefix_cache

    return {"agent": k3lib.agent.run_agent, "capacity": k3lib.capacity.run_capacity,
            "prefix_cache": k3lib.prefix_cache.run_prefix_cache}[axis]


# small bounds for the control run, where the axis is allowed to try the remote target
CONTROL = ["axes.agent.repetitions=2", "axes.agent.concurrency_levels=[1]", "axes.agent.max_duration_s=3",
           "axes.capacity.ready_timeout_s=0.5", "axes.capacity.health_interval_s=0.1",
           "axes.prefix_cache.max_duration_s=3", "axes.prefix_cache.sessions=2",
           "axes.prefix_cache.prefix_tokens=[600]"]


@pytest.mark.parametrize("axis", list(LOAD_BOUNDS))
def test_a_load_axis_refuses_a_remote_target_before_connecting(tmp_path, connections, axis):
    from k3lib.opening.axis import open_axis

    ctx = open_axis(axis, EMULATOR_YAML, [f"target.base_url={REMOTE}"], str(tmp_path / "run"))
    t0 = time.monotonic()
    with pytest.raises(BadInputError) as info:
        _run(axis)(ctx)
    assert time.monotonic() - t0 < 2.0
    line = info.value.one_line()
    assert "non-loopback" in line and REMOTE in line and "allow_remote_load" in line, line
    assert connections == [], f"{axis} connected before refusing: {connections}"
    assert not (tmp_path / "run" / "evidence" / axis).exists(), "nothing was measured, so nothing is recorded"


@pytest.mark.parametrize("axis", list(LOAD_BOUNDS))
def test_allow_remote_load_lets_the_axis_try(tmp_path, connections, axis):
    """The control: with the switch on, the same axis does reach for the remote target (refused by the fixture),
    so the test above could see a connection had there been one."""
    from k3lib.opening.axis import open_axis

    ctx = open_axis(axis, EMULATOR_YAML, [f"target.base_url={REMOTE}", "target.allow_remote_load=true", *CONTROL],
                    str(tmp_path / "run"))
    _run(axis)(ctx)
    assert connections and all(addr[0] == "192.0.2.1" for addr in connections)


@pytest.mark.slow
def test_the_batch_records_the_refusal_as_each_axis_evidence(tmp_path):
    """Through the batch's notebook runner: each load notebook stops at once, and its evidence says why."""
    from k3lib.batch.execute import Progress, run_notebooks
    from k3lib.core.plan import ACCEPTANCE
    from k3lib.core.store import RunStore

    params = P.load_params([EMULATOR_YAML], [f"target.base_url={REMOTE}"])
    store = RunStore.create_at(tmp_path / "run")
    store.write_json("params.json", params.public_dict())
    notebooks = [(nb, axis) for nb, axis in ACCEPTANCE if axis in LOAD_BOUNDS]
    assert len(notebooks) == len(LOAD_BOUNDS)
    outcomes = run_notebooks(store, [[pair] for pair in notebooks], timeout_s=60,
                             progress=Progress(len(notebooks), io.StringIO()))
    for nb, axis in notebooks:
        assert outcomes[nb].status == "failed" and outcomes[nb].duration_s < 30, outcomes[nb]
        record = json.loads(store.path(f"evidence/{axis}.json").read_text())
        assert record["status"] == "fail"
        assert "non-loopback" in record["error"] and "allow_remote_load" in record["error"], record["error"]
        assert not store.path(f"evidence/{axis}").exists()
