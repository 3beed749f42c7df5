"""The renewal decision rules, table-driven over indicators, and what each decision carries."""

from __future__ import annotations

import datetime as dt

import pytest

from k3lib.renewal.decision import (AXES, DECISIONS, EXIT_CODES, RULES, TRANSFER_TRIGGERS, Decision, Indicators,
                                    choose, decide_renewal)
from k3lib.renewal.rules import RenewalRules


def ind(regular=True, large_idle=False, spiky=False, quality=True, recoverable=True, effort=True, control=False,
        api_equivalent=False, cheaper=True, within_value=None):
    return Indicators(regular, large_idle, spiky, quality, recoverable, effort, control, api_equivalent, cheaper,
                      within_value)


@pytest.mark.parametrize("indicators, expected", [
    pytest.param(ind(), "renew", id="all-converge-renew"),
    pytest.param(ind(large_idle=True, regular=False), "reduce", id="useful-but-idle-reduce"),
    pytest.param(ind(regular=False), "reduce", id="irregular-load-reduce"),
    pytest.param(ind(spiky=True), "reduce", id="spiky-without-control-need-reduce"),
    pytest.param(ind(spiky=True, regular=False, large_idle=True, control=True), "dual-circuit",
                 id="spiky-with-control-need-dual"),
    pytest.param(ind(recoverable=False), "dual-circuit", id="frequent-tasks-unrecoverable-dual"),
    pytest.param(ind(effort=False), "dual-circuit", id="frequent-tasks-heavy-effort-dual"),
    pytest.param(ind(quality=False), "dual-circuit", id="well-used-but-quality-missed-dual"),
    pytest.param(ind(quality=False, large_idle=True), "exit-to-api", id="poor-quality-and-idle-exit"),
    pytest.param(ind(quality=False, recoverable=False, effort=False), "exit-to-api", id="all-insufficient-exit"),
    pytest.param(ind(quality=False, spiky=True, control=True, large_idle=True), "exit-to-api",
                 id="control-need-does-not-save-poor-quality"),
    pytest.param(ind(recoverable=None), "dual-circuit", id="no-stability-evidence-never-renews"),
    pytest.param(ind(regular=None, large_idle=None), "reduce", id="no-load-evidence-never-renews"),
    pytest.param(ind(quality=None, large_idle=True), "exit-to-api", id="no-production-evidence-counts-against"),
    # the cost sheet and the API comparison weigh in
    pytest.param(ind(cheaper=None), "dual-circuit", id="blank-cost-item-never-renews"),
    pytest.param(ind(cheaper=False), "dual-circuit", id="api-cheaper-but-not-equivalent-dual"),
    pytest.param(ind(cheaper=False, api_equivalent=True), "exit-to-api", id="api-equivalent-and-cheaper-exit"),
    pytest.param(ind(cheaper=False, api_equivalent=True, control=True), "dual-circuit",
                 id="control-need-keeps-a-controlled-path"),
    pytest.param(ind(api_equivalent=True), "renew", id="api-equivalent-but-self-hosted-cheaper-renew"),
    pytest.param(ind(within_value=False), "dual-circuit", id="cost-above-the-delivered-value"),
    pytest.param(ind(cheaper=None, large_idle=True), "reduce", id="idle-with-blank-cost-reduce"),
    pytest.param(ind(effort=None), "dual-circuit", id="effort-not-shown-contained"),
])
def test_choose(indicators, expected):
    decision, rule = choose(indicators)
    assert decision == expected and rule


def test_exit_codes_cover_every_decision():
    assert EXIT_CODES == {"renew": 0, "reduce": 3, "dual-circuit": 4, "exit-to-api": 5}
    assert DECISIONS == tuple(Decision) and set(DECISIONS) == set(EXIT_CODES)
    assert {r.decision for r in RULES} == set(Decision)


def test_every_analysis_weighs_in_and_the_last_row_always_holds():
    """All six analyses (and the declared benefits) feed some row of the one precedence table."""
    read = {a for r in RULES for a in r.analyses}
    assert read >= set(AXES) | {"benefits"}
    assert len({r.id for r in RULES}) == len(RULES)
    assert RULES[-1].holds(Indicators()) and RULES[-1].decision is Decision.RENEW
    # with no evidence at all, the table never reaches renew
    assert choose(Indicators())[0] != "renew"


def test_readme_documents_the_table_in_its_order():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### The renewal decision table", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    ids = [line.split("`")[1] for line in rows]
    assert ids == [r.id for r in RULES]
    for line, rule in zip(rows, RULES):
        assert f"`{rule.decision.value}`" in line and all(a in line for a in rule.analyses), line


def _axes(**over):
    axes = {
        "load": {"business_busy_share": 0.9, "weekday_gpu_h_cv": 0.2, "large_idle_share": 0.05, "utilisation": 0.5,
                 "idle_demand_share": 0.1, "idle_scheduling_share": 0.0, "peak_to_mean": 2.0},
        "production": {"acceptance_rate": 0.9, "accepted_per_operating_h": 10.0,
                       "losses": {"retries_per_task": 0.1, "tool_error_share": 0.02}},
        "comparison": {"paired_tasks": 100, "api_equivalent": False,
                       "self-hosted": {"acceptance_rate": 0.9, "tool_error_share": 0.02, "delivery_median_s": 800.0},
                       "api": {"acceptance_rate": 0.8, "tool_error_share": 0.02, "delivery_median_s": 900.0}},
        "cost": {"currency": "EUR", "self_hosted": {"per_accepted_task": 2.5, "total": 25000.0, "blank_items": []},
                 "api": {"per_accepted_task": 9.0}, "delivered_tasks_value": None,
                 "self_hosted_cheaper_per_task": True, "total_within_delivered_value": None},
        "stability": {"recoverable": True, "incidents": 1, "recovered_within_rule_share": 1.0},
        "operations": {"per_week_h": 10.0, "total_h": 30.0, "delivery_gain_h": 50.0, "effort_exceeds_gain": False},
    }
    axes.update(over)
    return axes


@pytest.mark.parametrize("axes, benefits, expected", [
    pytest.param(_axes(), [], "renew", id="renew"),
    pytest.param(_axes(load={**_axes()["load"], "large_idle_share": 0.7, "business_busy_share": 0.3}), [], "reduce",
                 id="reduce"),
    pytest.param(_axes(load={**_axes()["load"], "peak_to_mean": 20.0, "business_busy_share": 0.2}),
                 ["data_control"], "dual-circuit", id="dual"),
    pytest.param(_axes(production={"acceptance_rate": 0.5, "losses": {"retries_per_task": 1.5}},
                       operations={"per_week_h": 40.0}), [], "exit-to-api", id="exit"),
    pytest.param(_axes(stability=None), [], "dual-circuit", id="missing-stability-axis"),
    pytest.param(_axes(operations={"per_week_h": 10.0, "total_h": 30.0, "delivery_gain_h": 12.0,
                                   "effort_exceeds_gain": True}), [], "dual-circuit", id="effort-exceeds-the-gain"),
    pytest.param(_axes(cost={**_axes()["cost"], "self_hosted_cheaper_per_task": None,
                             "self_hosted": {"per_accepted_task": None, "total": None, "blank_items": ["network"]}}),
                 [], "dual-circuit", id="blank-cost-item"),
    pytest.param(_axes(cost={**_axes()["cost"], "self_hosted_cheaper_per_task": False},
                       comparison={**_axes()["comparison"], "api_equivalent": True}), [], "exit-to-api",
                 id="api-equivalent-and-cheaper"),
    pytest.param(_axes(cost=None), [], "dual-circuit", id="missing-cost-axis"),
    pytest.param(_axes(comparison=None, cost=None), [], "dual-circuit", id="missing-comparison-axis"),
])
def test_decide_renewal_from_axis_figures(axes, benefits, expected):
    d = decide_renewal(axes, RenewalRules(), benefits, today=dt.date(2026, 8, 14))
    assert d.decision == expected
    assert d.exit_code == EXIT_CODES[expected]
    assert d.reasons[0].startswith(expected)
    assert d.condition
    out = d.to_dict()
    assert set(out) >= {"decision", "reasons", "checklist", "condition"}
    assert ("routing" in out) == (expected == "dual-circuit")
    if axes.get("stability") is None:
        assert any("no evidence for: stability" in r for r in d.reasons)
        assert next(c for c in d.checklist if c["id"] == "stability")["status"] == "not-run"


def test_reasons_quote_the_figures_and_the_rules():
    rules = RenewalRules(max_ops_hours_per_week=5)
    d = decide_renewal(_axes(), rules, [], today=dt.date(2026, 8, 14))
    text = "\n".join(d.reasons)
    assert "10 h/week (rule ≤ 5)" in text  # the figure and the rule it was judged by
    assert "acceptance 90% (≥ 80%)" in text
    assert "2.50 EUR self-hosted, at most the API's 9.00 EUR" in text  # every amount with its currency
    assert "acceptance 90% self-hosted vs 80% API" in text
    assert d.decision == "dual-circuit" and d.rule == "dual.recovery-or-effort"


def test_a_blank_cost_item_is_named_in_the_reasons():
    axes = _axes(cost={**_axes()["cost"], "self_hosted_cheaper_per_task": None,
                       "self_hosted": {"per_accepted_task": None, "total": None, "blank_items": ["network"]}})
    d = decide_renewal(axes, RenewalRules(), [], today=dt.date(2026, 8, 14))
    assert d.rule == "dual.gain-not-shown"
    assert any("blank: network — a blank item leaves the total blank" in r for r in d.reasons), d.reasons


def test_a_review_on_built_in_defaults_says_so():
    d = decide_renewal(_axes(), RenewalRules(), [], today=dt.date(2026, 8, 14),
                       defaulted=["review.rules.min_acceptance_rate", "review.fixed.quality_rule"])
    assert d.decision == "renew"
    assert "built-in defaults" in d.reasons[1] and "rules.min_acceptance_rate" in d.reasons[1]
    assert "built-in defaults" in d.condition and "before signing" in d.condition
    plain = decide_renewal(_axes(), RenewalRules(), [], today=dt.date(2026, 8, 14))
    assert not any("built-in defaults" in r for r in plain.reasons) and "built-in" not in plain.condition


def test_dual_circuit_routing_has_every_trigger_and_exit_rules():
    d = decide_renewal(_axes(load={**_axes()["load"], "peak_to_mean": 30.0}), RenewalRules(), ["data_control"],
                       today=dt.date(2026, 8, 14))
    assert d.decision == "dual-circuit"
    triggers = [t["trigger"] for t in d.routing["transfer_triggers"]]
    assert triggers == list(TRANSFER_TRIGGERS)
    assert len(d.routing["exit_rules"]) == 5


@pytest.mark.parametrize("decision_axes, benefits, needle", [
    pytest.param(_axes(), [], "next billing cycle (2026-09-04)", id="renew-reexamine-at-billing"),
    pytest.param(_axes(load={**_axes()["load"], "large_idle_share": 0.9}), [], "restore the previous capacity",
                 id="reduce-restore-if-queue"),
    pytest.param(_axes(production={"acceptance_rate": 0.3, "losses": {}}, operations={"per_week_h": 50.0}), [],
                 "keep the logs", id="exit-keep-logs"),
])
def test_each_decision_carries_its_condition(decision_axes, benefits, needle):
    d = decide_renewal(decision_axes, RenewalRules(), benefits, today=dt.date(2026, 8, 14))
    assert needle in d.condition
