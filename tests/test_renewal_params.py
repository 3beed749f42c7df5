"""The review's parameters: the four fixed elements and every threshold with their origin, the currency, and an
acceptance parameters file named as such — each through the review's own loader, analyses and decision."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import yaml

from k3lib.core.errors import BadInputError
from k3lib.renewal import demo
from k3lib.report import review_figures as figures
from k3lib.cli.run import review_main
from k3lib.renewal.params import load_any_review, load_review_params, tracked_keys
from k3lib.renewal.review import analyse, decide_from_axes, load_review
from k3lib.renewal.rules import DEFAULT

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "parameters" / "renewal-demo.yaml"
TODAY = dt.date(2026, 8, 14)


@pytest.fixture(scope="module")
def steady(tmp_path_factory):
    return demo.generate("steady", tmp_path_factory.mktemp("steady"))


def _file(tmp_path, paths, review_extra=None, name="review.yaml"):
    """A review file naming the generated inputs, with `review_extra` merged into its review section."""
    data = yaml.safe_load(paths["params"].read_text())
    for k in ("tasks", "costs", "incidents", "hours"):
        data["review"]["inputs"][k] = str(paths[k])
    data["review"]["series"]["history_file"] = str(paths["history"])
    data["review"].update(review_extra or {})
    out = tmp_path / name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


# --- the other command's file --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["emulator.yaml", "kimi-k3.yaml", "production.example.yaml"])
def test_an_acceptance_file_is_named_as_such(name):
    with pytest.raises(BadInputError) as ei:
        load_review_params([ROOT / "parameters" / name])
    line = ei.value.one_line()
    assert "this is an acceptance parameters file (k3 validate), not a review file" in line, line
    assert name in line and "required field is missing" not in line


def test_review_command_names_an_acceptance_file(tmp_path):
    with pytest.raises(BadInputError) as ei:
        review_main([str(ROOT / "parameters" / "emulator.yaml")], [], str(tmp_path), None)
    assert "acceptance parameters file (k3 validate)" in ei.value.one_line()
    assert not any(tmp_path.iterdir())  # refused before any run folder is made


def test_an_acceptance_runs_params_json_is_named_as_such(tmp_path):
    p = tmp_path / "params.json"
    p.write_text(json.dumps({"target": {"base_url": None}, "contract": {}, "axes": {}, "run": {}}))
    with pytest.raises(BadInputError) as ei:
        load_any_review(p)
    assert "acceptance parameters file (k3 validate)" in ei.value.one_line()


# --- origins -------------------------------------------------------------------------------------------------------

def test_the_demo_file_sets_every_threshold_and_fixed_element():
    params = load_review_params([DEMO])
    assert params.review.defaulted() == []
    assert params.review.origin("review.rules.min_acceptance_rate") == str(DEMO)
    assert params.review.origin("review.fixed.quality_rule") == str(DEMO)
    assert params.review.fixed.task_set.categories == ("batch", "agent")


def test_origins_file_override_default_and_back_from_params_json(tmp_path, steady):
    f = _file(tmp_path, steady, {"rules": {"min_acceptance_rate": 0.7}, "fixed": {"retry_policy": {"max_retries": 1}}})
    params = load_review_params([f], ["review.rules.max_ops_hours_per_week=30"])
    o = params.review.origin
    assert o("review.rules.min_acceptance_rate") == str(f)
    assert o("review.fixed.retry_policy") == str(f)  # set in part: the element is the operator's
    assert o("review.rules.max_ops_hours_per_week") == "--set review.rules.max_ops_hours_per_week"
    assert o("review.rules.large_idle_share_max") == DEFAULT and o("review.fixed.quality_rule") == DEFAULT
    assert "review.rules.large_idle_share_max" in params.review.defaulted()
    assert "review.rules.min_acceptance_rate" not in params.review.defaulted()
    # the run's resolved params.json keeps them; an override on top records itself
    pj = tmp_path / "params.json"
    pj.write_text(json.dumps(params.public_dict()))
    again = load_any_review(pj)
    assert again.review.origins == params.review.origins
    later = load_any_review(pj, ["review.rules.large_idle_share_max=0.5"])
    assert later.review.origin("review.rules.large_idle_share_max") == "--set review.rules.large_idle_share_max"
    assert later.review.origin("review.rules.min_acceptance_rate") == str(f)


def test_origins_are_never_taken_from_a_file(tmp_path, steady):
    f = _file(tmp_path, steady, {"origins": {"review.rules.min_acceptance_rate": "the board"}})
    params = load_review_params([f])
    assert params.review.origin("review.rules.min_acceptance_rate") == DEFAULT


def test_the_report_prints_each_parameter_with_its_origin(tmp_path, steady):
    f = _file(tmp_path, steady, {"rules": {"min_acceptance_rate": 0.7}, "currency": "EUR"})
    shown = figures.rules_table(load_review_params([f]))
    table = shown.data
    assert list(table.columns) == ["parameter", "value", "origin"]
    page = shown.to_html()
    assert str(f) in page and "manual_correction_is_accepted: True" in page  # whole, never cut at 50 characters
    rows = {r["parameter"]: r for r in table.to_dict("records")}
    assert set(rows) == {k.removeprefix("review.") for k in tracked_keys()}
    assert rows["rules.min_acceptance_rate"]["origin"] == str(f) and rows["rules.min_acceptance_rate"]["value"] == 0.7
    assert rows["fixed.request_format"]["origin"] == DEFAULT
    assert rows["currency"]["value"] == "EUR" and rows["currency"]["origin"] == str(f)


def test_a_review_decided_on_defaults_says_so(tmp_path, steady):
    """The generated file sets no threshold: the decision and its condition say the defaults decided."""
    params = load_review_params([steady["params"]])
    d = decide_from_axes(params, analyse(load_review(params)), today=TODAY)
    assert any(r.startswith("decided on built-in defaults") and "rules.min_acceptance_rate" in r
               and "fixed.quality_rule" in r for r in d.reasons), d.reasons
    assert "built-in defaults" in d.condition and "before signing" in d.condition
    full = yaml.safe_load(DEMO.read_text())["review"]
    keys = ("fixed", "rules", "currency", "accepted_loosened")  # the demo's task set and retry policy accepted
    own = load_review_params([_file(tmp_path, steady, {k: full[k] for k in keys})])
    d2 = decide_from_axes(own, analyse(load_review(own)), today=TODAY)
    assert d2.decision == d.decision == "renew"
    assert not any("built-in defaults" in r for r in d2.reasons) and "built-in defaults" not in d2.condition


# --- currency ------------------------------------------------------------------------------------------------------

def _costs(tmp_path, steady, text):
    c = tmp_path / "costs.yaml"
    c.write_text(text)
    paths = {**steady, "costs": c}
    return paths


@pytest.mark.parametrize("costs, extra, needle", [
    pytest.param("capacity: 100\n", {}, "an amount without a currency", id="amounts-without-currency"),
    pytest.param("currency: USD\ncapacity: 100\n", {"currency": "EUR"}, "USD here but review.currency is EUR",
                 id="two-currencies"),
    pytest.param("currency: euros\ncapacity: 100\n", {}, "ISO 4217", id="not-a-currency-code"),
])
def test_currency_errors(tmp_path, steady, costs, extra, needle):
    params = load_review_params([_file(tmp_path, _costs(tmp_path, steady, costs), extra)])
    with pytest.raises(BadInputError) as ei:
        load_review(params)
    line = ei.value.one_line()
    assert needle in line and "costs.yaml" in line, line


def test_a_bad_currency_parameter_is_refused(tmp_path, steady):
    with pytest.raises(BadInputError) as ei:
        load_review_params([_file(tmp_path, steady, {"currency": "eur"})])
    assert "review.currency" in ei.value.one_line() and "ISO 4217" in ei.value.one_line()


def test_every_amount_carries_the_currency(tmp_path, steady):
    text = steady["costs"].read_text().replace("currency: EUR\n", "")
    params = load_review_params([_file(tmp_path, _costs(tmp_path, steady, text), {"currency": "CHF"})])
    axes = analyse(load_review(params))
    assert axes["cost"].currency == "CHF"
    table = figures.axis_table("cost", axes["cost"])
    amounts = [v for col in ("self-hosted", "api") for v in table[col] if v]
    assert amounts and all("CHF" in v for v in amounts), amounts
    assert "CHF" in figures.axis_figure("cost", axes["cost"]).layout.title.text
    d = decide_from_axes(params, axes, today=TODAY)
    cost_reason = next(r for r in d.reasons if r.startswith("full cost"))
    assert cost_reason.count("CHF") >= 3, cost_reason


# --- the four fixed elements change what is computed ---------------------------------------------------------------

def test_the_quality_rule_applies_to_both_paths(tmp_path, steady):
    base = load_review_params([_file(tmp_path, steady)])
    strict = load_review_params([_file(tmp_path, steady, {"fixed": {"quality_rule": {
        "description": "a corrected task is not a delivery", "manual_correction_is_accepted": False}}},
        name="strict.yaml")])
    a, b = analyse(load_review(base)), analyse(load_review(strict))
    assert b["production"].accepted < a["production"].accepted
    assert b["production"].accepted == a["production"].accepted - a["production"].losses.manual_corrections
    for path in ("self-hosted", "api"):
        assert b["comparison"][path]["acceptance_rate"] <= a["comparison"][path]["acceptance_rate"]
    assert b["comparison"]["api"]["accepted"] < a["comparison"]["api"]["accepted"]


def test_the_task_set_and_retry_policy_shape_the_comparison(tmp_path, steady):
    only_agent = load_review_params([_file(tmp_path, steady, {"fixed": {"task_set": {"categories": ["agent"]},
                                                                         "retry_policy": {"max_retries": 0}}})])
    every = load_review_params([_file(tmp_path, steady, name="every.yaml")])
    a, b = analyse(load_review(every)), analyse(load_review(only_agent))
    assert 0 < b["comparison"]["paired_tasks"] < a["comparison"]["paired_tasks"]
    assert b["comparison"]["task_set"] == ["agent"]
    assert b["production"].over_retry_policy > a["production"].over_retry_policy >= 0
    # counted within the task set only: a task outside it is not weighed at all
    assert b["production"].over_retry_policy == sum(1 for line in steady["tasks"].read_text().splitlines()[1:]
                                                      if ",agent,self-hosted," in line and int(line.split(",")[7]) > 0)


def test_operator_text_in_the_parameters_table_is_escaped():
    params = load_review_params([DEMO], ["review.fixed.request_format=<script>alert(1)</script>"])
    page = figures.rules_table(params).to_html()
    assert "<script>" not in page and "&lt;script&gt;" in page
