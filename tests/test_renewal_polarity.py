"""A renewal finding states its polarity: which outcome favours keeping the capacity, whatever the rule id."""

from __future__ import annotations

import pytest

from k3lib.renewal.findings import POLARITY, SENTENCES, Polarity, RenewalFinding


@pytest.mark.parametrize("rule, outcome, favourable, status", [
    pytest.param("load.regular", True, True, "pass", id="regular-load-good"),
    pytest.param("load.regular", False, False, "warn", id="irregular-load-warns"),
    pytest.param("load.large_idle", True, False, "warn", id="large-idle-true-is-the-bad-case"),
    pytest.param("load.large_idle", False, True, "pass", id="no-large-idle-passes"),
    pytest.param("comparison.api_equivalent", True, False, "warn", id="api-equivalent-counts-against"),
    pytest.param("production.quality", False, False, "fail", id="quality-missed-fails"),
    pytest.param("production.quality", None, None, "not-observable", id="not-shown-is-never-favourable"),
    pytest.param("load.peaks", True, None, "info", id="peaks-are-context"),
    pytest.param("decision.rule", True, None, "info", id="the-rule-is-context"),
])
def test_the_outcome_reads_through_the_findings_polarity(rule, outcome, favourable, status):
    f = RenewalFinding(rule, outcome)
    assert (f.favourable, f.status) == (favourable, status)


def test_every_rule_with_a_sentence_has_a_polarity_and_none_without_one():
    assert set(POLARITY) <= set(SENTENCES)
    context = {r for r in SENTENCES if r not in POLARITY}
    assert all(RenewalFinding(r, True).polarity is Polarity.CONTEXT for r in context)
    assert {RenewalFinding(r, True).polarity for r in POLARITY} == {Polarity.HOLDS_IS_GOOD, Polarity.HOLDS_IS_BAD}


def test_the_stored_shape_carries_no_polarity_it_is_read_again_from_the_rule():
    f = RenewalFinding("load.large_idle", True, {"large_idle_share": 0.5, "large_idle_share_max": 0.4,
                                                  "large_idle_min_h": 4, "utilisation": 0.1, "idle_demand_share": 0.5,
                                                  "idle_scheduling_share": 0.0})
    stored = f.model_dump()
    assert set(stored) == {"rule", "outcome", "measured", "sentence"}
    again = RenewalFinding.model_validate(stored)
    assert (again.polarity, again.status) == (Polarity.HOLDS_IS_BAD, "warn")
