"""Every source tied to the target, and two measurements of one quantity that disagree block (issue 34): each attack
below points a source at another server, or shows a /metrics that does not describe the load the kit sent, and must
end in a decision other than `production` with a reason that names the mismatch. Small: the healthy run's records
with one source's claims changed, the pure agreement of one load window, one axis against a faulted emulator."""

from __future__ import annotations

import datetime as dt
import types

import httpx
import pytest

from k3lib.axes.capacity.agreement import settle_held, window_agreement
from k3lib.axes.capacity.judge import traffic_cap
from k3lib.axes.capacity.result import CapacityResult
from k3lib.axes.capacity.saturation import saturation_findings
from k3lib.core.evidence import read_records
from k3lib.core.params import load_params_json
from k3lib.verdict.assemble import compute_decision
from k3lib.verdict.identity import identify, tie_sources

GPU_OTHER_NODE = {"hosts": ["gpu-node-7"], "host_gpu_count": 8, "gpu_names": ["NVIDIA H100 80GB HBM3"],
                  "gpu_uuids": [f"GPU-0000000{i}-aaaa-bbbb-cccc-ddddeeeeffff" for i in range(8)],
                  "driver": "580.95.05", "busy_under_load": False, "via": "dcgm"}


def _run(healthy_run):
    code, store = healthy_run
    assert code == 0, "the healthy emulator run is production: the attacks below start from it"
    return load_params_json(store.path("params.json")), read_records(store)


def _claims(records, axis, source, fields=None, **update):
    """The records with one source's claims replaced (`fields`), changed (`update`) or removed (None, no update)."""
    rec = records[axis]
    claims = {k: dict(v) for k, v in rec.data["claims"].items()}
    if fields is None and not update:
        claims.pop(source, None)
    else:
        claims[source] = {**(fields if fields is not None else claims.get(source, {})), **update}
    return {**records, axis: rec.model_copy(update={"data": {**rec.data, "claims": claims}})}


def _reason(decision, *needles):
    found = [r for r in decision.reasons if all(n in r for n in needles)]
    assert found, (needles, decision.reasons)
    return found[0]


def test_the_healthy_emulators_sources_all_tie_to_it(healthy_run):
    params, records = _run(healthy_run)
    report = identify(records)
    assert report.target["models"] and report.target["vllm_version"] and report.target.get("start_time")
    assert {s: t.status for s, t in report.sources.items() if not t.trusted} == {}
    for source in ("collect_env", "nvidia_smi", "server_log", "image_inspect", "gpu_metrics"):
        assert report.sources[source].status == "tied" and report.sources[source].via, source
    assert any(s.startswith("metrics ") and t.status == "tied" for s, t in report.sources.items())
    assert compute_decision(params, records).decision == "production"


def test_attack_gpu_metrics_of_another_node_hide_a_memory_leak(healthy_run):
    """dcgm-exporter of another node (8 H100, idle) while the host shows one H200: the memory curves prove nothing."""
    params, records = _run(healthy_run)
    d = compute_decision(params, _claims(records, "capacity", "gpu_metrics", GPU_OTHER_NODE))
    assert d.decision == "limited-observation"
    said = _reason(d, "capacity.memory_growth", "open: gpu_metrics disagrees")
    assert "GPUs on the host 8 vs 1" in said or "GPU names" in said
    _reason(d, "capacity.gpu_memory", "gpu_metrics")
    assert d.identity["sources"]["gpu_metrics"]["status"] == "disputed"


def test_attack_host_artifacts_of_another_server_hide_the_targets_r570_driver(healthy_run):
    """collect_env and nvidia-smi say R580; the target's own GPU metrics, which moved with the kit's load, say R570."""
    params, records = _run(healthy_run)
    d = compute_decision(params, _claims(records, "capacity", "gpu_metrics", driver="570.86.10"))
    assert d.decision == "limited-observation"
    said = _reason(d, "environment.driver_branch", "open:")
    assert "driver 580.95.05 vs 570.86.10" in said
    assert next(r for r in d.checklist if r["id"] == "C03")["status"] == "open"


def test_attack_a_metrics_endpoint_of_an_idle_server(healthy_run):
    """target.metrics_urls at another, idle server: its counters never counted the kit's requests."""
    params, records = _run(healthy_run)
    url = next(s for s in records["capacity"].data["claims"] if s.startswith("metrics "))
    d = compute_decision(params, _claims(records, "capacity", url, {"kit_requests_counted": False,
                                                                     "requests_counted": 0.0,
                                                                     "kit_requests_completed": 132}))
    assert d.decision == "limited-observation"
    _reason(d, "capacity.saturation", "not: the counters counted the kit's own requests")
    _reason(d, "prefix_cache.", url.removeprefix("metrics "))


def test_attack_a_host_source_that_shares_nothing_with_the_target(healthy_run):
    """Only nvidia-smi of some host: no version, no model, no GPU metrics to tie it — its items stay open."""
    params, records = _run(healthy_run)
    cut = _claims(_claims(records, "environment", "collect_env"), "capacity", "gpu_metrics")
    d = compute_decision(params, cut)
    assert d.decision == "limited-observation"
    _reason(d, "environment.driver_branch", "nvidia_smi shares nothing the kit can check with the target")


def test_attack_the_server_log_of_another_deployment(healthy_run):
    params, records = _run(healthy_run)
    d = compute_decision(params, _claims(records, "environment", "server_log", max_model_len=32768,
                                         models=["acme/Other-70B"], kv_cache_tokens=900000))
    assert d.decision == "limited-observation"
    said = _reason(d, "environment.startup", "server_log disagrees")
    assert "max_model_len 32768 vs 4096" in said


def test_attack_an_image_inspect_of_a_container_started_the_day_before(healthy_run):
    params, records = _run(healthy_run)
    start = records["probe"].data["claims"]["target"]["start_time"]
    old = (dt.datetime.fromtimestamp(start, dt.timezone.utc) - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    d = compute_decision(params, _claims(records, "environment", "image_inspect", started=old))
    assert d.decision == "limited-observation"
    _reason(d, "environment.image", "image_inspect disagrees", "container started")


def test_attack_the_target_changed_between_the_probe_and_the_environment_axis(healthy_run):
    params, records = _run(healthy_run)
    d = compute_decision(params, _claims(records, "environment", "target (environment)", vllm_version="0.32.1"))
    assert d.decision == "limited-observation"
    _reason(d, "environment.vllm_version", "the target changed between the probe and this axis",
            "vLLM 0.33.0 vs 0.32.1")


def test_ties_chain_through_tied_sources_and_disputes_both_sides_of_a_mismatch():
    claims = {"target": {"vllm_version": "0.33.0", "models": ["moonshotai/Kimi-K3"]},
              "collect_env": {"vllm_version": "0.33.0+cu130", "driver": "580.95.05"},
              "nvidia_smi": {"driver": "580.95.05", "host_gpu_count": 8},
              "gpu_metrics": {"driver": "570.86.10", "host_gpu_count": 8, "busy_under_load": True},
              "nvml": {"hosts": ["kit-host"]}}
    ties = tie_sources(claims)
    assert ties["collect_env"].status == "disputed"  # the same driver as nvidia-smi, not as the GPU metrics
    assert ties["gpu_metrics"].status == "disputed" and ties["nvidia_smi"].status == "disputed"
    assert ties["nvml"].status == "untied" and "shares nothing" in ties["nvml"].why()
    del claims["gpu_metrics"]
    ties = tie_sources(claims)
    assert ties["collect_env"].status == "tied" and ties["nvidia_smi"].status == "tied"  # version, then driver
    assert any("(collect_env)" in v for v in ties["nvidia_smi"].via)


# -- two measurements of one quantity ------------------------------------------------------------------------------


def _rows(t0: float, n: int, **gauges: float) -> list[dict[str, float]]:
    return [{"t_wall": t0 + 0.5 + i, "num_requests_running": gauges.get("running", 4.0),
             "num_requests_waiting": gauges.get("waiting", 0.0), "kv_cache_usage_perc": 0.5} for i in range(n)]


def _requests(t0: float, t1: float, in_flight: int) -> list[dict[str, float]]:
    return [{"sent_wall_ns": t0 * 1e9, "done_wall_ns": t1 * 1e9, "ok": True} for _ in range(in_flight)]


STEP = {"concurrency": 4, "start_wall": 1000.0, "end_wall": 1010.0, "preemptions": 0.0, "preemptions_sampled": 0.0,
        "queue_mean_ms": 5.0, "queue_count": 40.0,
        "cross_check": {"counts_agree": True, "items": [{"quantity": "requests sent", "client": 40, "server": 40}]}}


def test_attack_a_waiting_gauge_stuck_at_zero_while_the_histogram_queues():
    """/metrics says nothing waits; the same scrape's queue-time histogram says 40 requests waited 2 s each."""
    step = {**STEP, "queue_mean_ms": 2000.0}
    agreement = window_agreement(step, _requests(1000, 1010, 4), _rows(1000, 9, running=2, waiting=0),
                                 settle_fraction=0.3)
    assert agreement["agrees"] is False and "queue" in agreement["disagreements"]
    held, why = settle_held(True, [], agreement)
    assert held is None and why[-1].startswith("inconclusive: ") and "queue: server 0.0, client 8.0" in why[-1]


def test_attack_a_running_gauge_above_what_the_kit_has_in_flight():
    """Another client loads the target (or the gauges are a busier deployment's): 9 in the engine, 4 sent."""
    agreement = window_agreement(STEP, _requests(1000, 1010, 4), _rows(1000, 9, running=8, waiting=1),
                                 settle_fraction=0.3)
    assert "in flight" in agreement["disagreements"]
    assert settle_held(True, [], agreement)[0] is None


def test_attack_counters_of_an_idle_server_under_the_kits_load():
    """An idle server's /metrics: its gauges show nothing (the front end could explain that) but its counters never
    counted the kit's 40 requests."""
    step = {**STEP, "cross_check": {"counts_agree": False, "disagreements": ["requests sent"],
                                    "items": [{"quantity": "requests sent", "client": 40, "server": 0,
                                               "unit": "requests"}]}}
    agreement = window_agreement(step, _requests(1000, 1010, 4), _rows(1000, 9, running=0), settle_fraction=0.3)
    assert agreement["disagreements"] == ["counts"] and "requests sent: client 40, server 0" in agreement["items"][0]["note"]
    assert settle_held(True, [], agreement)[0] is None


def test_a_gauge_figure_from_fewer_than_three_samples_is_not_observable():
    agreement = window_agreement(STEP, _requests(1000, 1010, 4), _rows(1000, 2), settle_fraction=0.3)
    assert agreement["agrees"] is None and "fewer than 3" in agreement["text"]
    held, why = settle_held(True, [], agreement)
    assert held is None and "not observable" in why[-1]


def test_attack_preemptions_sampled_that_the_boundary_scrapes_do_not_show():
    step = {**STEP, "preemptions": 0.0, "preemptions_sampled": 5.0}
    agreement = window_agreement(step, _requests(1000, 1010, 4), _rows(1000, 9), settle_fraction=0.3)
    assert agreement["disagreements"] == ["preemptions"]


def test_a_preempted_request_waits_again_unseen_by_the_histogram():
    """A real kv-starved run: the gauge waits above the histogram (re-queued after preemption): it agrees."""
    step = {**STEP, "preemptions": 14.0, "preemptions_sampled": 12.0}
    agreement = window_agreement(step, _requests(1000, 1010, 4), _rows(1000, 9, running=2, waiting=2),
                                 settle_fraction=0.3)
    assert "queue" not in agreement["disagreements"] and agreement["agrees"] is True


def test_a_failure_the_client_saw_stands_whatever_the_server_says():
    agreement = window_agreement(STEP, _requests(1000, 1010, 4), _rows(1000, 9, running=0), settle_fraction=0.3)
    held, why = settle_held(False, ["396 of 400 request(s) did not complete: 396 refused"], agreement)
    assert held is False


def test_an_undecided_step_is_never_a_pass_nor_a_cap(healthy_run):
    params, records = _run(healthy_run)
    steps = [{"concurrency": 1, "status": "done", "held": None, "out_of_contract": False,
              "why": ["inconclusive: in flight: server 0.0, client 1.0 (tolerance 1.0)"]},
             {"concurrency": 4, "status": "done", "held": True, "out_of_contract": False, "why": []}]
    result = CapacityResult({"plan": {}, "steps": steps, "phases": []}, [], [], [], None, None)
    (sat, *_) = saturation_findings(result, params)
    assert sat.status == "warn" and sat.message.startswith("inconclusive at concurrency 1") and "in flight" in sat.message
    cap = traffic_cap(result, params)
    assert cap["max_concurrency"] is None and "inconclusive" in cap["basis"]


@pytest.mark.slow
def test_attack_metrics_urls_at_an_idle_server_under_a_kv_starved_target(tmp_path, emulator):
    """One axis against a faulted emulator, its /metrics read from the shared idle emulator instead: no step may
    hold on another server's numbers, and the endpoint is not tied to the target."""
    import k3lib
    import k3lib.axes.capacity as capacity
    from k3lib.emulator import EmulatorConfig, start_emulator
    from k3lib.verdict.identity import tie_sources as ties

    fast = ["axes.capacity.step_duration_s=1.0", "axes.capacity.soak_duration_s=1.5",
            "axes.capacity.context_lengths_tokens=[1000,3968]", "axes.capacity.concurrency_steps=[4]"]
    with start_emulator(EmulatorConfig.from_profile("demo", faults=("kv-starved",), time_scale=0.02),
                        host="127.0.0.1", port=0) as target:
        ctx = k3lib.open_axis("capacity", "parameters/emulator.yaml",
                              [f"target.base_url={target.url}", f"target.metrics_urls=[{emulator.url}/metrics]", *fast],
                              str(tmp_path / "run"))
        record = capacity.capacity_record(capacity.run_capacity(ctx), ctx)
    assert all(s.get("held") is not True for s in record.data["steps"] if not s.get("out_of_contract"))
    assert record.by_rule("capacity.saturation").status != "pass"
    claims = record.data["claims"]
    (url,) = [s for s in claims if s.startswith("metrics ")]
    assert claims[url]["kit_requests_counted"] is False
    assert ties({"target": {}, url: claims[url]})[url].status == "disputed"


def _serve_text(text: str):
    """A server the kit did not start, answering `text` on any path (a proxy or a real deployment's sidecar)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            body = text.encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _operations_against(url: str, tmp_path, **request):
    from k3lib.axes.operations import run_operations
    from k3lib.core.params import load_params
    from k3lib.core.store import RunStore
    from k3lib.io.target import resolve_target

    from conftest import ROOT

    params = load_params([ROOT / "parameters" / "emulator.yaml"], [f"target.base_url={url}",
                                                                    "axes.operations.rollback_drill=null"])
    store = RunStore.create_at(tmp_path / f"run-{len(list(tmp_path.iterdir()))}")
    if request:
        store.write_json("request.json", request)
    result = run_operations(types.SimpleNamespace(params=params, store=store, target=resolve_target(params)))
    (limits,) = [f for f in result.findings if f.rule == "attestation.operator_knows_limits"]
    return limits


def test_attack_an_attestation_served_by_the_target_under_test(emulator, tmp_path):
    """A target the kit did not start serves, at its own address, an attestation of itself: not evidence — its items
    stay open; the same attestation from the kit's own emulator is the demo's stand-in, named as such."""
    import json as _json

    from k3lib.emulator.envreport import operator_attestation

    text = _json.dumps(operator_attestation(emulator.config, dt.date.today().isoformat() + "T00:00:00Z", 4))
    other = _serve_text(text)
    try:
        url = f"http://127.0.0.1:{other.server_address[1]}"
        limits = _operations_against(url, tmp_path)
        assert limits.status == "not-observable" and "served by the target under test" in limits.message
        # a request.json naming a URL is no proof the kit started the target either
        limits = _operations_against(url, tmp_path, target={"base_url": url})
        assert limits.status == "not-observable"
    finally:
        other.shutdown()
    limits = _operations_against(emulator.url, tmp_path)  # the emulator this process started
    assert limits.status == "pass" and "k3kit demo operator" in limits.message


def test_attack_a_drill_image_inspect_served_by_the_target(emulator):
    from k3lib.axes.attestation import served_release

    with httpx.Client(base_url=emulator.url, timeout=5) as http:
        own = served_release(http, "{base_url}/_emulator/inspect", emulator.url, trust_target=False)
        stand_in = served_release(http, "{base_url}/_emulator/inspect", emulator.url)
    assert own.image is None and own.digest is None and "served by the target under test" in own.error
    assert stand_in.image and stand_in.digest


def test_attack_gpus_required_set_below_what_the_servers_own_arguments_need(real_world):
    """The log says TP 8; the container sees 4 GPUs; `gpus_required: 1` may not lower what the server needs."""
    from k3lib.axes.environment.host import check_gpus
    from k3lib.axes.environment.sources import sources_from_texts
    from k3lib.core.params import EnvironmentParams

    s = sources_from_texts(server_log=(real_world / "logs/12.txt").read_text(),
                           collect_env=(real_world / "collect_env/04.txt").read_text())
    for env in (EnvironmentParams(), EnvironmentParams(gpus_required=1)):
        f = check_gpus(s, env)
        assert f.status == "fail" and "needs 8 (TP 8" in f.message, f.message
    assert "needs 16" in check_gpus(s, EnvironmentParams(gpus_required=16)).message  # raising it is allowed


def test_a_short_window_counts_the_queueing_its_histogram_has_not_seen_yet():
    """Measured on the healthy emulator at concurrency 5 over 4 slots: one request always waits (gauge 1), but a 1 s
    window's histogram holds only the waits of the requests that finished in it (vLLM observes at finish): the
    requests still in flight at its end may have waited unseen. Their time in the window widens the tolerance."""
    step = {**STEP, "start_wall": 1000.0, "end_wall": 1001.0, "queue_mean_ms": 40.0, "queue_count": 5.0}
    rows = [{"t_wall": 1000.1 + 0.2 * i, "num_requests_running": 4.0, "num_requests_waiting": 1.0,
             "kv_cache_usage_perc": 0.5} for i in range(5)]
    finished = [{"sent_wall_ns": 1000.0e9 + i * 1e8, "done_wall_ns": 1000.5e9 + i * 1e8, "ok": True}
                for i in range(5)]
    straddling = [{"sent_wall_ns": 1000.6e9, "done_wall_ns": 1001.6e9, "ok": True} for _ in range(5)]
    alone = window_agreement(step, finished, rows, settle_fraction=0.3)
    assert "queue" in alone["disagreements"]  # without the edge: gauge 1.0 against 0.2
    agreement = window_agreement(step, finished + straddling, rows, settle_fraction=0.3)
    assert "queue" not in agreement["disagreements"], agreement["text"]
    queue = next(i for i in agreement["items"] if i["quantity"] == "queue")
    assert queue["agrees"] is True and "unseen" in queue["note"]
