"""The renewal decision rules, table-driven over indicators, and what each decision carries."""

from __future__ import annotations

import datetime as dt

import pytest

from k3lib.renewal.decision import (AXES, DECISIONS, EXIT_CODES, RULES, TRANSFER_TRIGGERS, RenewalOutcome, Indicators,
                                    choose, decide_renewal)
from k3lib.core.errors import BadInputError
from k3lib.core.numbers import figure
from k3lib.renewal.analysis import compare_paths, full_cost
from k3lib.renewal.results import typed
from k3lib.renewal.review import analyse
from k3lib.renewal.rules import RenewalRules


def ind(regular=True, large_idle=False, spiky=False, quality=True, recoverable=True, effort=True, control=False,
        api_equivalent=False, cheaper=True, within_value=None, api_meets_quality=None):
    return Indicators(regular, large_idle, spiky, quality, recoverable, effort, control, api_equivalent, cheaper,
                      within_value, api_meets_quality)


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
    # not shown is never favourable, and never a firm resize or exit either (issue 39)
    pytest.param(ind(regular=None, large_idle=None), "dual-circuit", id="no-load-evidence-never-renews"),
    pytest.param(ind(quality=None, large_idle=True), "dual-circuit", id="no-production-evidence-is-no-firm-exit"),
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
    assert DECISIONS == tuple(RenewalOutcome) and set(DECISIONS) == set(EXIT_CODES)
    assert {r.decision for r in RULES} == set(RenewalOutcome)


def test_every_analysis_weighs_in_and_the_last_row_always_holds():
    """All six analyses (and the declared benefits) feed some row of the one precedence table."""
    read = {a for r in RULES for a in r.analyses}
    assert read >= set(AXES) | {"benefits"}
    assert len({r.id for r in RULES}) == len(RULES)
    assert RULES[-1].holds(Indicators()) and RULES[-1].decision is RenewalOutcome.RENEW
    # with no evidence at all, the table never reaches renew
    assert choose(Indicators())[0] != "renew"


def test_readme_documents_the_table_in_its_order():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "renewal.md").read_text(encoding="utf-8")
    section = readme.split("## The renewal decision table", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    ids = [line.split("`")[1] for line in rows]
    assert ids == [r.id for r in RULES]
    for line, rule in zip(rows, RULES):
        assert f"`{rule.decision.value}`" in line and all(a in line for a in rule.analyses), line


# --- decisions from the analyses' own results ---------------------------------------------------------------------
# Every axis below comes from the steady demo through the review's own code path (inputs read, six analyses,
# typed results); a variation either re-runs an analysis on changed inputs or changes one typed field of a real
# result — never a hand-built dict the decision would have to guess keys from.

@pytest.fixture(scope="module")
def steady(tmp_path_factory):
    from k3lib.renewal import demo
    from k3lib.renewal.params import load_review_params
    from k3lib.renewal.review import load_review

    params = load_review_params([demo.generate("steady", tmp_path_factory.mktemp("steady"))["params"]])
    data = load_review(params)
    return data, {a: typed(a, r) for a, r in analyse(data).items() if a in AXES}


def _set(model, dotted, value):
    head, _, rest = dotted.partition(".")
    return model.model_copy(update={head: _set(getattr(model, head), rest, value) if rest else value})


def vary(axes, **changes):
    """`axis={"field.sub": value}` changes fields of a real typed result; `axis=None` drops the axis."""
    out = dict(axes)
    for axis, fields in changes.items():
        if fields is None:
            out[axis] = None
            continue
        for dotted, value in fields.items():
            out[axis] = _set(out[axis], dotted, value)
    return out


def recost(data, axes, **costs):
    """The cost axis re-run through full_cost on the review's costs with `costs` changed."""
    c = full_cost(data.costs.model_copy(update=costs), axes["production"],
                  axes["comparison"].model_dump(by_alias=True))
    return {**axes, "cost": typed("cost", c)}


def recompare(data, axes, rules):
    comparison = compare_paths(data.tasks, data.hours, data.params.review.fixed, rules)
    return {**axes, "comparison": typed("comparison", comparison)}


IDLE = {"load": {"large_idle_share": 0.7, "business_busy_share": 0.3}}
PEAKS = {"load": {"peak_to_mean": 20.0, "business_busy_share": 0.2}}
POOR = {"production": {"acceptance_rate": 0.5, "losses.retries_per_task": 1.5}, "operations": {"per_week_h": 40.0}}


@pytest.mark.parametrize("changes, benefits, expected", [
    pytest.param({}, [], "renew", id="renew"),
    pytest.param(IDLE, [], "reduce", id="reduce"),
    pytest.param(PEAKS, ["data_control"], "dual-circuit", id="dual"),
    pytest.param(POOR, [], "exit-to-api", id="exit"),
    pytest.param({"stability": None}, [], "dual-circuit", id="missing-stability-axis"),
    pytest.param({"operations": {"effort_exceeds_gain": True}}, [], "dual-circuit", id="effort-exceeds-the-gain"),
    pytest.param({"operations": {"effort_exceeds_gain": None}}, [], "dual-circuit", id="delivery-gain-unknown"),
    pytest.param({"stability": {"recoverable": None}}, [], "dual-circuit", id="recovery-not-shown"),
    pytest.param({"cost": None}, [], "dual-circuit", id="missing-cost-axis"),
    pytest.param({"comparison": None, "cost": None}, [], "dual-circuit", id="missing-comparison-axis"),
])
def test_decide_renewal_from_axis_figures(steady, changes, benefits, expected):
    _, real = steady
    d = decide_renewal(vary(real, **changes), RenewalRules(), benefits, today=dt.date(2026, 8, 14))
    assert d.decision == expected, d.reasons
    assert d.exit_code == EXIT_CODES[expected]
    assert d.reasons[0].startswith(expected)
    assert d.condition
    out = d.model_dump()
    assert set(out) >= {"decision", "rule", "reasons", "checklist", "condition"}
    assert ("routing" in out) == (expected == "dual-circuit")
    if changes.get("stability", {}) is None:
        assert any("no evidence for: stability" in r for r in d.reasons)
        assert next(c for c in d.checklist if c["id"] == "stability")["status"] == "not-run"


@pytest.mark.parametrize("costs, rule, needle", [
    pytest.param({"network": None}, "dual.gain-not-shown", "blank: network — a blank item leaves the total blank",
                 id="a-blank-item-never-renews"),
    pytest.param({"api_bill_same_tasks": None}, "dual.gain-not-shown", "not comparable with the API's blank",
                 id="a-blank-api-bill-never-renews"),
    pytest.param({"delivered_tasks_value": 1_000}, "dual.gain-not-shown", "value of the delivered tasks 1,000.00 EUR",
                 id="cost-above-the-delivered-value"),
    pytest.param({"delivered_tasks_value": 1_000_000}, "renew.converge", "value of the delivered tasks",
                 id="cost-within-the-delivered-value"),
])
def test_the_cost_sheet_weighs_in(steady, costs, rule, needle):
    data, real = steady
    d = decide_renewal(recost(data, real, **costs), RenewalRules(), [], today=dt.date(2026, 8, 14))
    assert d.rule == rule, d.reasons
    assert any(needle in r for r in d.reasons), d.reasons


def test_an_equivalent_and_cheaper_api_exits_unless_control_is_declared(steady):
    data, real = steady
    rules = RenewalRules(api_equivalent_gap_max=1.0)  # any API result counts as equivalent
    axes = recost(data, recompare(data, real, rules), capacity=900_000)
    assert axes["comparison"].api_equivalent is True and axes["cost"].self_hosted_cheaper_per_task is False
    d = decide_renewal(axes, rules, [], today=dt.date(2026, 8, 14))
    assert d.rule == "exit.api-equivalent-and-cheaper" and d.decision == "exit-to-api"
    kept = decide_renewal(axes, rules, ["data_control"], today=dt.date(2026, 8, 14))
    assert kept.decision == "dual-circuit"
    # the same bill against an API not shown equivalent (no gap: the paired interval straddles it, never a point
    # estimate): the gain is not shown, the API is kept beside
    strict_rules = RenewalRules(api_equivalent_gap_max=0.0)
    strict = recost(data, recompare(data, real, strict_rules), capacity=900_000)
    c = strict["comparison"]
    assert c.difference_low < 0 < c.difference_high and c.api_equivalent is None
    d = decide_renewal(strict, strict_rules, [], today=dt.date(2026, 8, 14))
    assert d.rule == "dual.gain-not-shown" and any("above the API's" in r for r in d.reasons), d.reasons
    assert "is not shown to reach equivalent quality" in d.finding("comparison.api_equivalent").sentence


def test_a_hand_built_axis_is_refused(steady):
    """The decision reads typed fields: a dict missing them is refused with one line, never guessed."""
    _, real = steady
    with pytest.raises(BadInputError) as ei:
        decide_renewal({**real, "load": {"business_busy_share": 0.9}}, RenewalRules(), [])
    assert "not this kit's load result" in ei.value.one_line()


def test_reasons_quote_the_figures_and_the_rules(steady):
    _, real = steady
    ops, prod, cost = real["operations"], real["production"], real["cost"]
    rules = RenewalRules(max_ops_hours_per_week=5)
    d = decide_renewal(real, rules, [], today=dt.date(2026, 8, 14))
    text = "\n".join(d.reasons)
    assert f"{figure(ops.per_week_h)} h/week (rule ≤ 5)" in text  # the figure and the rule it was judged by
    assert (f"acceptance {prod.acceptance_rate:.0%}, 95 % {prod.acceptance_low:.1%}–{prod.acceptance_high:.1%} "
            f"(≥ 80%) on {figure(prod.tasks)} task(s) of the task set") in text
    # every amount with its currency
    assert f"{cost.self_hosted.per_accepted_task:,.2f} EUR self-hosted (95 % " in text
    assert f"at most the API's {cost.api.per_accepted_task:,.2f} EUR (95 % " in text
    assert d.decision == "dual-circuit" and d.rule == "dual.recovery-or-effort"


def test_a_review_on_built_in_defaults_says_so(steady):
    _, real = steady
    d = decide_renewal(real, RenewalRules(), [], today=dt.date(2026, 8, 14),
                       defaulted=["review.rules.min_acceptance_rate", "review.fixed.quality_rule"])
    assert d.decision == "renew"
    assert "built-in defaults" in d.reasons[1] and "rules.min_acceptance_rate" in d.reasons[1]
    assert "built-in defaults" in d.condition and "before signing" in d.condition
    plain = decide_renewal(real, RenewalRules(), [], today=dt.date(2026, 8, 14))
    assert not any("built-in defaults" in r for r in plain.reasons) and "built-in" not in plain.condition


def test_dual_circuit_routing_has_every_trigger_and_exit_rules(steady):
    _, real = steady
    d = decide_renewal(vary(real, load={"peak_to_mean": 30.0}), RenewalRules(), ["data_control"],
                       today=dt.date(2026, 8, 14))
    assert d.decision == "dual-circuit"
    triggers = [t["trigger"] for t in d.routing["transfer_triggers"]]
    assert triggers == list(TRANSFER_TRIGGERS)
    assert len(d.routing["exit_rules"]) == 5


@pytest.mark.parametrize("changes, needle", [
    pytest.param({}, "next billing cycle (2026-09-04)", id="renew-reexamine-at-billing"),
    pytest.param({"load": {"large_idle_share": 0.9}}, "restore the previous capacity", id="reduce-restore-if-queue"),
    pytest.param(POOR, "keep the logs", id="exit-keep-logs"),
])
def test_each_decision_carries_its_condition(steady, changes, needle):
    _, real = steady
    d = decide_renewal(vary(real, **changes), RenewalRules(), [], today=dt.date(2026, 8, 14))
    assert needle in d.condition


def test_findings_are_values_and_the_reasons_are_rendered_from_them(steady):
    """Each indicator is a typed finding (rule id, outcome, measured figures and thresholds); the reasons are its
    sentences, and a decision read back from decision.json renders the same reasons from the same values."""
    import json

    from k3lib.renewal.decision import RenewalDecision

    _, real = steady
    d = decide_renewal(vary(real, **POOR), RenewalRules(), [], today=dt.date(2026, 8, 14),
                       defaulted=["review.rules.min_acceptance_rate"])
    assert d.reasons == tuple(f.sentence for f in d.findings)
    assert [f.rule for f in d.findings[:2]] == ["decision.rule", "review.defaults"]
    head = d.finding("decision.rule")
    assert (head.measured["decision"], head.measured["rule"]) == (d.decision, d.rule)
    quality = d.finding("production.quality")
    assert quality.outcome is False and quality.measured["acceptance_rate"] == 0.5
    assert quality.measured["min_acceptance_rate"] == RenewalRules().min_acceptance_rate
    effort = d.finding("operations.effort")
    assert effort.outcome is False and effort.measured["per_week_h"] == 40.0
    back = RenewalDecision.model_validate(json.loads(json.dumps(d.model_dump())))
    assert (back.decision, back.rule, back.reasons) == (d.decision, d.rule, d.reasons)
    assert [f.model_dump() for f in back.findings] == [f.model_dump() for f in d.findings]
    # an axis without evidence is a finding too, never a silent gap
    gone = decide_renewal(vary(real, stability=None), RenewalRules(), [], today=dt.date(2026, 8, 14))
    assert gone.finding("stability.no_evidence").outcome is None
    assert gone.finding("review.missing").measured["axes"] == ["stability"]


# --- the live run of the same tasks on both paths (`k3 paths` against loopback emulators) --------------------------

@pytest.fixture(scope="module")
def live_runs(tmp_path_factory):
    """Two `k3 paths` runs of the built-in task set through the paths runner: a good emulator and one that leaks
    tool-call markup (it fails every tool task), once with the leaky one as the API, once as the self-hosted path."""
    import yaml

    from k3lib.emulator import EmulatorConfig, start_emulator
    from k3lib.axes.paths import load_paths_params, read_paths_record, run_paths
    from k3lib.core.store import RunStore

    def emulator(*faults):
        return start_emulator(EmulatorConfig.from_profile("demo", faults=faults, time_scale=0.02), host="127.0.0.1",
                              port=0)

    out = {}
    with emulator() as good, emulator("tool-markup-leak=1.0") as leaky:
        for name, sh, api in (("api-misses", good.url, leaky.url), ("api-meets", leaky.url, good.url)):
            folder = tmp_path_factory.mktemp(name)
            f = folder / "paths.yaml"
            f.write_text(yaml.safe_dump({"paths": {
                "task_set": "builtin", "currency": "EUR",
                "retry": {"max_retries": 1, "timeout_s": 30, "backoff_s": 0.01},
                "endpoints": {"self_hosted": {"base_url": sh, "concurrency": 3},
                              "api": {"base_url": api, "concurrency": 3}}}}), encoding="utf-8")
            store = RunStore.create(folder / "out")
            run_paths(load_paths_params([f]), store)
            out[name] = (store.root, read_paths_record(store.root))
    return out


# the built-in task set holds 6 tasks: the live run is read only with the minimum sample lowered to them (a loosened
# rule); at the default 30 it is inconclusive (test_attacks_renewal)
SMALL = {"min_sample_tasks": 6}


def _live_decision(steady, live_runs, which, changes, benefits=(), rules=None):
    _, real = steady
    root, record = live_runs[which]
    return decide_renewal(vary(real, **changes), rules or RenewalRules(**SMALL), list(benefits),
                          today=dt.date(2026, 8, 14), live=record, live_source=str(root)), record


def test_exit_to_api_needs_the_api_path_to_meet_the_quality_rule_live(steady, live_runs):
    """On the task log alone POOR exits to the API; with a live run where the API path fails the tool tasks, exit is
    not allowed, and the decision says why with the measured intervals."""
    d, record = _live_decision(steady, live_runs, "api-misses", POOR)
    assert (d.decision, d.rule) == ("dual-circuit", "dual.api-misses-quality"), d.reasons
    live = d.finding("comparison.live")
    sh = next(s for s in record.paths if s.path == "self_hosted")
    api = next(s for s in record.paths if s.path == "api")
    assert live.outcome is False and live.measured["tasks"] == record.pairs[0].pairs == sh.tasks_run
    assert (live.measured["api_accepted"], live.measured["self_hosted_accepted"]) == (api.accepted, sh.accepted)
    assert live.measured["api_acceptance_low"] == pytest.approx(api.acceptance_low, abs=1e-4)
    assert live.measured["bar"] == pytest.approx(sh.acceptance_low, abs=1e-4)  # null rule: the self-hosted bound
    assert d.reasons[0].startswith("dual-circuit: exit-to-api is not allowed")
    assert f"API accepted {api.accepted}/{sh.tasks_run}" in live.sentence and "exit-to-api is not allowed" in live.sentence
    # the dual circuit names the task categories: the tool tasks fail on the API only, so they stay self-hosted
    tool_categories = {t.category for t in record.tasks if t.path == "api" and not t.accepted
                       and any(o.task == t.task and o.accepted for o in record.tasks if o.path == "self_hosted")}
    assert tool_categories and set(d.routing["task_categories"]["self_hosted"]) == tool_categories
    assert d.routing["task_categories"]["api"] == []
    assert "kept self-hosted: " in d.finding("routing.categories").sentence
    # a fixed bar the API clears: exit is allowed again
    low = RenewalRules(live_api_acceptance_low_min=0.0, **SMALL)
    assert _live_decision(steady, live_runs, "api-misses", POOR, rules=low)[0].decision == "exit-to-api"


def test_an_api_meeting_the_quality_rule_live_allows_exit_and_routes_by_category(steady, live_runs):
    d, _ = _live_decision(steady, live_runs, "api-meets", POOR)
    assert (d.decision, d.rule) == ("exit-to-api", "exit.quality-use-recovery"), d.reasons
    assert d.finding("comparison.live").outcome is True and "meets the quality rule" in "\n".join(d.reasons)
    dual, record = _live_decision(steady, live_runs, "api-meets", PEAKS, ["data_control"])
    assert dual.rule == "dual.peaks-and-control"
    cats = dual.routing["task_categories"]
    failing_self_hosted = {t.category for t in record.tasks if t.path == "self_hosted" and not t.accepted
                           and any(o.task == t.task and o.accepted for o in record.tasks if o.path == "api")}
    assert set(cats["api"]) == failing_self_hosted and cats["self_hosted"] == []
    assert all(row["fail_on_self_hosted_only"] for row in cats["by_category"])


def test_without_a_live_run_the_comparison_is_an_open_item(steady):
    """No live record: the decision is the task log's, and says it rests on the task log only — never a silent
    pass; a dual circuit's routing names no category and says so."""
    _, real = steady
    d = decide_renewal(real, RenewalRules(), [], today=dt.date(2026, 8, 14))
    assert d.decision == "renew"
    live = d.finding("comparison.live")
    assert live.outcome is None and live.sentence.startswith("open: ") and "task log only" in live.sentence
    dual = decide_renewal(vary(real, **PEAKS), RenewalRules(), ["data_control"], today=dt.date(2026, 8, 14))
    assert dual.routing["task_categories"] is None
    assert dual.finding("routing.categories").sentence.startswith("open: the dual circuit's routing names no task")


def _equivalence(steady, record, root, gap, live=True):
    """The decision on a bill where the API is cheaper per accepted task, with the API's equivalence judged at
    `gap` (the API path cleared by a fixed live bar, so only the equivalence weighs)."""
    data, real = steady
    rules = RenewalRules(api_equivalent_gap_max=gap, live_api_acceptance_low_min=0.0, **SMALL)
    axes = recost(data, recompare(data, real, rules), capacity=900_000)
    assert axes["cost"].self_hosted_cheaper_per_task is False
    return decide_renewal(axes, rules, [], today=dt.date(2026, 8, 14), live=record if live else None,
                          live_source=str(root) if live else None), axes


def test_the_api_equivalence_is_judged_on_the_live_run(steady, live_runs):
    """With a live run the equivalence comes from its same tasks (paired difference and its interval against the
    gap), not from the task log, whose figure the finding keeps as context; the sentence says which source."""
    root, record = live_runs["api-meets"]  # the API path accepts every task, the self-hosted one fails the tool tasks
    pair = record.pairs[0]
    assert (pair.a, pair.b) == ("self_hosted", "api") and pair.high < 0
    on_log, axes = _equivalence(steady, record, root, 0.0, live=False)  # the task log: not shown at a gap of 0
    assert axes["comparison"].api_equivalent is None and on_log.rule == "dual.gain-not-shown"
    log = on_log.finding("comparison.api_equivalent")
    assert "source" not in log.measured and "in the task log" in log.sentence
    d, _ = _equivalence(steady, record, root, 0.0)
    assert (d.decision, d.rule) == ("exit-to-api", "exit.api-equivalent-and-cheaper"), d.reasons
    f = d.finding("comparison.api_equivalent")
    m = f.measured
    assert f.outcome is True and m["source"] == "live" and m["run"] == str(root) and m["tasks"] == pair.pairs
    assert (m["difference"], m["difference_low"], m["difference_high"]) == (pair.difference, pair.low, pair.high)
    by = {s.path: s for s in record.paths}
    for path in ("self_hosted", "api"):
        assert m[f"{path}_accepted"] == by[path].accepted
        assert m[f"{path}_acceptance_low"] == pytest.approx(by[path].acceptance_low, abs=1e-4)
    assert m["quality_rule_sha256"] == next(x.sha256 for x in record.fixed if x.name == "quality_rule")
    assert m["task_log"]["api_equivalent"] is None and m["task_log"]["paired_tasks"] == axes["comparison"].paired_tasks
    assert f"{root.name}, quality rule sha256 {m['quality_rule_sha256'][:12]}" in f.sentence
    assert f"self-hosted − API acceptance {pair.difference:+.1%}" in f.sentence and "context only" in f.sentence
    assert f.sentence in d.reasons


@pytest.mark.parametrize("gap, outcome, rule", [
    pytest.param(0.02, False, "dual.gain-not-shown", id="interval-above-the-gap-not-equivalent"),
    pytest.param(0.5, None, "dual.gain-not-shown", id="interval-straddling-the-gap-not-shown"),
    pytest.param(1.0, True, "exit.api-equivalent-and-cheaper", id="interval-within-the-gap-equivalent"),
])
def test_an_api_failing_the_same_tasks_live_is_not_equivalent(steady, live_runs, gap, outcome, rule):
    """The API path fails the tool tasks live: however close the task log's rates (equivalent there), the live
    interval decides — above the gap not equivalent, straddling it not shown (never favourable)."""
    root, record = live_runs["api-misses"]
    d, axes = _equivalence(steady, record, root, gap)
    # the task log alone never calls the API not equivalent (its interval straddles the small gaps)
    log = axes["comparison"].api_equivalent
    assert log is not False
    f = d.finding("comparison.api_equivalent")
    assert f.outcome is outcome and d.rule == rule, d.reasons
    assert f.measured["difference_low"] == record.pairs[0].low and f.measured["task_log"]["api_equivalent"] is log
    assert {False: "does not reach", None: "is not shown to reach", True: "reaches"}[outcome] in f.sentence


def test_the_live_equivalence_reads_the_pair_either_way_round(steady, live_runs):
    """A record whose pair is api − self_hosted: the difference is turned to self-hosted − API, the verdict holds."""
    from k3lib.axes.paths.record import paired

    root, record = live_runs["api-misses"]
    turned = record.model_copy(update={"pairs": (paired("api", "self_hosted", list(record.tasks)),)})
    a = _equivalence(steady, record, root, 0.02)[0].finding("comparison.api_equivalent").measured
    b = _equivalence(steady, turned, root, 0.02)[0].finding("comparison.api_equivalent").measured
    assert turned.pairs[0].difference == -record.pairs[0].difference
    assert (b["difference"], b["difference_low"], b["difference_high"]) == \
        (a["difference"], a["difference_low"], a["difference_high"])
    assert b["api_accepted"] == a["api_accepted"] and b["self_hosted_accepted"] == a["self_hosted_accepted"]


@pytest.mark.parametrize("indicators, expected", [
    pytest.param(ind(quality=False, large_idle=True, api_meets_quality=False), "dual.api-misses-quality",
                 id="poor-and-idle-but-api-misses"),
    pytest.param(ind(cheaper=False, api_equivalent=True, api_meets_quality=False), "dual.api-misses-quality",
                 id="equivalent-on-the-log-but-api-misses-live"),
    pytest.param(ind(quality=False, large_idle=True, api_meets_quality=True), "exit.quality-use-recovery",
                 id="api-meets-live-exit"),
    pytest.param(ind(api_meets_quality=False), "renew.converge", id="api-misses-does-not-block-renew"),
])
def test_the_live_gate_on_exit(indicators, expected):
    from k3lib.renewal.decision import decide_rule

    assert decide_rule(indicators).id == expected


def test_a_category_failing_on_each_path_is_split_task_by_task(steady, live_runs):
    """A stored record re-paired by the record's own code after one long-exchange task is flipped (accepted on the
    API only): its category is split task by task, the others keep their side."""
    from k3lib.axes.paths.record import paired

    _, record = live_runs["api-misses"]
    flip = "long-exchange.t3"
    tasks = [t.model_copy(update={"accepted": (t.path == "api")}) if t.task == flip else t for t in record.tasks]
    changed = record.model_copy(update={"tasks": tuple(tasks), "pairs": (paired("self_hosted", "api", tasks),)})
    _, real = steady
    d = decide_renewal(vary(real, **PEAKS), RenewalRules(), ["data_control"], today=dt.date(2026, 8, 14),
                       live=changed, live_source="/runs/20260814T090000Z-abc123-paths")
    cats = d.routing["task_categories"]
    row = next(r for r in cats["by_category"] if r["category"] == "long-exchange")
    assert row["fail_on_self_hosted_only"] == [flip] and flip not in row["fail_on_api_only"]
    assert cats["split"] == ["long-exchange"] and "long-exchange" not in cats["self_hosted"] + cats["api"]
    sentence = d.finding("routing.categories").sentence
    assert "split task by task: long-exchange" in sentence and "(20260814T090000Z-abc123-paths)" in sentence
    assert "/runs/" not in sentence  # the report names the run, never a machine path
