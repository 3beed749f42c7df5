"""Attacks that turned `reduce`, `dual-circuit` and `exit-to-api` into `renew` (issue 39, points 1–4), each written to
fail: series of another machine or model, idleness hidden by pings or a coarse step, a window too short or inputs
from outside it, tasks outside the fixed task set, a cost "on the same tasks" with no task in common. Each starts
from a demo scenario that does not renew, tampers with its files as an attacker would, and runs the review's own
path (parameters, inputs, series, analyses, decision): the decision stays off `renew`, with a reason naming the
cause — or the input is refused in one line (exit 2)."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from renewal_attack import (START, add_to_family, copy_scenario, csv_rows, edit_lines, iso, map_samples, review,
                            samples, text, write_rows)

from k3lib.core.errors import BadInputError
from k3lib.renewal import demo
from k3lib.renewal.series import Grid, evaluate_on_grid

SLOT = demo.STEP_S


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return {s: demo.generate(s, tmp_path_factory.mktemp(s)) for s in demo.SCENARIOS}


@pytest.fixture()
def idle(demos, tmp_path):
    """idle-heavy (reduce) with every cost item filled and a dear API bill: self-hosting is shown cheaper, so only
    the load keeps it from renewing (the kit before issue 39 renewed on each load attack below from here)."""
    paths = copy_scenario(demos["idle-heavy"], tmp_path / "idle")
    edit_lines(paths["costs"], lambda ls: [x.replace("teams_waiting_time: ", "teams_waiting_time: 0")
                                           .replace("api_bill_same_tasks: 700", "api_bill_same_tasks: 20000")
                                           for x in ls])
    return paths


def _decision_is(decision, expected, *needles):
    assert decision.decision == expected, decision.reasons
    for n in needles:
        assert n in text(decision), (n, text(decision))


def test_the_idle_baseline_reduces(idle):
    d, axes = review(idle)
    _decision_is(d, "reduce")
    assert axes["load"]["gpus"] == 4 and axes["load"]["deployment"]["left_out"] == []
    assert axes["cost"].self_hosted_cheaper_per_task is True  # the load alone keeps it from renewing


# --- 1. one deployment ---------------------------------------------------------------------------------------------

def _node_b(idle, value=99.0, gpus=4, host="node-b"):
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="{host}",modelName="NVIDIA H200"}} {value:g} {ts}'
             for _, _, ts in samples(idle["history"], 'DCGM_FI_DEV_GPU_UTIL{gpu="0"') for g in range(gpus)]
    add_to_family(idle["history"], "DCGM_FI_DEV_GPU_UTIL", lines)


def test_attack_another_nodes_busy_gpus_are_left_out_and_counted(idle):
    """Another node's DCGM lines (busy 99 %) mixed into the idle history: the deployment's 4 GPUs alone are read,
    the GPU count does not double, and the decision says what was left out."""
    before = review(idle)[1]["load"]
    _node_b(idle)
    d, axes = review(idle)
    _decision_is(d, "reduce", "4 DCGM_FI_DEV_GPU_UTIL series: another host (node-b)", "4 reserved GPU(s) (4 in the series)")
    load = axes["load"]
    assert load["gpus"] == 4 and load["reserved_gpu_h"] == before["reserved_gpu_h"]
    assert load["utilisation"] == before["utilisation"] and load["business_busy_share"] == before["business_busy_share"]
    assert load["deployment"]["left_out"] == [{"name": "DCGM_FI_DEV_GPU_UTIL", "reason": "another host (node-b)",
                                               "series": 4}]


def test_attack_another_models_series_are_left_out(idle):
    """A busy vLLM of another model on the same Prometheus: its queue and counters are not the deployment's."""
    before = review(idle)[1]
    lines = [f'vllm:num_requests_waiting{{model_name="llama-70b",engine="0"}} 40 {ts}'
             for _, _, ts in samples(idle["history"], "vllm:num_requests_waiting{")]
    add_to_family(idle["history"], "vllm:num_requests_waiting", lines)
    d, axes = review(idle)
    _decision_is(d, "reduce", "vllm:num_requests_waiting series: another model (llama-70b)")
    assert axes["load"]["idle_scheduling_share"] == before["load"]["idle_scheduling_share"]


def test_attack_naming_both_nodes_for_four_gpus_is_refused(idle):
    """The attacker names both hosts but keeps the stated 4 GPUs: 8 GPUs found, one line, exit 2."""
    _node_b(idle)
    with pytest.raises(BadInputError) as ei:
        review(idle, ["review.deployment.hostnames=[node-a, node-b]"])
    line = ei.value.one_line()
    assert "8 GPUs of the deployment (node-a, node-b)" in line and "review.deployment.gpus is 4" in line


def test_attack_a_shared_nodes_other_gpus_need_the_uuids(idle):
    """The deployment's node also holds 4 busy GPUs of another deployment: by host alone 8 GPUs are found for 4
    reserved (refused); named by UUID, the 4 reserved ones alone are read."""
    def with_uuid(lines):
        return [x.replace('",Hostname="node-a"', '",UUID="GPU-' + x.split('gpu="')[1][0] + '",Hostname="node-a"')
                if x.startswith("DCGM_FI_DEV_") else x for x in lines]

    edit_lines(idle["history"], with_uuid)
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",UUID="GPU-{g}",Hostname="node-a",modelName="NVIDIA H200"}} 99 {ts}'
             for _, _, ts in samples(idle["history"], 'DCGM_FI_DEV_GPU_UTIL{gpu="0"') for g in range(4, 8)]
    add_to_family(idle["history"], "DCGM_FI_DEV_GPU_UTIL", lines)
    with pytest.raises(BadInputError, match="8 GPUs of the deployment .node-a. .* name them by "
                                            "review.deployment.gpu_uuids"):
        review(idle)
    d, axes = review(idle, ["review.deployment.gpu_uuids=[GPU-0, GPU-1, GPU-2, GPU-3]"])
    _decision_is(d, "reduce", "another GPU (GPU-4)")
    assert sum(x["series"] for x in axes["load"]["deployment"]["left_out"]) == 4


@pytest.mark.parametrize("sets, needle", [
    pytest.param(["review.deployment=null"], "review.deployment", id="no-identity"),
    pytest.param(["review.deployment.hostnames=[]"], "hostnames or gpu_uuids", id="no-host-or-gpu"),
    pytest.param(["review.deployment.model_name=null"], "model_name", id="no-model"),
    pytest.param(["review.deployment.gpus=null"], "gpus", id="no-gpu-count"),
])
def test_a_review_without_the_deployments_identity_is_refused(idle, sets, needle):
    with pytest.raises(BadInputError) as ei:
        review(idle, sets)
    assert needle in ei.value.one_line() and "\n" not in ei.value.one_line()


def _acceptance_run(folder, *, decision="production", base_url="http://gpu-node-1:8000", model="kimi-k3", gpus=4):
    from k3lib.core.evidence import EvidenceRecord
    from k3lib.core.store import RunStore

    store = RunStore.create_at(folder)
    store.write_json("params.json", {"target": {"base_url": base_url}})
    for axis, data in (("probe", {"model": model}), ("environment", {"topology": {"gpu_count": gpus}})):
        store.write_json(f"evidence/{axis}.json", EvidenceRecord(axis=axis, title=axis, status="pass",
                                                                 data=data).model_dump(mode="json"))
    store.write_json("decision.json", {"decision": decision, "reasons": []})
    return folder


def test_the_identity_is_read_from_an_accepted_run_and_checked_against_it(idle, tmp_path):
    run = _acceptance_run(tmp_path / "accepted")
    sets = [f"review.deployment.acceptance_run={run}", "review.deployment.model_name=null",
            "review.deployment.gpus=null"]
    d, axes = review(idle, sets)
    _decision_is(d, "reduce", "identified from acceptance run accepted")
    assert axes["load"]["deployment"]["model_name"] == "kimi-k3" and axes["load"]["gpus"] == 4
    with pytest.raises(BadInputError, match="8 but the acceptance run accepted accepted 4"):
        review(idle, sets[:2] + ["review.deployment.gpus=8"])


@pytest.mark.parametrize("kw, needle", [
    pytest.param({"decision": "environment-rebuild"}, "decided environment-rebuild", id="not-accepted"),
    pytest.param({"base_url": None}, "embedded emulator", id="an-emulator-run"),
    pytest.param({"model": "llama-70b"}, "'kimi-k3' but the acceptance run", id="another-model"),
])
def test_an_acceptance_run_that_is_not_this_deployments_is_refused(idle, tmp_path, kw, needle):
    run = _acceptance_run(tmp_path / "run", **kw)
    with pytest.raises(BadInputError) as ei:
        review(idle, [f"review.deployment.acceptance_run={run}"])
    assert needle in ei.value.one_line()


# --- 2. one window -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sets, needle", [
    pytest.param([f"review.series.start={iso(START + dt.timedelta(days=20, hours=9))}"], "a window of 0.625 days",
                 id="nine-hours"),
    pytest.param([f"review.series.start={iso(START + dt.timedelta(days=7))}"], "expected at least 21 days",
                 id="two-weeks"),
])
def test_attack_a_short_window_is_refused(idle, sets, needle):
    with pytest.raises(BadInputError) as ei:
        review(idle, sets)
    assert needle in ei.value.one_line() and "min_window_days" in ei.value.one_line()


def test_a_short_window_allowed_by_a_loosened_rule_clips_the_tasks_and_says_so(idle):
    """Nine hours of one day with the minimum lowered: the three weeks of tasks are not divided by nine hours, and
    the decision, its condition and the report's parameter line name the loosened rule."""
    from k3lib.batch.renewal import parameters_line
    from k3lib.renewal.params import load_review_params

    sets = ["review.rules.min_window_days=0.3", f"review.series.start={iso(START + dt.timedelta(days=20, hours=9))}",
            f"review.series.end={iso(START + dt.timedelta(days=20, hours=18))}"]
    d, axes = review(idle, sets)
    prod = axes["production"]
    assert prod.outside_window.outside > 900 and prod.tasks < 100
    assert prod.accepted_per_operating_h < 10
    assert d.decision != "renew", d.reasons
    assert "decided on loosened rules" in text(d) and "rules.min_window_days 0.3 (built-in 21" in text(d)
    assert "the decision holds only under them" in d.condition
    assert "loosened toward renew: rules.min_window_days 0.3" in parameters_line(load_review_params([idle["params"]],
                                                                                                     sets))


def test_attack_tasks_copied_from_before_the_window_do_not_count(demos, tmp_path):
    """poor (exit-to-api): its self-hosted tasks copied 21 days earlier, all accepted, to halve the cost per
    accepted task — outside the window, counted, never read."""
    paths = copy_scenario(demos["poor"], tmp_path / "poor")
    before = review(paths)[1]
    header, rows = csv_rows(paths["tasks"])
    shift = dt.timedelta(days=21)

    def earlier(r):
        out = dict(r, task_id="OLD-" + r["task_id"], accepted="true", timed_out="false", retries="0")
        for k in ("submitted_at", "started_at", "finished_at"):
            if out[k]:
                out[k] = iso(dt.datetime.fromisoformat(out[k].replace("Z", "+00:00")) - shift)
        if not out["finished_at"]:
            out["accepted"] = "false"
        return out

    copies = [earlier(r) for r in rows if r["path"] == "self-hosted"]
    write_rows(paths["tasks"], header, rows + copies)
    d, axes = review(paths)
    _decision_is(d, "exit-to-api", f"{len(copies)} task(s)", "outside the window, not read")
    assert axes["production"].accepted == before["production"].accepted
    assert axes["production"].outside_window.outside == len(copies)


def _unrecoverable_steady(demos, tmp_path):
    """steady with its incidents' field preservation left blank: recovery not shown → dual-circuit."""
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    header, rows = csv_rows(paths["incidents"])
    write_rows(paths["incidents"], header, [dict(r, fields_preserved="") for r in rows])
    return paths


def test_attack_an_incident_from_another_year_recovers_nothing(demos, tmp_path):
    paths = _unrecoverable_steady(demos, tmp_path)
    _decision_is(review(paths)[0], "dual-circuit", "neither the drill nor the incident log shows: fields_preserved")
    header, rows = csv_rows(paths["incidents"])
    old = dict(rows[0], id="INC-2025", started_at="2025-03-01T10:00:00Z", fields_preserved="true",
               minutes_to_recover="5")
    write_rows(paths["incidents"], header, rows + [old])
    d, axes = review(paths)
    _decision_is(d, "dual-circuit", "fields_preserved", "1 incident(s) outside the window not read")
    assert axes["stability"].outside_window.outside_examples == ("INC-2025 (2025-03-01)",)


def _heavy_steady(demos, tmp_path):
    """steady with 25 h of operations a week (above the 20 h rule): dual-circuit."""
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    header, rows = csv_rows(paths["hours"])
    write_rows(paths["hours"], header, [dict(r, hours=f"{float(r['hours']) * 25 / 11.6:.1f}") for r in rows])
    return paths


def test_attack_hours_of_weeks_outside_the_window_do_not_dilute_the_effort(demos, tmp_path):
    paths = _heavy_steady(demos, tmp_path)
    base, axes = review(paths)
    _decision_is(base, "dual-circuit", "operations effort heavy")
    header, rows = csv_rows(paths["hours"])
    padding = [{"week": f"2026-W{w}", "category": "documentation", "hours": "0"} for w in range(40, 52)]
    write_rows(paths["hours"], header, rows + padding)
    d, after = review(paths)
    _decision_is(d, "dual-circuit", "operations effort heavy")
    assert after["operations"].per_week_h == axes["operations"].per_week_h > 20
    assert after["operations"].outside_window.outside == len(padding) and after["operations"].weeks == 3


@pytest.mark.parametrize("week", ["W31", "31", "2026-W54", "2026-31"])
def test_a_week_without_its_year_is_refused_with_its_line(demos, tmp_path, week):
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    added = len(paths["hours"].read_text().splitlines()) + 1
    edit_lines(paths["hours"], lambda ls: ls + [f"{week},documentation,0"])
    with pytest.raises(BadInputError) as ei:
        review(paths)
    line = ei.value.one_line()
    assert f"line {added}, column week" in line and "ISO week such as 2026-W31" in line


def test_attack_a_partial_history_is_not_shown_never_idle(idle):
    """The GPU series for the last week only (a partial export): the missing days are not idle — the load is not
    shown, which is neither reduce (idle) nor renew."""
    cut = (START + dt.timedelta(days=14)).timestamp()
    map_samples(idle["history"], "DCGM_FI_DEV_", lambda h, v, t: v if t >= cut else None)
    d, axes = review(idle)
    _decision_is(d, "dual-circuit", "load not shown (neither idle nor busy)", "cover 33% of the window's slots")
    assert d.rule == "dual.load-not-shown" and axes["load"]["shown"] is False
    assert axes["load"]["utilisation"] is None and axes["load"]["large_idle_share"] is None


def test_attack_holes_punched_in_idle_stretches_do_not_break_them(idle):
    """One slot in 36 removed (every 3 h): the coverage stays above the rule, and a slot not shown neither breaks nor
    extends an idle stretch — the large idle periods stay large."""
    before = review(idle)[1]["load"]["large_idle_share"]
    map_samples(idle["history"], "DCGM_FI_DEV_GPU_UTIL", lambda h, v, t: None if (t // SLOT) % 36 == 0 else v)
    d, axes = review(idle)
    _decision_is(d, "reduce")
    assert axes["load"]["coverage"]["gpu_util"] > 0.9 and axes["load"]["large_idle_share"] >= before


def test_attack_dropping_an_idle_gpus_samples_never_raises_the_mean(idle):
    """GPU 3's samples dropped wherever it was idle: those slots are not shown (a reserved GPU missing), never a
    mean over the busy ones."""
    map_samples(idle["history"], 'DCGM_FI_DEV_GPU_UTIL{gpu="3"', lambda h, v, t: None if v < 10 else v)
    d, axes = review(idle)
    assert d.decision != "renew" and axes["load"]["shown"] is False, d.reasons
    assert "every one of the 4 reserved GPUs" in text(d)


def test_a_task_log_covering_one_week_is_not_shown(demos, tmp_path):
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    header, rows = csv_rows(paths["tasks"])
    cut = iso(START + dt.timedelta(days=14))
    write_rows(paths["tasks"], header, [r for r in rows if r["submitted_at"] >= cut])
    d, axes = review(paths)
    assert d.decision != "renew" and axes["production"].shown is False
    assert "the task log records tasks on 33% of the window's days" in text(d)


# --- 3. utilisation measured, not sampled --------------------------------------------------------------------------

def test_a_slot_is_the_mean_over_it_not_one_instant():
    """Samples every 15 s, idle but for a 15-second spike at each grid instant: an instant query reads 100 % at
    every slot; the slot mean reads 5 %."""
    grid = Grid(0.0, 3600.0, 300.0)
    points = [(float(t), 100.0 if t % 300 == 0 else 0.0) for t in range(15, 3601, 15)]
    means = evaluate_on_grid(points, grid)
    assert all(m == pytest.approx(5.0) for m in means)
    assert evaluate_on_grid(points, grid, "last") == (100.0,) * 12  # what one instant would have read
    assert math.isnan(evaluate_on_grid([(10.0, 1.0)], Grid(0.0, 900.0, 300.0))[2])  # an empty slot: not shown


def _pings(idle):
    """A 5-minute utilisation blip (100 %) every 30 minutes on every GPU of the idle history."""
    map_samples(idle["history"], "DCGM_FI_DEV_GPU_UTIL", lambda h, v, t: 100.0 if (t // SLOT) % 6 == 0 else v)


def test_attack_five_minute_pings_do_not_read_as_busy(idle):
    _pings(idle)
    d, axes = review(idle)
    _decision_is(d, "reduce", "mean utilisation of the reserved GPUs", "idle for lack of demand")
    load = axes["load"]
    assert load["large_idle_share"] < 0.4  # the pings do break the long idle stretches …
    assert load["utilisation"] < 0.25 and load["idle_demand_share"] > 0.4  # … but not the utilisation or demand


def test_attack_an_hourly_step_is_refused(idle):
    _pings(idle)
    with pytest.raises(BadInputError) as ei:
        review(idle, ["review.series.step_s=3600"])
    assert "review.series.step_s" in ei.value.one_line() and "900" in ei.value.one_line()


def test_attack_the_coarsest_step_averages_and_is_named(idle):
    """A 15-minute step (the most allowed): every other slot is a third busy, so the business-hour slots pass the
    busy rule and no idle stretch is long — the mean utilisation still decides, and the coarser step is listed
    as loosened."""
    _pings(idle)
    d, axes = review(idle, ["review.series.step_s=900"])
    load = axes["load"]
    assert load["step_s"] == 900 and load["business_busy_share"] >= 0.5 and load["large_idle_share"] < 0.4
    _decision_is(d, "reduce", "rule ≥ 25%", "series.step_s 900 (built-in 300")


# --- 4. the fixed task set decides ---------------------------------------------------------------------------------

def test_attack_thousands_of_accepted_test_tasks_deliver_nothing(demos, tmp_path):
    """poor (exit-to-api) padded with 14,000 accepted 20-second `test` tasks: outside the task set (batch, agent),
    counted by category, never delivered."""
    paths = copy_scenario(demos["poor"], tmp_path / "poor")
    header, rows = csv_rows(paths["tasks"])
    pad = []
    for n in range(14_000):
        t = START + dt.timedelta(seconds=60 + n * 129)
        pad.append({"task_id": f"P{n:05d}", "category": "test", "path": "self-hosted", "submitted_at": iso(t),
                    "started_at": iso(t), "finished_at": iso(t + dt.timedelta(seconds=20)), "accepted": "true",
                    "retries": "0", "tool_call_errors": "0", "timed_out": "false", "manual_correction": "false",
                    "routed_to_api": "false", "wait_s": "0.0"})
    write_rows(paths["tasks"], header, rows + pad)
    sets = ["review.fixed.task_set.categories=[batch, agent]"]
    d, axes = review(paths, sets)
    _decision_is(d, "exit-to-api", "task(s) outside the task set", "batch, agent")
    assert axes["production"].outside_task_set["test"] >= 14_000
    assert axes["production"].acceptance_rate < 0.6


def _api_cheaper_steady(demos, tmp_path):
    """steady with an API bill of 500 EUR: the API is cheaper per accepted task → dual-circuit (gain not shown)."""
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    edit_lines(paths["costs"], lambda ls: [x if not x.startswith("api_bill_same_tasks") else
                                           "api_bill_same_tasks: 500" for x in ls])
    return paths


def test_attack_api_tasks_renamed_so_none_is_shared(demos, tmp_path):
    """API task ids prefixed and most API tasks made to fail (the API looks dear per accepted task): no task runs
    on both paths, so there is no cost 'on the same tasks'."""
    paths = _api_cheaper_steady(demos, tmp_path)
    _decision_is(review(paths)[0], "dual-circuit", "above the API's")
    header, rows = csv_rows(paths["tasks"])
    rows = [dict(r, task_id="API-" + r["task_id"], accepted="false") if r["path"] == "api" else r for r in rows]
    write_rows(paths["tasks"], header, rows)
    d, axes = review(paths)
    _decision_is(d, "dual-circuit", "0 task(s) of the fixed task set ran on both paths, fewer than 30",
                 "not comparable with")
    assert axes["cost"].self_hosted_cheaper_per_task is None and axes["comparison"]["api_equivalent"] is None


def test_attack_a_few_shared_tasks_among_failing_api_ones(demos, tmp_path):
    """30 API tasks shared, the other 270 renamed and failing: the bill is not for the same tasks."""
    paths = _api_cheaper_steady(demos, tmp_path)
    header, rows = csv_rows(paths["tasks"])
    api = [i for i, r in enumerate(rows) if r["path"] == "api"]
    for i in api[30:]:
        rows[i] = dict(rows[i], task_id="API-" + rows[i]["task_id"], accepted="false")
    write_rows(paths["tasks"], header, rows)
    d, _ = review(paths)
    _decision_is(d, "dual-circuit", "only 30 of the 300 API tasks the bill covers also ran self-hosted")


@pytest.mark.parametrize("value", [".inf", ".nan", "1e400"])
def test_an_infinite_amount_is_refused(demos, tmp_path, value):
    paths = copy_scenario(demos["steady"], tmp_path / "steady")
    edit_lines(paths["costs"], lambda ls: [x if not x.startswith("api_bill_same_tasks") else
                                           f"api_bill_same_tasks: {value}" for x in ls])
    with pytest.raises(BadInputError) as ei:
        review(paths)
    assert "key api_bill_same_tasks" in ei.value.one_line() and "finite" in ei.value.one_line()


# --- 1. one deployment, on real vLLM scrapes ----------------------------------------------------------------------

def _history_of(scrape: str, path) -> None:
    """A real /metrics scrape (Prometheus text) as an OpenMetrics history: its review series at two instants."""
    from prometheus_client.parser import text_string_to_metric_families

    from k3lib.renewal.series import VLLM_SERIES
    from k3lib.io.metrics.names import spec_for

    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    wanted = {n for c in VLLM_SERIES for n in spec_for(c).names}
    lines = []
    for family in text_string_to_metric_families(scrape):
        for s in family.samples:
            if s.name in wanted:
                labels = ",".join(f'{k}="{esc(v)}"' for k, v in sorted(s.labels.items()))
                lines += [f"{s.name}{{{labels}}} {s.value!r} {t}" for t in (1_784_851_350, 1_784_851_650)]
    lines.sort(key=lambda x: x.rsplit(" ", 1)[0])  # one series after another, each in time order
    path.write_text("\n".join(lines + ["# EOF"]) + "\n", encoding="utf-8")


@pytest.mark.parametrize("name", [f"0{i}.prom" for i in range(1, 9)])
def test_real_vllm_series_are_selected_by_their_model_name(real_world, tmp_path, name):
    """Real vLLM scrapes (one to four engines): the served model's series are kept by `model_name`, every engine
    summed; named another model, every one of them is left out and counted, none read."""
    import json

    from k3lib.renewal.params import DeploymentLabels
    from k3lib.renewal.series import series_from_file

    label = json.loads((real_world / "labels.json").read_text())[f"metrics/{name}"]
    history = tmp_path / "history.om"
    _history_of((real_world / "metrics" / name).read_text(encoding="utf-8"), history)
    grid = Grid(1_784_851_200.0, 1_784_851_800.0, 300.0)
    own = series_from_file(history, grid,
                           DeploymentLabels(model_name=label["model_name"], hostnames=("node-a",), gpus=4))
    running = next(rs for n, rs in own.raw.items() if n.endswith("num_requests_running"))
    assert own.left_out == () and len(running.values) == label["engines"]
    assert sum(v[0] for v in running.values.values()) == label["values"]["num_requests_running"]
    other = series_from_file(history, grid, DeploymentLabels(model_name="moonshotai/Kimi-K3-other",
                                                           hostnames=("node-a",), gpus=4))
    assert other.raw == {} and {x.reason for x in other.left_out} == {f"another model ({label['model_name']})"}
