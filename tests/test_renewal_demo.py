"""The four demo scenarios end in the four decisions, with reasons that quote their figures; blanks stay blank."""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from k3lib.core import numbers
from k3lib.core.errors import BadInputError
from k3lib.core.store import to_json_bytes
from k3lib.renewal import demo
from k3lib.renewal.params import load_review_params
from k3lib.renewal.review import analyse, decide_from_axes, load_review
from k3lib.renewal.series import read_history

TODAY = dt.date(2026, 8, 14)


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    out = {}
    for scenario in demo.SCENARIOS:
        paths = demo.generate(scenario, tmp_path_factory.mktemp(scenario))
        params = load_review_params([paths["params"]])
        data = load_review(params)
        axes = analyse(data)
        out[scenario] = (paths, params, data, axes, decide_from_axes(params, axes, today=TODAY))
    return out


@pytest.mark.parametrize("scenario", demo.SCENARIOS)
def test_scenario_ends_in_its_decision(reviews, scenario):
    *_, decision = reviews[scenario]
    assert decision.decision == demo.EXPECTED[scenario], decision.reasons
    assert decision.condition
    assert ("routing" in decision.model_dump()) == (scenario == "spiky")


@pytest.mark.parametrize("scenario, figure", [
    pytest.param("steady", lambda a: a["load"]["large_idle_share"] <= 0.4 and a["production"].acceptance_rate >= 0.8,
                 id="steady-busy-and-accepted"),
    pytest.param("idle-heavy", lambda a: a["load"]["large_idle_share"] > 0.4
                 and a["load"]["idle_demand_share"] > a["load"]["idle_scheduling_share"], id="idle-heavy-demand-idle"),
    pytest.param("spiky", lambda a: a["load"]["peak_to_mean"] >= 8 and "data_control" in a["benefits"]["declared"],
                 id="spiky-peaks-and-control"),
    pytest.param("poor", lambda a: a["production"].acceptance_rate < 0.8 and not a["stability"].recoverable
                 and not a["operations"].effort_contained, id="poor-quality-recovery-effort"),
])
def test_reasons_are_checkable_against_the_figures(reviews, scenario, figure):
    _, _, _, axes, decision = reviews[scenario]
    assert figure(axes)
    text = " ".join(decision.reasons)
    load = axes["load"]
    assert f"{load['large_idle_share']:.0%} of the window in idle stretches" in text
    assert f"acceptance {axes['production'].acceptance_rate:.0%}" in text
    assert f"{numbers.figure(axes['operations'].per_week_h)} h/week" in text


def test_generation_is_deterministic(tmp_path):
    a = demo.generate("spiky", tmp_path / "a")
    b = demo.generate("spiky", tmp_path / "b")
    for key in ("history", "tasks", "incidents", "hours", "costs"):
        assert a[key].read_bytes() == b[key].read_bytes(), key


def test_history_is_backfillable_openmetrics(reviews):
    paths = reviews["steady"][0]
    text = paths["history"].read_text()
    assert text.endswith("# EOF\n")
    history = read_history(paths["history"])  # raises on ms timestamps or out-of-order samples
    stamps = [t for series in history.values() for pts in series.values() for t, _ in pts]
    end = demo.ANCHOR_END.timestamp()
    assert max(stamps) < end and min(stamps) > end - 21 * 86400
    assert all(int(t) % 300 == 150 for t in stamps[:50])  # mid-slot, never on an evaluation instant
    assert {n for n in history} >= {"vllm:num_requests_running", "vllm:num_requests_waiting",
                                    "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                                    "vllm:generation_tokens_total", "vllm:request_success_total",
                                    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}


def test_counter_resets_after_incidents_are_not_negative(reviews):
    data = reviews["poor"][2]
    assert (data.frame["generation_tokens"] >= 0).all()
    assert data.frame["running"].isna().any()  # the engine was down: no vLLM samples, not zeros


# the self-hosted items each scenario's costs.yaml leaves blank, read from the scenarios by hand (poor has no hourly
# rate, so its install/upgrade/rollback hours cannot be priced either); steady's total is its nine items summed by
# hand: 21000 + 600 + 350 + 400 + 14 h x 95 + 1800 + 420 + 90 + 300
BLANK_SELF_HOSTED = {"steady": [], "idle-heavy": ["teams_waiting_time"], "spiky": ["network"],
                     "poor": ["network", "install_upgrade_rollback", "on_call", "teams_waiting_time"]}
STEADY_TOTAL = 26290.0


@pytest.mark.parametrize("scenario", demo.SCENARIOS)
def test_blank_costs_stay_blank(reviews, scenario):
    paths, _, data, axes, _ = reviews[scenario]
    cost = axes["cost"]
    assert cost.delivered_tasks_value is None  # blank in every scenario's costs.yaml
    sh = cost.self_hosted
    amounts = {i.item: i.amount for i in sh.items}
    assert sorted(sh.blank_items) == sorted(BLANK_SELF_HOSTED[scenario])
    assert sorted(k for k, v in amounts.items() if v is None) == sorted(BLANK_SELF_HOSTED[scenario])
    if BLANK_SELF_HOSTED[scenario]:
        assert sh.total is None and sh.per_accepted_task is None  # a blank is never priced as zero
    else:
        assert sh.total == pytest.approx(STEADY_TOTAL) and sh.per_accepted_task > 0
    dumped = to_json_bytes(axes).decode()  # as review/axes.json is written
    assert "NaN" not in dumped and "Infinity" not in dumped


def test_blank_cost_is_null_in_decision_json_and_evidence(reviews):
    axes = reviews["poor"][3]
    assert json.loads(to_json_bytes(axes["cost"]))["self_hosted"]["total"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in axes["load"].values() if not isinstance(v, list))


def test_unknown_scenario_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="idle-heavy"):
        demo.generate("bursty", tmp_path)
