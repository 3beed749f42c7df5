"""The renewal decision rules, table-driven over indicators, and what each decision carries."""

from __future__ import annotations

import datetime as dt

import pytest

from k3lib.renewal.decision import (DECISIONS, EXIT_CODES, TRANSFER_TRIGGERS, Indicators, choose, decide_renewal)
from k3lib.renewal.rules import RenewalRules


def ind(regular=True, large_idle=False, spiky=False, quality=True, recoverable=True, effort=True, control=False):
    return Indicators(regular, large_idle, spiky, quality, recoverable, effort, control)


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
])
def test_choose(indicators, expected):
    decision, rule = choose(indicators)
    assert decision == expected and rule


def test_exit_codes_cover_every_decision():
    assert EXIT_CODES == {"renew": 0, "reduce": 3, "dual-circuit": 4, "exit-to-api": 5}
    assert set(DECISIONS) == set(EXIT_CODES)


def _axes(**over):
    axes = {
        "load": {"business_busy_share": 0.9, "weekday_gpu_h_cv": 0.2, "large_idle_share": 0.05, "utilisation": 0.5,
                 "idle_demand_share": 0.1, "idle_scheduling_share": 0.0, "peak_to_mean": 2.0},
        "production": {"acceptance_rate": 0.9, "accepted_per_operating_h": 10.0,
                       "losses": {"retries_per_task": 0.1, "tool_error_share": 0.02}},
        "comparison": {}, "cost": {},
        "stability": {"recoverable": True, "incidents": 1, "recovered_within_rule_share": 1.0},
        "operations": {"per_week_h": 10.0, "total_h": 30.0, "delivery_gain_h": 50.0},
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
    assert d.decision == "dual-circuit"


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
