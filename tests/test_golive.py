"""Go-live kit: alert thresholds from the accepted run (promtool-checked and unit-tested), dashboard, ROLLBACK.md."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import pytest

from conftest import needs_tool
import yaml

from k3lib.core.errors import BadInputError, EvidenceError
from k3lib.golive import (ALERTS_FILE, DASHBOARD_FILE, ROLLBACK_FILE, GoliveOptions, error_reasons, metric_names,
                          write_golive_kit)

from test_baseline import BASE, changed, write_run

PROMTOOL = shutil.which("promtool")
needs_promtool = needs_tool(PROMTOOL is not None, "promtool missing (Debian package prometheus, installed by .ci/run): "
                                                  "generated rules not checked here")
ALL_ALERTS = ["K3EngineDown", "K3QueueTimeAboveAccepted", "K3KvCacheUsageAboveAccepted",
              "K3PreemptionsAboveAccepted", "K3ErrorRatioAboveAccepted", "K3PrefixHitRateFarBelowValidated"]


def kit_for(tmp_path, spec=BASE, statuses=None, **opts):
    store = write_run(tmp_path, "run", spec, statuses)
    out = tmp_path / "kit"
    kit = write_golive_kit(store.root, out, options=GoliveOptions(**opts) if opts else None)
    rules = yaml.safe_load((out / ALERTS_FILE).read_text())["groups"][0]["rules"]
    return kit, {r["alert"]: r for r in rules}, out


def promtool(*args, cwd):
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_thresholds_are_the_accepted_levels(tmp_path):
    kit, rules, _ = kit_for(tmp_path, traffic_hit_rate=0.6)
    assert list(rules) == ALL_ALERTS and kit.omitted == {}
    assert rules["K3QueueTimeAboveAccepted"]["expr"].rstrip().endswith("> 0.4")  # 400 ms from the evidence
    assert rules["K3QueueTimeAboveAccepted"]["for"] == "10m"
    assert ("histogram_quantile(0.95, sum by (le) (rate(vllm:request_queue_time_seconds_bucket{job=\"vllm\"}[5m])))"
            in rules["K3QueueTimeAboveAccepted"]["expr"])
    assert rules["K3KvCacheUsageAboveAccepted"]["expr"] == 'max(vllm:kv_cache_usage_perc{job="vllm"}) > 0.62'
    assert rules["K3PreemptionsAboveAccepted"]["expr"] == 'sum(rate(vllm:num_preemptions_total{job="vllm"}[5m])) > 0'
    err = rules["K3ErrorRatioAboveAccepted"]["expr"]
    assert 'finished_reason="error"' in err and "abort" not in err and "vllm:request_success_total" in err
    # half the rate ordinary traffic reaches (0.6), never the controlled warm requests' 0.9
    assert rules["K3PrefixHitRateFarBelowValidated"]["expr"].rstrip().endswith("< 0.3")
    assert "absent(vllm:num_requests_running" in rules["K3EngineDown"]["expr"]
    assert all(r["labels"]["k3_accepted_run"] == "run" for r in rules.values())


def test_missing_axes_omit_rules_and_rollback_says_so(tmp_path):
    spec = changed(capacity=None)
    kit, rules, out = kit_for(tmp_path, spec, statuses={"prefix_cache": "fail"})
    assert list(rules) == ["K3EngineDown"]  # engine down needs no measured level
    assert set(kit.omitted) == set(ALL_ALERTS) - {"K3EngineDown"}
    assert "evidence/capacity.json (absent)" in kit.omitted["K3QueueTimeAboveAccepted"]
    assert "did not pass (status fail)" in kit.omitted["K3PrefixHitRateFarBelowValidated"]
    text = (out / ROLLBACK_FILE).read_text()
    assert text.count("NOT ARMED") >= 5 and "## Alerts not written (no accepted level)" in text
    alerts = (out / ALERTS_FILE).read_text()
    assert "0.62" not in alerts and "0.45" not in alerts  # no number survives from anywhere else


def test_the_hit_rate_alert_needs_the_rate_ordinary_traffic_reaches(tmp_path):
    kit, rules, out = kit_for(tmp_path)
    assert "K3PrefixHitRateFarBelowValidated" not in rules
    assert "controlled warm requests" in kit.omitted["K3PrefixHitRateFarBelowValidated"]
    assert "--traffic-hit-rate" in (out / ROLLBACK_FILE).read_text()
    with pytest.raises(BadInputError, match="between 0 and 1"):
        GoliveOptions(traffic_hit_rate=1.5)


def test_zero_validated_hit_rate_arms_no_hit_rate_alert(tmp_path):
    kit, rules, _ = kit_for(tmp_path, changed(prefix_cache__observed_hit_tokens=0), traffic_hit_rate=0.6)
    assert "K3PrefixHitRateFarBelowValidated" not in rules
    assert "gain is not counted" in kit.omitted["K3PrefixHitRateFarBelowValidated"]


@pytest.mark.parametrize("version, observed, expected", [
    pytest.param("0.27.1", None, {"kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
                                  "prefix_cache_hits_total": "vllm:prefix_cache_hits_total"}, id="new"),
    pytest.param("0.11.0", frozenset({"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total"}),
                 {"kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
                  "prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total"}, id="0.11-old-names-observed"),
    pytest.param("0.10.1", frozenset({"vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"}),
                 {"kv_cache_usage_perc": "vllm:kv_cache_usage_perc"}, id="0.10-both-new-preferred"),
    pytest.param("0.9.2", None, {"kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
                                 "prefix_cache_hits_total": None}, id="pre-0.10"),
    pytest.param("0.27.1", frozenset({"vllm:request_queue_time_seconds_bucket"}),
                 {"request_queue_time_seconds": "vllm:request_queue_time_seconds"}, id="histogram-by-bucket"),
])
def test_metric_names_follow_the_observed_version(version, observed, expected):
    names = metric_names(version, observed)
    for canonical, name in expected.items():
        assert names.get(canonical) == name


@pytest.mark.parametrize("version, reasons", [
    pytest.param("0.11.2", None, id="0.11-no-error-reason"),
    pytest.param("0.13.0", "error", id="0.13-error-reason"),
    pytest.param(None, "error", id="unknown"),
])
def test_error_reasons_by_version(version, reasons):
    assert error_reasons(version) == reasons


def test_old_version_run_uses_old_names_in_the_kit(tmp_path):
    spec = changed(probe__vllm_version="0.11.0")
    store = write_run(tmp_path, "run", spec)
    store.write_text("evidence/probe/metrics.txt",
                     'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
                     'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 5\n'
                     'vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 9\n')
    write_golive_kit(store.root, tmp_path / "kit", options=GoliveOptions(traffic_hit_rate=0.6))
    alerts = (tmp_path / "kit" / ALERTS_FILE).read_text()
    assert "vllm:gpu_cache_usage_perc" in alerts and "vllm:gpu_prefix_cache_hits_total" in alerts
    assert "K3ErrorRatioAboveAccepted" not in alerts  # 0.11 has only abort: client disconnects counted too


@pytest.mark.parametrize("decision", ["environment-rebuild", "capacity-extension"])
def test_only_an_accepted_run_gets_a_kit(tmp_path, decision):
    store = write_run(tmp_path, "run", changed(decision=decision))
    with pytest.raises(BadInputError, match="accepted run"):
        write_golive_kit(store.root, tmp_path / "kit")
    assert not (tmp_path / "kit").exists()


def test_a_tampered_run_gives_no_thresholds(tmp_path):
    store = write_run(tmp_path, "run", BASE)
    path = store.path("evidence/capacity.json")
    path.write_text(path.read_text().replace("400.0", "4000.0"))
    with pytest.raises(EvidenceError, match="evidence/capacity.json"):
        write_golive_kit(store.root, tmp_path / "kit")


def test_bad_options_are_bad_input():
    with pytest.raises(BadInputError, match="duration"):
        GoliveOptions(sustained_for="10 minutes")
    with pytest.raises(BadInputError, match="without braces"):
        GoliveOptions(matchers='{model_name="x"}')


REQUIRED_PANELS = {"Errors", "Successes", "End-to-end latency", "Time to first token", "Queue: waiting requests",
                   "Queue time", "Running requests", "KV-cache usage", "Preemptions", "Prefix-cache counters",
                   "GPU memory used"}


def test_dashboard_has_the_required_panels(tmp_path):
    _, _, out = kit_for(tmp_path)
    dash = json.loads((out / DASHBOARD_FILE).read_text())
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36 and dash["uid"]
    panels = {p["title"]: p for p in dash["panels"]}
    assert REQUIRED_PANELS <= set(panels)
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    for p in dash["panels"]:
        assert p["type"] == "timeseries" and p["targets"] and {"h", "w", "x", "y"} <= set(p["gridPos"])
        assert all(t["expr"] and t["refId"] for t in p["targets"])
    assert panels["GPU memory used"]["targets"][0]["expr"].startswith("DCGM_FI_DEV_FB_USED")
    queue = panels["Queue time"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert queue[-1]["value"] == pytest.approx(0.4)  # the accepted line
    exprs = " ".join(t["expr"] for t in panels["Prefix-cache counters"]["targets"])
    assert "vllm:prefix_cache_queries_total" in exprs and "vllm:prefix_cache_hits_total" in exprs
    assert "histogram_quantile(0.95" in panels["Time to first token"]["targets"][1]["expr"]


def test_rollback_md_lists_triggers_and_what_reopens(tmp_path):
    _, _, out = kit_for(tmp_path, traffic_hit_rate=0.6)
    text = (out / ROLLBACK_FILE).read_text()
    # the digest the environment axis inspected for the emulated image (k3lib.axes.environment over its inspect JSON)
    digest = json.loads((tmp_path / "run" / "evidence" / "environment.json").read_text())["data"]["observed"][
        "image_digest"]
    assert digest and digest.startswith("sha256:")
    for phrase in ("OOM under contract load", "Queue time above the accepted level", "invalid JSON",
                   "Cache counters far from the validated behaviour", "What reopens the acceptance sheet",
                   digest, "580.65.06", "0.27.1", "tensor_parallel_size=8", "65536"):
        assert phrase in text, phrase
    assert "NOT ARMED" not in text


def test_limited_observation_kit_states_cap_and_date(tmp_path):
    spec = changed(decision="limited-observation")
    store = write_run(tmp_path, "run", spec)
    store.write_json("decision.json", {"decision": "limited-observation", "reasons": ["agent: unstable tool calls"],
                                       "traffic_cap": {"max_concurrency": 4}, "reexamine_on": "2026-12-15"})
    write_golive_kit(store.root, tmp_path / "kit")
    text = (tmp_path / "kit" / ROLLBACK_FILE).read_text()
    assert '"max_concurrency": 4' in text and "2026-12-15" in text and "unstable tool calls" in text


@needs_promtool
def test_promtool_check_rules_passes(tmp_path):
    _, _, out = kit_for(tmp_path, traffic_hit_rate=0.6)
    proc = promtool("check", "rules", ALERTS_FILE, cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALL_ALERTS)} rules found" in proc.stdout
    # a kit with omitted rules is still a valid file
    _, _, out2 = kit_for(tmp_path / "second", changed(capacity=None))
    assert promtool("check", "rules", ALERTS_FILE, cwd=out2).returncode == 0


def _bucket_series(le_counts: dict[str, int], steps: int) -> list[dict[str, str]]:
    """Cumulative histogram buckets growing by `per-minute count` each minute."""
    return [{"series": f'vllm:request_queue_time_seconds_bucket{{job="vllm",le="{le}"}}',
             "values": f"0+{n}x{steps}"} for le, n in le_counts.items()]


@needs_promtool
def test_promtool_unit_test_queue_alert_fires_and_kv_alert_does_not(tmp_path):
    _, rules, out = kit_for(tmp_path)
    queue = rules["K3QueueTimeAboveAccepted"]
    # Every request waits between 1 and 2.5 s: p95 ≈ 2.4 s, far above the accepted 0.4 s.
    slow = _bucket_series({"0.1": 0, "0.5": 0, "1": 0, "2.5": 10, "+Inf": 10}, 40)
    series = slow + [{"series": 'vllm:kv_cache_usage_perc{job="vllm",engine="0"}', "values": "0.3x40"},
                     {"series": 'vllm:num_requests_running{job="vllm"}', "values": "4x40"},
                     {"series": 'up{job="vllm",instance="a"}', "values": "1x40"}]
    fired = {"exp_labels": dict(queue["labels"]), "exp_annotations": dict(queue["annotations"])}
    test = {
        "rule_files": [ALERTS_FILE],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                # pending, not firing: the continuous period (for: 10m) has not elapsed yet
                {"eval_time": "8m", "alertname": "K3QueueTimeAboveAccepted", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "K3QueueTimeAboveAccepted", "exp_alerts": [fired]},
                {"eval_time": "20m", "alertname": "K3KvCacheUsageAboveAccepted", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "K3EngineDown", "exp_alerts": []},
            ],
        }],
    }
    (out / "alerts_test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = promtool("test", "rules", "alerts_test.yml", cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


@needs_promtool
def test_promtool_unit_test_fast_queue_does_not_fire(tmp_path):
    """The same alert stays silent when requests wait under the accepted level: the test can fail either way."""
    _, rules, out = kit_for(tmp_path)
    fast = _bucket_series({"0.1": 10, "0.5": 10, "1": 10, "2.5": 10, "+Inf": 10}, 40)
    test = {"rule_files": [ALERTS_FILE], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": fast,
                       "alert_rule_test": [{"eval_time": "30m", "alertname": "K3QueueTimeAboveAccepted",
                                            "exp_alerts": []}]}]}
    (out / "t.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = promtool("test", "rules", "t.yml", cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = copy.deepcopy(test)
    labels = dict(rules["K3QueueTimeAboveAccepted"]["labels"])
    broken["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": labels}]
    (out / "t2.yml").write_text(yaml.safe_dump(broken, sort_keys=False))
    assert promtool("test", "rules", "t2.yml", cwd=out).returncode != 0


# --- one promtool case per alert: the series that fire it, and ordinary series that leave it silent -------------

UP = [{"series": 'up{job="vllm",instance="a"}', "values": "1x40"},
      {"series": 'vllm:num_requests_running{job="vllm"}', "values": "4x40"}]


def _served(ok_per_min: int, errors_per_min: int, aborts_per_min: int) -> list[dict[str, str]]:
    return [{"series": f'vllm:request_success_total{{job="vllm",finished_reason="{reason}"}}', "values": f"0+{n}x40"}
            for reason, n in (("stop", ok_per_min), ("error", errors_per_min), ("abort", aborts_per_min))]


def _prefix(queries_per_min: int, hits_per_min: int) -> list[dict[str, str]]:
    return [{"series": 'vllm:prefix_cache_queries_total{job="vllm"}', "values": f"0+{queries_per_min}x40"},
            {"series": 'vllm:prefix_cache_hits_total{job="vllm"}', "values": f"0+{hits_per_min}x40"}]


# alert → (series that fire it, series of an ordinary day that must not)
CASES = {
    "K3EngineDown": ([{"series": 'up{job="vllm",instance="a"}', "values": "0x40"}, UP[1]], UP),
    "K3KvCacheUsageAboveAccepted": (UP + [{"series": 'vllm:kv_cache_usage_perc{job="vllm"}', "values": "0.9x40"}],
                                    UP + [{"series": 'vllm:kv_cache_usage_perc{job="vllm"}', "values": "0.5x40"}]),
    "K3PreemptionsAboveAccepted": (UP + [{"series": 'vllm:num_preemptions_total{job="vllm"}', "values": "0+30x40"}],
                                   UP + [{"series": 'vllm:num_preemptions_total{job="vllm"}', "values": "0x40"}]),
    # the accepted error ratio is 0: server errors fire it; client aborts alone (disconnects) do not
    "K3ErrorRatioAboveAccepted": (UP + _served(100, 5, 0), UP + _served(100, 0, 20)),
    # ordinary traffic reaches 0.6 (operator's figure): 0.1 is far below; 0.55 is a normal day, not a rollback
    "K3PrefixHitRateFarBelowValidated": (UP + _prefix(1000, 100), UP + _prefix(1000, 550)),
}


@needs_promtool
@pytest.mark.parametrize("alert", list(CASES))
def test_promtool_each_alert_fires_on_its_case_and_stays_silent_on_an_ordinary_day(tmp_path, alert):
    _, rules, out = kit_for(tmp_path, traffic_hit_rate=0.6)
    firing, ordinary = CASES[alert]
    fired = {"exp_labels": dict(rules[alert]["labels"]), "exp_annotations": dict(rules[alert]["annotations"])}
    if alert == "K3EngineDown":
        fired["exp_labels"].update(job="vllm", instance="a")
    test = {"rule_files": [ALERTS_FILE], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": firing,
         "alert_rule_test": [{"eval_time": "35m", "alertname": alert, "exp_alerts": [fired]}]},
        {"interval": "1m", "input_series": ordinary,
         "alert_rule_test": [{"eval_time": "35m", "alertname": alert, "exp_alerts": []}]}]}
    (out / "case.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = promtool("test", "rules", "case.yml", cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_kit_from_a_shortened_limited_observation_run_says_so_before_arming():
    """`k3 golive` on a limited-observation run: its alerts hold under the traffic cap only; on a run shortened by
    loosened settings (20 s steps), its levels came from less load than the recipe's: both said, in words."""
    from k3lib.core.thresholds import Loosened
    from k3lib.golive import golive_warnings

    step = Loosened("axes.capacity.step_duration_s", 20.0, 120.0, "> 0", "kit default").model_dump(mode="json")
    said = golive_warnings({"decision": "limited-observation", "traffic_cap": {"max_concurrency": 2},
                            "reexamine_on": "2027-01-04", "loosened_thresholds": [step]})
    assert len(said) == 2 and "traffic cap" in said[0] and "2027-01-04" in said[0]
    assert "axes.capacity.step_duration_s = 20 (default 120)" in said[1]
    assert golive_warnings({"decision": "production", "loosened_thresholds": []}) == ()
