"""The suite's parallel layout (tests/conftest.py): every test carries its group, and under pytest-xdist the group
reaches the scheduler — if it did not (pytest 9.2 ignores the nodeid xdist 3.8's loadgroup rewrites), each worker
would start every real server of its own."""

from __future__ import annotations

import os

import pytest


def test_each_test_carries_its_module_group_and_xdist_sees_it(request: pytest.FixtureRequest) -> None:
    marks = [m.args[0] for m in request.node.iter_markers("xdist_group")]
    assert marks == ["tests/test_suite_layout.py"]
    if os.environ.get("PYTEST_XDIST_WORKER"):  # make test: the group is part of the id the scheduler splits on
        assert request.node.nodeid.endswith("@tests/test_suite_layout.py"), request.node.nodeid
    else:  # one process: nothing rewrites the id
        assert "@" not in request.node.nodeid


@pytest.mark.realvllm
def test_a_real_server_test_is_in_its_servers_group_whatever_its_module(request: pytest.FixtureRequest) -> None:
    marks = [m.args[0] for m in request.node.iter_markers("xdist_group")]
    assert marks == ["realvllm"]
