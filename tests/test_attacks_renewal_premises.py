"""Attacks of the second renewal review (issue 44), one per class, each the smallest thing that shows it: numbers out of
range (DCGM blanks, ±Inf, NaN, fractions, repeated YAML keys), ratios whose numerator and denominator come from two
scopes (the API bill, tasks the API finished, a billed node left out, credits), loosened scopes, gaps that hide idle
time, premises shown by someone else's evidence (the drill, one incident for all, a stuck queue gauge) and decisions
on nothing. Each ends in another decision than `renew`, with a reason naming the cause, or in one line (exit 2)."""

from __future__ import annotations

import datetime as dt

import pytest

from renewal_attack import (START, add_to_family, copy_scenario, csv_rows, edit_lines, iso, map_samples, review,
                            text, write_rows)

from k3lib.core.errors import BadInputError
from k3lib.core.yamlsafe import safe_load
from k3lib.renewal import demo
from k3lib.renewal.analysis import analyse_operations, analyse_stability
from k3lib.renewal.drill import not_run
from k3lib.renewal.indicators import load_indicators
from k3lib.renewal.inputs import HoursRecord, IncidentRecord, read_costs
from k3lib.renewal.params import DeploymentLabels, load_review_params
from k3lib.renewal.results import typed
from k3lib.renewal.rules import RenewalRules
from k3lib.renewal.series import Grid, read_history, series_from_file


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return {s: demo.generate(s, tmp_path_factory.mktemp(s)) for s in ("steady", "idle-heavy")}


@pytest.fixture()
def steady(demos, tmp_path):
    return copy_scenario(demos["steady"], tmp_path / "steady")


def _not_renew(d, *needles):
    assert d.decision != "renew", d.reasons
    for n in needles:
        assert n in text(d), (n, text(d))


# --- 1. every number in range ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, needle", [
    pytest.param("2147483632", "a DCGM blank value", id="dcgm-int32-blank"),
    pytest.param("140737488355328", "a DCGM blank value", id="dcgm-fp64-blank"),
    pytest.param("+Inf", "expected a finite number", id="plus-inf"),
    pytest.param("NaN", "expected a finite number", id="nan"),
    pytest.param("138", "expected a utilisation in percent, 0–100", id="above-100"),
    pytest.param("-3", "expected a value ≥ 0", id="negative"),
])
def test_attack_a_sample_out_of_range_is_refused_with_its_line(tmp_path, value, needle):
    """One sample of a history file that is no measure: one line naming the file and the line, never a mean of
    88,787 % (the blank) or a decision on +Inf."""
    f = tmp_path / "history.om"
    f.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="node-a"} 40 1785000000\n'
                 f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="node-a"}} {value} 1785000300\n', encoding="utf-8")
    with pytest.raises(BadInputError) as ei:
        read_history(f)
    line = ei.value.one_line()
    assert line.startswith(f"{f}: line 2: DCGM_FI_DEV_GPU_UTIL") and needle in line, line


def test_attack_utilisation_written_as_a_fraction_is_refused(tmp_path):
    """0.38 for a 38 %-busy GPU would read as idle (and reduce): refused, naming the series and what is expected;
    an idle GPU's whole percents (0 and 1, whose slot means are fractions) are not."""
    f = tmp_path / "history.om"
    grid = Grid(1785000000, 1785000000 + 4 * 300, 300)
    ident = DeploymentLabels(model_name="kimi-k3", hostnames=("node-a",), gpus=1)

    def write(values):
        f.write_text("".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="node-a"}} {v} {1785000000 + 150 * (i + 1)}\n'
                             for i, v in enumerate(values)), encoding="utf-8")

    write([0.38, 0.41, 0.0, 0.9])
    with pytest.raises(BadInputError, match="reads fractions such as 0.38.*expected utilisation in percent, 0–100"):
        series_from_file(f, grid, ident)
    write([0, 1, 1, 0, 0, 1])
    assert series_from_file(f, grid, ident).gpus_in_series == 1


def test_attack_a_repeated_yaml_key_is_refused_in_the_costs_and_the_parameters(steady):
    """A second `capacity:` silently replaced the first (and renewed): refused with the key and both lines."""
    edit_lines(steady["costs"], lambda ls: [*ls, "capacity: 100"])
    with pytest.raises(BadInputError) as ei:
        read_costs(steady["costs"])
    assert "duplicate key 'capacity' (first at line 3)" in ei.value.one_line()
    assert str(steady["costs"]) in ei.value.one_line() and f"line {len(steady['costs'].read_text().splitlines())}" \
        in ei.value.one_line()
    edit_lines(steady["params"], lambda ls: [*ls, "review: {}"])
    with pytest.raises(BadInputError, match="duplicate key 'review'"):
        load_review_params([steady["params"]])
    assert safe_load("a: {b: 1}\nc: [1, 2]\n") == {"a": {"b": 1}, "c": [1, 2]}


def test_attack_a_gateway_line_logged_twice_without_a_response_id_is_billed_once(tmp_path):
    """The same request logged twice by a gateway that writes no response id (same time, task and usage): it was
    billed twice (steady's exports: 4,800 EUR for 2,400). Counted once and reported; a distinct request stays."""
    import json

    from k3lib.renewal.imports import commands
    from k3lib.renewal.imports.params import ImportSection
    from k3lib.renewal.imports.provenance import ReviewWindow

    line = {"timestamp": "2026-08-01T10:00:00Z", "metadata": {"task_id": "T1"}, "model": "kimi-k3",
            "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 0}}
    other = {**line, "timestamp": "2026-08-01T10:00:07Z"}
    path = tmp_path / "gateway.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in (line, line, other)))
    window = ReviewWindow(dt.datetime(2026, 7, 24, tzinfo=dt.timezone.utc), dt.datetime(2026, 8, 14, tzinfo=dt.timezone.utc))
    section = ImportSection.model_validate({"currency": "USD", "usage": {
        "prices": {"default": {"input_per_mtok": 1.0, "output_per_mtok": 1.0, "currency": "USD"}}}})
    lines = commands.import_usage(path, tmp_path / "costs.yaml", section, window)
    assert read_costs(tmp_path / "costs.yaml").api_bill_same_tasks == 2.0
    assert any("1 duplicate(s) of a response id (or of a whole line without one) counted once" in x for x in lines)


# --- 2. one scope for every ratio ----------------------------------------------------------------------------------------

def test_attack_tasks_the_api_finished_are_no_self_hosted_acceptance(steady):
    """40 % of the batch/agent tasks marked routed_to_api and accepted: they are self-hosted failures (the
    acceptance falls), and their API cost must be in the sheet."""
    before = review(steady)[1]["production"]
    header, rows = csv_rows(steady["tasks"])
    marked = 0
    for i, r in enumerate(rows):
        if r["path"] == "self-hosted" and r["category"] in ("batch", "agent") and r["finished_at"] and i % 5 < 2:
            rows[i] = dict(r, routed_to_api="true", accepted="true", timed_out="false")
            marked += 1
    write_rows(steady["tasks"], header, rows)
    edit_lines(steady["costs"], lambda ls: [x.replace("tasks_transferred_to_api: 90", "tasks_transferred_to_api: 0")
                                            for x in ls])
    d, axes = review(steady)
    prod = axes["production"]
    assert prod.losses.routed_to_api >= marked and prod.acceptance_rate < before.acceptance_rate - 0.3
    _not_renew(d, "finished by the API", "tasks_transferred_to_api is 0: their API cost is missing")


def test_attack_a_narrowed_task_set_divides_the_whole_api_bill_by_fewer_tasks(steady):
    """The task set narrowed to [batch]: the 2,400 EUR bill covers the agent tasks too — not compared; and the
    narrower set is a loosening nobody accepted."""
    d, axes = review(steady, ["review.fixed.task_set.categories=[batch]"])
    assert axes["comparison"]["api_tasks_outside_task_set"] > 0 and axes["cost"].self_hosted_cheaper_per_task is None
    _not_renew(d, "outside the task set (batch): it is not the bill of the tasks it is divided by",
               "fixed.task_set.categories [batch]", "not accepted")


def test_attack_an_api_bill_imported_without_the_task_log_is_not_the_same_tasks_bill(steady):
    """`k3 import usage` without --tasks bills every line of the window (another app's chat traffic too), and the
    review divided it by the task set's API tasks, renewing: the cost is now not compared, naming why."""
    from k3lib.renewal.imports.commands import usage_selection
    from k3lib.renewal.imports.params import UsageParams

    def with_source(selection: str) -> None:
        edit_lines(steady["costs"], lambda ls: [x for x in ls if not x.startswith(("sources:", "- ", "  "))] + [
            "sources:", "- importer: usage", "  file: gateway.jsonl", f"  sha256: {'a' * 64}",
            "  items: {api_bill_same_tasks: 2400}", f"  selection: {selection}"])

    with_source(usage_selection(UsageParams(task_field="metadata.task_id")))
    d, axes = review(steady)
    assert axes["cost"].self_hosted_cheaper_per_task is None
    _not_renew(d, "the API bill was imported from gateway.jsonl without the task log (k3 import usage --tasks)")
    with_source(usage_selection(UsageParams(task_field="metadata.task_id", tasks="tasks.csv")))
    assert review(steady)[0].decision == "renew"


def test_attack_a_billed_node_left_out_of_the_review_is_refused(steady):
    edit_lines(steady["costs"], lambda ls: [*ls, "capacity_nodes: [node-a, node-b]"])
    with pytest.raises(BadInputError, match="capacity_nodes: node-b billed but not in review.deployment.hostnames"):
        review(steady)


def test_attack_a_second_gpu_node_in_the_series_with_no_billed_nodes_stated_is_no_gain_shown(steady):
    """The reservation is two nodes, the review names one and the costs file names none: the second node (1 %
    busy) was only "left out" and the review renewed. Without capacity_nodes the bill is not shown to be the
    reviewed node's only; stating the billed nodes (node-a alone) shows it."""
    from renewal_attack import samples

    util = samples(steady["history"], "DCGM_FI_DEV_GPU_UTIL")
    add_to_family(steady["history"], "DCGM_FI_DEV_GPU_UTIL",
                  [f"{h.replace('node-a', 'node-b')} 1 {t}" for h, _, t in util])
    d, axes = review(steady)
    assert axes["cost"].self_hosted_cheaper_per_task is None
    _not_renew(d, "GPU node(s) the review leaves out (node-b) and the costs file names no capacity_nodes")
    edit_lines(steady["costs"], lambda ls: [*ls, "capacity_nodes: [node-a]"])
    assert review(steady)[0].decision == "renew"


def test_attack_a_one_off_credit_is_listed_apart_not_netted(steady):
    """A FOCUS credit of −12,000 in the sheet's credits: listed, the capacity untouched; netted only when it recurs
    and someone accepted it."""
    base = review(steady)[1]["cost"].self_hosted.total
    edit_lines(steady["costs"], lambda ls: [*ls, "credits:", "  - {amount: -12000, item: capacity, "
                                            "charge_category: Credit, description: launch credit}"])
    d, axes = review(steady)
    assert axes["cost"].self_hosted.total == base and axes["cost"].credits[0].netted is False
    assert "-12,000.00 EUR (Credit, capacity, launch credit)" in text(d) and "not netted" in text(d)
    edit_lines(steady["costs"], lambda ls: [x.replace("launch credit}", "launch credit, recurring: true, "
                                                      "accepted_by: finance}") for x in ls])
    assert review(steady)[1]["cost"].self_hosted.total == base - 12000


@pytest.mark.parametrize("kind", ["Usage", "Tax", "Purchase"])
def test_attack_a_negative_line_of_a_counted_charge_is_listed_apart_not_netted(tmp_path, kind):
    """The credit again, written as a negative Usage (or Tax, Purchase) line of the deployment's compute: it was
    summed into capacity unseen (26,290 → 15,250 EUR on steady's exports, renew). Any negative line of a kind the
    bill counts is listed apart as "negative KIND", never netted into an item."""
    import csv
    from pathlib import Path

    from k3lib.renewal.imports import commands
    from k3lib.renewal.imports.params import ImportSection
    from k3lib.renewal.imports.provenance import ReviewWindow

    src = Path(__file__).parent / "data" / "exports" / "focus.csv"
    rows = list(csv.DictReader(src.open()))
    window = ReviewWindow(dt.datetime(2026, 7, 24, tzinfo=dt.timezone.utc), dt.datetime(2026, 8, 14, tzinfo=dt.timezone.utc))
    section = ImportSection.model_validate({"currency": "EUR", "costs": {"tags": {"app": "kimi-k3"}}})
    base = next(r for r in rows if r["ServiceCategory"] == "Compute" and r["ChargeCategory"] == "Usage")
    bill = tmp_path / "focus.csv"

    def capacity(extra: list[dict[str, str]]) -> float | None:
        with bill.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows + extra)
        out = tmp_path / f"costs-{len(extra)}.yaml"
        commands.import_bill("focus", bill, out, section, window)
        return read_costs(out).capacity

    before = capacity([])
    negative = {**base, "ChargePeriodStart": "2026-08-01T00:00:00Z", "ChargePeriodEnd": "2026-08-02T00:00:00Z",
                "ChargeCategory": kind, "BilledCost": "-12000", "EffectiveCost": "-12000", "CommitmentDiscountId": ""}
    assert capacity([negative]) == before
    listed = read_costs(tmp_path / "costs-1.yaml").credits
    assert [(c.amount, c.charge_category, c.netted) for c in listed] == [(-12000.0, f"negative {kind}", False)]


@pytest.mark.parametrize("value", ["inf", "-Infinity", "NaN"])
def test_attack_a_bill_amount_that_is_no_number_is_refused_with_its_line(tmp_path, value):
    """A FOCUS line whose EffectiveCost is NaN or ±Inf: once 0 (a line dropped unseen, steady's exports renewed
    500 EUR short) or 1.8e308 written into costs.yaml with exit 0; now one line naming the file, line and column."""
    import csv
    from pathlib import Path

    from k3lib.renewal.imports import commands
    from k3lib.renewal.imports.params import ImportSection
    from k3lib.renewal.imports.provenance import ReviewWindow
    from k3lib.renewal.imports.tables import to_float

    rows = list(csv.DictReader((Path(__file__).parent / "data" / "exports" / "focus.csv").open()))
    rows[2] = {**rows[2], "EffectiveCost": value}
    bill = tmp_path / "focus.csv"
    with bill.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    window = ReviewWindow(dt.datetime(2026, 7, 24, tzinfo=dt.timezone.utc), dt.datetime(2026, 8, 14, tzinfo=dt.timezone.utc))
    section = ImportSection.model_validate({"currency": "EUR", "costs": {"tags": {"app": "kimi-k3"}}})
    with pytest.raises(BadInputError) as ei:
        commands.import_bill("focus", bill, tmp_path / "costs.yaml", section, window)
    assert f"{bill}: line 4, column EffectiveCost: expected a finite number" in ei.value.one_line()
    assert not (tmp_path / "costs.yaml").exists()
    with pytest.raises(ValueError, match="expected a finite number"):
        to_float(value)  # the row readers' cells (hours, incident seconds, GCP credits) alike


# --- 3. every loosening listed -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sets, name", [
    pytest.param(["review.rules.business_hours=[9, 13]"], "rules.business_hours", id="business-hours"),
    pytest.param(["review.rules.timezone=Europe/Paris"], "rules.timezone", id="timezone"),
    pytest.param(["review.rules.min_coverage_share=0.5"], "rules.min_coverage_share", id="coverage-threshold"),
])
def test_attack_a_loosened_scope_forbids_renew_unless_accepted(steady, sets, name):
    d, _ = review(steady, sets)
    assert d.rule == "dual.loosened-not-accepted" and name in text(d), d.reasons
    value = sets[0].split("=", 1)[1]
    accepted, _ = review(steady, [*sets, f"review.accepted_loosened=[{{name: {name}, value: {value}, by: ops lead, "
                                  "why: agreed at kick-off}]"])
    assert accepted.decision == "renew" and "accepted by ops lead" in text(accepted)


# --- 4. missing data is not random ---------------------------------------------------------------------------------------

def test_attack_monitoring_down_over_one_idle_weekend_is_judged_against_weekends(demos, tmp_path):
    """idle-heavy with its GPU samples dropped over one weekend (the window keeps about 90 % coverage): the weekend
    slots are judged against the weekends, and the load is not shown — never a smaller idle share."""
    paths = copy_scenario(demos["idle-heavy"], tmp_path / "idle")
    sat = next(START + dt.timedelta(days=k) for k in range(7) if (START + dt.timedelta(days=k)).weekday() == 5)
    lo, hi = sat.timestamp(), (sat + dt.timedelta(days=2)).timestamp()
    map_samples(paths["history"], "DCGM_FI_DEV_", lambda h, v, t: None if lo <= t < hi else v)
    d, axes = review(paths)
    assert axes["load"]["coverage"]["gpu_util"] > 0.88 and axes["load"]["coverage"]["by_period"]["weekend"] < 0.8
    _not_renew(d, "of the weekend slots", "judged against its own period")
    assert d.rule == "dual.load-not-shown" and d.finding("review.thin") is not None


def test_a_gap_whose_worst_case_changes_the_load_leaves_it_not_shown(steady):
    """steady's load, with a gap that, read idle, would make the window mostly idle: the premise is not shown."""
    axes = review(steady)[1]
    load = typed("load", axes["load"]).model_copy(update={
        "slots": typed("load", axes["load"]).slots.model_copy(update={"not_shown": 500}),
        "worst_case": typed("load", axes["load"]).worst_case.model_copy(update={"idle_demand_share": 0.45})})
    regular, large_idle, _, found = load_indicators(load, RenewalRules())
    assert regular is None and large_idle is None
    assert "worst case, idle for lack of demand would be 45%" in found[1].sentence


# --- 5. each premise shown by its own evidence ---------------------------------------------------------------------------

def test_attack_a_review_without_a_deployment_url_shows_no_drill(steady):
    """A real review (no demo, no target.base_url) is not drilled on the embedded emulator: the drill premise is not
    shown, and two hand-typed incident rows do not renew."""
    from k3lib.opening.review import drill_not_run

    edit_lines(steady["params"], lambda ls: [x for x in ls if not x.strip().startswith("demo:")])
    params = load_review_params([steady["params"]])
    why = drill_not_run(params)
    assert why is not None and "no deployment URL (target.base_url)" in why
    from renewal_attack import TODAY
    from k3lib.renewal.review import analyse, decide_from_axes, load_review

    data = load_review(params)
    d = decide_from_axes(data.params, analyse(data, not_run(why)), today=TODAY)
    _not_renew(d, "the drill premise is not shown: the drill was not run: no deployment URL")


def _incident(i: int, answer: bool | None) -> IncidentRecord:
    at = dt.datetime(2026, 8, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i)
    return IncidentRecord(id=f"INC-{i}", started_at=at, category="vllm-engine", minutes_to_recover=10,
                          **{q: answer for q in ("detected_automatically", "previous_version_restored",
                                                 "in_flight_resumed_or_cancelled",
                                                 "api_failover_without_contract_change", "fields_preserved")})


def test_attack_one_incident_answering_yes_answers_for_itself_only():
    """9 incidents, one answering the five questions yes: the other 8 have no evidence — recovery not shown."""
    out = analyse_stability([_incident(0, True)] + [_incident(i, None) for i in range(1, 9)], RenewalRules())
    assert out.recoverable is None and len(out.incidents_without_evidence) == 8
    assert "8 incident(s) without their own answers (one row answers only for itself)" in \
        " ".join(out.not_recoverable_because)
    assert analyse_stability([_incident(i, True) for i in range(9)], RenewalRules()).recoverable is True


def test_attack_a_stuck_queue_gauge_or_one_waiting_row_is_no_demand_waiting(demos, tmp_path):
    """idle-heavy with vLLM's waiting gauge stuck at 1, and one queued test task waiting ten days: named, and the
    idle time stays idle for lack of demand (it used to become "idle while tasks wait", which no rule reads)."""
    paths = copy_scenario(demos["idle-heavy"], tmp_path / "idle")
    before = review(paths)[1]["load"]
    map_samples(paths["history"], "vllm:num_requests_waiting{", lambda h, v, t: 1.0)
    header, rows = csv_rows(paths["tasks"])
    sub, start = START + dt.timedelta(days=1), START + dt.timedelta(days=11)
    rows.append(dict(rows[0], task_id="Q-1", category="test", path="self-hosted", submitted_at=iso(sub),
                     started_at=iso(start), finished_at=iso(start + dt.timedelta(minutes=5)), accepted="false",
                     timed_out="false", wait_s=str((start - sub).total_seconds())))
    write_rows(paths["tasks"], header, rows)
    d, axes = review(paths)
    load = axes["load"]
    assert load["idle_demand_share"] >= before["idle_demand_share"] - 0.01 and load["idle_scheduling_share"] <= 0.01
    assert load["waiting_causes"]["gauge_only_idle_slots"] > 0 and "Q-1" in load["waiting_causes"]["long_waiting_tasks"]
    _not_renew(d, "where only the queue gauge shows requests waiting", "waiting longer than a large idle stretch (Q-1")


def test_unclassified_hours_are_counted_and_listed():
    hours = [HoursRecord(week="2026-W31", category="monitoring", hours=16),
             HoursRecord(week="2026-W31", category="unclassified", hours=42.7)]
    ops = analyse_operations(hours, {}, {}, RenewalRules(), window_weeks=3)
    assert ops.total_h == 58.7 and ops.unclassified_h == 42.7


# --- 6. nothing decided on nothing ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("tamper, needle", [
    pytest.param("header-only", "no self-hosted task of the task set", id="header-only-task-log"),
    pytest.param("outside", "no self-hosted task of the task set", id="every-task-outside-the-window"),
    pytest.param("future", "after now", id="a-window-in-the-future"),
    pytest.param("other-host", "no GPU utilisation sample of the deployment", id="series-of-another-host"),
])
def test_attack_a_review_with_no_evidence_exits_2_naming_what_is_missing(steady, tamper, needle):
    header, rows = csv_rows(steady["tasks"])
    sets: list[str] = []
    if tamper == "header-only":
        write_rows(steady["tasks"], header, [])
    elif tamper == "outside":
        write_rows(steady["tasks"], header, [dict(r, submitted_at="2025-01-01T00:00:00Z", started_at="",
                                                  finished_at="", accepted="false") for r in rows[:50]])
    elif tamper == "future":
        sets = ["review.series.start=2099-01-01T00:00:00Z", "review.series.end=2099-01-22T00:00:00Z"]
    else:
        edit_lines(steady["history"], lambda ls: [x.replace('Hostname="node-a"', 'Hostname="node-z"') for x in ls])
    with pytest.raises(BadInputError) as ei:
        review(steady, sets)
    assert needle in ei.value.one_line() and "expected" in ei.value.one_line()


def test_the_one_task_review_exits_2(steady, capsys):
    """The new user's review: one task, and a series of another window and host — it once ended in dual-circuit
    while its own reasons said the series cover 0 % of the window."""
    from k3lib.cli.main import main

    header, rows = csv_rows(steady["tasks"])
    write_rows(steady["tasks"], header, [next(r for r in rows if r["path"] == "self-hosted")])
    later = 86400 * 30
    edit_lines(steady["history"], lambda ls: [
        " ".join([*x.rsplit(" ", 2)[:2], str(int(x.rsplit(" ", 1)[1]) + later)]).replace("node-a", "node-q")
        if x.startswith("DCGM_FI_DEV_") else x for x in ls])
    edit_lines(steady["params"], lambda ls: [x for x in ls if not x.strip().startswith("demo:")])
    code = main(["review", "-p", str(steady["params"]), "--out", str(steady["params"].parent / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "no GPU utilisation sample of the deployment" in err and "(series left out: " in err, err


def test_a_decision_on_thin_data_is_not_signed(tmp_path):
    """A dual circuit fired on a load not shown carries review.thin: k3 sign refuses it, naming why."""
    from k3lib.core.store import RunStore
    from k3lib.renewal.decision import Indicators, RULES, thin_evidence
    from k3lib.renewal.findings import RenewalFinding
    from k3lib.report.signing import sign_run

    rule = next(r for r in RULES if r.id == "dual.load-not-shown")
    found = [RenewalFinding("load.regular", None, {"not_shown_because": ["the GPU series cover 12% of the window"]})]
    thin = thin_evidence(rule, Indicators(quality_ok=True), found)
    assert thin is not None and "the GPU series cover 12% of the window" in thin.sentence
    store = RunStore.create(tmp_path / "run")
    store.write_json("decision.json", {"decision": "dual-circuit", "findings": [thin.model_dump()]})
    with pytest.raises(BadInputError, match="refusing to sign: too thin to decide: the GPU series cover 12%"):
        sign_run(store.root, "reviewer")
