"""Progress while a run runs (issue 36): each axis' phase, requests done of planned and time left, written by the axis
and shown by the batch; a finished notebook shown by its axis' verdict, never `ok` for checks that failed."""

from __future__ import annotations

import io
import time
import types

import pytest

from k3lib.batch.progress import Progress, shown_status
from k3lib.core import progress
from k3lib.core.progress import AxisProgress, describe, read_status


def test_an_axis_writes_its_phase_requests_and_time_left(tmp_path):
    p = AxisProgress("agent", tmp_path, estimate_s=60.0)
    p.phase("level 1 of 2: concurrency 1", requests=42, duration_s=900)
    p.tick(5)
    p._write(force=True)
    status = read_status(tmp_path, "agent")
    assert status is not None and (status["phase"], status["done"], status["planned"]) == (
        "level 1 of 2: concurrency 1", 5, 42)
    line = describe(status)
    assert line.startswith("level 1 of 2: concurrency 1: 5/42 requests, 0:00 elapsed, about ") and "left" in line
    p.close()
    assert read_status(tmp_path, "agent")["phase"] == "finished"
    assert not list((tmp_path / ".progress").glob(".tmp-*")), "a status file is replaced in one step"


def test_a_duration_bound_phase_projects_its_requests_from_the_rate(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    p = AxisProgress("capacity", None, estimate_s=None)
    p.phase("soak: concurrency 5", requests=200_000, duration_s=100)
    clock[0] += 10
    p.tick(50)
    status = p.status()
    # 50 requests in 10 s of a 100 s soak: about 500, not the 200,000 safety cap
    assert (status["planned"], status["approx"], status["request_bound"]) == (500, True, 200_000)
    assert "50/~500 requests" in describe(status) and status["left_s"] == pytest.approx(90, abs=0.5)


def test_the_client_counts_each_request_in_the_running_axis(emulator, tmp_path):
    from k3lib.io.client import ChatClient, run_sync

    reporter = AxisProgress("agent", tmp_path)
    progress.set_current(reporter)
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        for _ in range(3):
            run_sync(ChatClient(emulator.url, timeout_s=30).chat_body(body, strict=False))
    finally:
        progress.set_current(None)
    assert reporter.done == 3
    progress.tick()  # no axis running here: nothing counts, nothing fails
    assert reporter.done == 3


@pytest.mark.parametrize("status, axis, shown", [
    pytest.param("ok", "fail", "fail", id="ran-checks-failed"),
    pytest.param("ok", "pass", "pass", id="ran-pass"),
    pytest.param("ok", None, "ok", id="summary"),
    pytest.param("failed", None, "error", id="notebook-error"),
    pytest.param("timeout", None, "timeout", id="timeout"),
    pytest.param("kept", "warn", "kept-warn", id="kept"),
])
def test_a_finished_notebook_is_shown_by_its_axis_verdict(status, axis, shown):
    assert shown_status(status, axis) == shown


def test_the_batch_prints_the_running_axis_and_each_verdict(tmp_path):
    """Without a terminal, a line per running notebook every interval, from the status file the axis writes."""
    stream = io.StringIO()
    batch = Progress(2, stream, run_dir=tmp_path, interval_s=0.3, bars=False)
    axis = AxisProgress("capacity", tmp_path, estimate_s=30)
    axis.phase("step 1 of 4: concurrency 1", requests=100, duration_s=30)
    batch.start("03_capacity.ipynb", "capacity")
    deadline = time.monotonic() + 10
    while "03_capacity.ipynb: step 1 of 4" not in stream.getvalue() and time.monotonic() < deadline:
        axis.tick(3)
        time.sleep(0.1)
    batch.done(types.SimpleNamespace(notebook="03_capacity.ipynb", status="ok", duration_s=12.3), "fail")
    batch.close()
    text = stream.getvalue()
    assert "      03_capacity.ipynb: step 1 of 4: concurrency 1: " in text and " requests, " in text
    assert "[1/2] 03_capacity.ipynb" in text and " fail " in text and " ok " not in text


def test_with_a_plan_the_axis_counts_every_request_against_it_and_stops_before_passing_it(tmp_path):
    """The plan's numbers (plan.json): sent/planned over the whole axis, whatever phase is named (the agent's
    series and contract check run after its last named level), time left from the estimate, not a phase's
    15-minute bound; a request past the plan's `at most` is refused before it is sent; a request to another
    server (the kit's local calibration) does not count."""
    p = AxisProgress("agent", tmp_path, estimate_s=60.0, planned=157, at_most=3, target="http://127.0.0.1:8000")
    p.phase("level 1 of 2: concurrency 1", requests=42, duration_s=900)
    for _ in range(2):
        p.admit("http://127.0.0.1:8000")
        p.tick(url="http://127.0.0.1:8000/v1/chat/completions")
    p.phase("level 2 of 2: concurrency 4", requests=56, duration_s=900)
    p.admit("http://127.0.0.1:8000")
    p.tick(url="http://127.0.0.1:8000")
    p.admit("http://127.0.0.1:9999")  # the local calibration server: neither admitted against the plan nor counted
    p.tick(url="http://127.0.0.1:9999/v1/chat/completions")
    status = p.status()
    assert (status["done"], status["planned"], status["at_most"]) == (3, 157, 3)
    assert status["left_s"] <= 60.0 and "3/157 requests" in describe(status)
    with pytest.raises(progress.ConsentExceeded, match="the 3 requests the plan showed"):
        p.admit("http://127.0.0.1:8000")
    assert p.sent == 3 and not p.over()
    p.tick(url="http://127.0.0.1:8000")
    assert p.over()


def test_a_bar_shows_its_phase_once(tmp_path):
    """On a terminal the bar's label is the notebook and its phase; the counts beside it do not repeat the phase
    (a phase named `level 1 of 2: concurrency 1` was printed twice)."""
    stream = io.StringIO()
    batch = Progress(1, stream, run_dir=tmp_path, bars=True)
    axis = AxisProgress("agent", tmp_path, estimate_s=30, planned=157)
    axis.phase("level 1 of 2: concurrency 1", requests=42)
    batch.start("02_agent_tools.ipynb", "agent")
    deadline = time.monotonic() + 10
    while "requests" not in stream.getvalue() and time.monotonic() < deadline:
        axis.tick(2)
        axis._write(force=True)
        time.sleep(0.2)
    batch.close()
    shown = [line for line in stream.getvalue().replace("\r", "\n").splitlines() if "requests" in line]
    assert shown and all(line.count("concurrency 1") == 1 for line in shown), shown
    assert all("/157 requests" in line for line in shown)
