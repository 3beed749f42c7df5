"""The four misreadings real vLLM showed (issue 15), each on output captured from a real vLLM 0.32.0 CPU server by
the kit itself (tests/data/realvllm/: scripts/realvllm.sh serve, then /metrics around six requests sent one at a
time, the startup log as written, `python -m vllm.collect_env`). These run everywhere, without the server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from k3lib.axes.capacity.analysis import judge_step, queue_verdict
from k3lib.axes.capacity.window import window_numbers
from k3lib.axes.capacity.result import LOG_TXT, RUN_JSON, read_capacity
from k3lib.axes.environment.container import check_cuda_build
from k3lib.axes.environment.host import check_driver, check_gpus
from k3lib.axes.environment.sources import sources_from_texts
from k3lib.io.metrics import histogram_quantile, quantile_bounds, window_histogram
from k3lib.io.metrics.snapshot import Snapshot
from k3lib.core.params import EnvironmentParams, RecipeParams
from k3lib.io.readers.vllm_log import parse_vllm_log
from k3lib.verdict.sheet import _configuration
from k3lib.core.store import RunStore

DATA = Path(__file__).parent / "data" / "realvllm"
CPU_RECIPE = RecipeParams(name="vllm-cpu-tiny", vllm_min="0.32.0", build="custom")


def _snapshot(name: str, t_ns: int) -> Snapshot:
    text = (DATA / name).read_text(encoding="utf-8")
    return Snapshot.from_text(text, "http://127.0.0.1:8091/metrics", t_mono_ns=t_ns)


@pytest.fixture(scope="module")
def queue_window():
    """Six requests one at a time: nobody waited (the capture's waiting gauge stayed 0)."""
    return _snapshot("queue-c1-before.txt", 0), _snapshot("queue-c1-after.txt", 30 * 10**9)


# ---------------------------------------------------------------------------------------------------------------
# 1. A quantile read from buckets says what the buckets allow


def test_real_queue_histogram_starts_at_300_ms(queue_window):
    window = window_histogram(*queue_window, "request_queue_time_seconds")
    assert window is not None and window.count == 6
    assert window.buckets[0] == (0.3, 6.0), window.buckets[:2]
    # the reading before the fix: PromQL interpolation inside [0, 0.3 s] gives 285 ms for waits of ~0.03 ms
    assert histogram_quantile(0.95, window.buckets) == pytest.approx(0.285)
    assert window.mean < 0.001


def test_queue_p95_below_the_first_bucket_is_an_upper_bound_not_a_figure(queue_window):
    numbers = window_numbers(*queue_window)
    assert numbers["queue_p95_ms"] is None, numbers  # no invented figure
    assert numbers["queue_p95_basis"] == "below-first-bucket"
    # by hand from the two captures: the queue-time sum grew 0.032266913 - 0.032071707 = 0.000195206 s over 372 - 366
    # = 6 requests, a mean of 0.0325 ms; Markov from sum/count: p95 <= mean / 0.05 = 0.651 ms, far below the first edge
    assert numbers["queue_mean_ms"] == pytest.approx(0.0325, abs=0.001)  # rounded to µs
    assert numbers["queue_p95_high_ms"] == pytest.approx(0.651, abs=0.002)
    assert numbers["queue_p95_high_ms"] < 300
    assert "below the first bucket edge 300 ms" in numbers["queue_p95_text"]


def test_a_step_where_nobody_waited_holds_a_100_ms_queue_objective(queue_window):
    step = {"ok": 6, "preemptions": 0, "waiting_mean": 0.0, **window_numbers(*queue_window)}
    held, why = judge_step(step, queue_objective_ms=100, waiting_tolerance=0.5)
    assert held, why
    assert queue_verdict(step, 100)[0] == "pass"


def test_an_objective_the_buckets_cannot_decide_is_never_failed():
    # 20 observations, all in (0.3, 0.5], mean 0.45 s: p95 lies between 300 and 500 ms
    buckets = [(0.3, 0.0), (0.5, 20.0), (0.8, 20.0), (float("inf"), 20.0)]
    b = quantile_bounds(0.95, buckets, mean=0.45)
    assert (b.low, b.high, b.basis) == (0.3, 0.5, "bucket")
    step = {"queue_p95_ms": b.estimate * 1000, "queue_p95_low_ms": 300.0, "queue_p95_high_ms": 500.0,
            "queue_p95_text": b.describe(1000, " ms")}
    assert queue_verdict(step, 400)[0] == "undecided"
    assert judge_step({"ok": 20, **step}, queue_objective_ms=400, waiting_tolerance=0.5)[0]
    assert queue_verdict(step, 250)[0] == "fail"  # the whole interval lies above: decided
    assert queue_verdict(step, 600)[0] == "pass"


# ---------------------------------------------------------------------------------------------------------------
# 2. One line numbering for the log, in every axis


def test_real_startup_log_carries_carriage_returns():
    raw = (DATA / "server-startup.log").read_bytes()
    assert b"\r" in raw  # model loading's progress bars
    # text-mode reading (universal newlines) numbers the same log differently: the misreading
    text_mode = parse_vllm_log((DATA / "server-startup.log").read_text(encoding="utf-8"))
    assert text_mode.ready_line != parse_vllm_log(raw).ready_line


def test_capacity_re_read_numbers_the_log_as_the_environment_axis_does(tmp_path):
    raw = (DATA / "server-startup.log").read_bytes()
    environment = parse_vllm_log(raw)  # the environment sources read the file's bytes
    store = RunStore(tmp_path)
    store.write_json(RUN_JSON, {"plan": {}})
    store.write_text(LOG_TXT, raw.decode("utf-8"))  # what the capacity axis keeps of the same log
    capacity = read_capacity(store).log
    assert capacity is not None and environment.ready_line is not None
    assert capacity.ready_line == environment.ready_line
    assert [ln.number for ln in capacity.lines] == [ln.number for ln in environment.lines]


# ---------------------------------------------------------------------------------------------------------------
# 3. A CPU build under a recipe that asks for no CUDA is not a broken GPU build


def _cpu_sources():
    return sources_from_texts(collect_env=(DATA / "collect_env.txt").read_text(encoding="utf-8"),
                              server_log=(DATA / "server-startup.log").read_bytes().decode("utf-8"))


def test_real_collect_env_is_a_cpu_build():
    ce = _cpu_sources().collect_env
    assert ce.platform == "cpu" and ce.vllm_version == "0.32.0" and ce.torch_version.endswith("+cpu")


@pytest.mark.parametrize("check", [
    pytest.param(lambda s, r: check_cuda_build(s, r), id="cuda_build"),
    pytest.param(lambda s, r: check_gpus(s, EnvironmentParams(), r), id="gpus_visible"),
    pytest.param(lambda s, r: check_driver(s, r), id="driver_branch"),
])
def test_cpu_build_is_not_failed_on_what_the_recipe_does_not_require(check):
    finding = check(_cpu_sources(), CPU_RECIPE)
    assert finding.status == "info", finding.message
    assert "cpu" in finding.message.lower()


def test_a_recipe_that_requires_cuda_still_rejects_a_cpu_build():
    s = _cpu_sources()
    cuda13 = CPU_RECIPE.model_copy(update={"cuda_major": 13, "driver_branch_min": 580})
    assert check_cuda_build(s, cuda13).status == "fail"
    assert check_gpus(s, EnvironmentParams(), cuda13).status != "info"
    assert check_driver(s, cuda13).status == "not-observable"


# ---------------------------------------------------------------------------------------------------------------
# 4. Unset recipe versions are said to be unset


def test_checklist_never_prints_none_for_an_unset_requirement():
    text = _configuration("environment", {"recipe": {"name": "generic", "vllm_min": None, "cuda_major": None,
                                                     "driver_branch_min": None, "build": "custom"}})
    assert "None" not in text, text
    assert text == "recipe generic: no vLLM version set, no CUDA version set, no driver set, build custom"
    full = _configuration("environment", {"recipe": {"name": "k3", "vllm_min": "0.29.0", "cuda_major": 13,
                                                     "driver_branch_min": 580, "build": "official"}})
    assert full == "recipe k3: vLLM ≥ 0.29.0, CUDA 13, driver ≥ R580, build official"
