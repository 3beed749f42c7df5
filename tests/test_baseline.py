"""Re-validation against a baseline run: identity changes reopen the sheet, metrics outside the band are drift.

The synthetic runs below are written by each axis' own record builder from what that axis observes, never as
hand-made `data`: capacity (k3lib.axes.capacity.capacity_record) from its load steps, environment
(k3lib.axes.environment.environment_record) from the emulator's collect_env / nvidia-smi / inspect / log texts,
prefix_cache (k3lib.axes.prefix_cache.prefix_cache_record) from a measured cold/warm pair, agent
(k3lib.axes.agent.judge.agent_record) from its replies' check outcomes, probe (k3lib.axes.probe.probe_record)
from the endpoints' answers. A field an axis renames breaks these tests.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from k3lib.verdict import accepted as acc
from k3lib.verdict.baseline import Band, compare_with_baseline
from k3lib.core.store import RunStore

IMAGE_A = "vllm/vllm-openai:v0.27.1"
IMAGE_B = "vllm/vllm-openai:v0.27.1-rebuilt"

STEP: dict[str, Any] = {"status": "done", "held": True, "why": []}
BASE: dict[str, Any] = {
    "params": {"recipe": {"build": "official"}, "contract": {"max_context_tokens": 32768, "planned_concurrency": 8}},
    "probe": {"vllm_version": "0.27.1", "served_models": [{"id": "kimi-k3", "max_model_len": 65536}]},
    # the emulated host and image the environment axis reads (k3lib.emulator.config.EmulatorConfig fields)
    "environment": {"build": "official", "vllm_version": "0.27.1", "driver_version": "580.65.06", "image": IMAGE_A,
                    "gpu_count": 8, "gpus_per_node": 8, "tensor_parallel_size": 8, "data_parallel_size": 1},
    "capacity": {"planned_concurrency": 8,
                 "steps": [{"concurrency": 8, "queue_p95_ms": 400.0, "kv_usage_max": 0.62, "preemptions": 0,
                            "start_wall": 0.0, "end_wall": 60.0, "sent": 100, "server_errors": 0}]},
    "prefix_cache": {"observed_hit_tokens": 900, "warm_prompt_tokens": 1000},  # what the warm request saw
    "agent": {"level": 8, "replies": 100, "valid": 100},  # tool-call replies at concurrency 8, arguments valid
    "decision": "production",
}


def capacity_by_the_axis(steps: list[dict[str, Any]], planned: int) -> dict[str, Any]:
    """The capacity record as k3lib.axes.capacity writes it, from load steps (the step fields k3lib.axes.capacity.run sets)."""
    import types
    from pathlib import Path

    from k3lib.axes.capacity import capacity_record
    from k3lib.axes.capacity.result import CapacityResult
    from k3lib.core.params import load_params

    params = load_params([Path(__file__).resolve().parents[1] / "parameters" / "emulator.yaml"],
                         [f"contract.planned_concurrency={planned}"])
    phases = [{"phase": "concurrency", "status": "done", "start_wall": 0.0, "end_wall": 1.0, "note": ""}]
    run = {"plan": {}, "phases": phases, "steps": [{**STEP, **s} for s in steps]}
    record = capacity_record(CapacityResult(run, [], [], [], None, None), types.SimpleNamespace(params=params))
    return record.model_dump(mode="json")


def environment_by_the_axis(spec: dict[str, Any], planned: int) -> dict[str, Any]:
    """The environment record as k3lib.axes.environment writes it, from the texts the emulator serves for that host and
    image (`collect_env`, host `nvidia-smi`, `docker inspect`, the server log's non-default args)."""
    import json as _json
    from pathlib import Path

    from k3lib.axes.environment import environment_record, evaluate, sources_from_texts
    from k3lib.emulator.config import EmulatorConfig
    from k3lib.emulator.envreport import collect_env_report, image_inspect, nvidia_smi_report
    from k3lib.emulator.logs import LogBook, non_default_args
    from k3lib.core.params import load_params

    build, host_driver, inspected = spec.get("build", "official"), spec.get("host_driver", True), spec.get(
        "inspected", True)
    cfg = EmulatorConfig.from_profile("demo", **{k: v for k, v in spec.items()
                                                 if k not in ("build", "host_driver", "inspected")})
    log = LogBook(cfg)
    log.log(f"vLLM server version {cfg.vllm_version}, serving model {cfg.model}", where="startup.py:38")
    log.log(f"non-default args: {non_default_args(cfg)!r}", where="startup.py:96")
    collect_env = collect_env_report(cfg)
    if not host_driver:  # no host nvidia-smi, and collect_env could not read the driver either
        collect_env = collect_env.replace(f": {cfg.driver_version}", ": Could not collect")
    sources = sources_from_texts(
        build, collect_env=collect_env,
        nvidia_smi=nvidia_smi_report(cfg, 0, "Mon Dec  1 10:00:00 2026") if host_driver else None,
        image_inspect=_json.dumps(image_inspect(cfg, "2026-12-01T10:00:00Z")) if inspected else None,
        server_log=log.text(), version=cfg.vllm_version)
    params = load_params([Path(__file__).resolve().parents[1] / "parameters" / "emulator.yaml"],
                         [f"contract.planned_concurrency={planned}", f"recipe.build={build}"])
    result = evaluate(sources, params.recipe, params.axes.environment)
    return environment_record(result, None).model_dump(mode="json")  # type: ignore[arg-type]  # ctx unused


def prefix_cache_by_the_axis(spec: dict[str, Any]) -> dict[str, Any]:
    """The prefix_cache record as k3lib.axes.prefix_cache writes it, from one cold/warm pair of measured requests whose warm
    request's counters moved by `observed_hit_tokens` on a prompt of `warm_prompt_tokens`."""
    from k3lib.axes.prefix_cache import prefix_cache_record
    from test_prefix_cache_verdict import A0, result, sample

    hits, prompt = spec["observed_hit_tokens"], spec["warm_prompt_tokens"]
    size = dict(prompt_tokens=prompt, tokenized_tokens=prompt, queries_delta=float(prompt), replica_queries={A0: prompt})
    warm = sample("warm", **size, cached_tokens=hits, hits_delta=float(hits), cached_counter_delta=float(hits),
                  replica_hits={A0: float(hits)}, designed_hits=hits, intended_hits=hits)
    return prefix_cache_record(result([(sample("cold", **size), warm)])).model_dump(mode="json")


def agent_reply(level: int, i: int, valid: bool, *, other_check: bool | None = None) -> dict[str, Any]:
    """One tool-call reply as the agent axis logs it: the case, its turn, and each check's outcome."""
    checks = [{"check": "arguments_valid", "passed": valid, "detail": "" if valid else "not JSON"}]
    if other_check is not None:
        checks.append({"check": "function_name", "passed": other_check, "detail": "" if other_check else "unknown"})
    return {"level": level, "case": "weather", "turn": 1, "round": 1, "repetition": i, "seq": i, "tools": True,
            "reply": {"ok": True}, "parsed": {}, "checks": checks}


def agent_by_the_axis(spec: dict[str, Any], tmp_path: Any) -> dict[str, Any]:
    """The agent record as k3lib.axes.agent writes it, from `replies` tool-call replies at `level`, `valid` of them with
    valid arguments."""
    import types

    from k3lib.axes.agent.judge import agent_record
    from k3lib.axes.agent.result import AgentResult

    replies = [agent_reply(spec["level"], i, i < spec["valid"]) for i in range(spec["replies"])]
    result = AgentResult({"min_pass_rate": 1.0}, {"cases": [{"id": "weather", "title": "weather"}]},
                         [{"level": spec["level"]}], [], replies)
    ctx = types.SimpleNamespace(store=types.SimpleNamespace(path=lambda rel: tmp_path / "absent" / rel))
    return agent_record(result, ctx).model_dump(mode="json")


def probe_by_the_axis(data: dict[str, Any], store: RunStore, max_context: int) -> dict[str, Any]:
    """The probe record as k3lib.axes.probe writes it, from the endpoints' answers (a real /v1/models card carries more
    keys than the record keeps: `object`, `created`, `permission`)."""
    import json as _json
    import types

    from k3lib.axes.probe import EndpointProbe, ProbeResult, probe_record

    cards = [{**c, "object": "model", "created": 0, "permission": []} for c in data["served_models"]]
    bodies = {"health": (200, ""), "version": (200, _json.dumps({"version": data["vllm_version"]})),
              "models": (200, _json.dumps({"object": "list", "data": cards})),
              "metrics[0]": (200, "vllm:num_requests_running 0\n")}
    endpoints = {k: EndpointProbe(k, f"http://127.0.0.1:1/{k}", code, 1.0, body, "application/json", None, "t")
                 for k, (code, body) in bodies.items()}
    params = types.SimpleNamespace(target=types.SimpleNamespace(model=cards[0]["id"]),
                                   contract=types.SimpleNamespace(max_context_tokens=max_context))
    result = ProbeResult(endpoints, cards, cards[0]["id"], data["vllm_version"])
    return probe_record(result, types.SimpleNamespace(params=params, store=store)).model_dump(mode="json")


def record(axis: str, data: dict[str, Any], status: str = "pass", planned: int = 8, tmp_path: Any = None
           ) -> dict[str, Any]:
    if axis == "capacity":
        return {**capacity_by_the_axis(data["steps"], data.get("planned_concurrency") or planned), "status": status}
    if axis == "environment":
        return {**environment_by_the_axis(data, planned), "status": status}
    if axis == "prefix_cache":
        return {**prefix_cache_by_the_axis(data), "status": status}
    assert axis == "agent", axis
    return {**agent_by_the_axis(data, tmp_path), "status": status}


def write_run(tmp_path, name: str, spec: dict[str, Any], statuses: dict[str, str] | None = None) -> RunStore:
    store = RunStore.create_at(tmp_path / name)
    store.write_json("params.json", spec["params"])
    if spec.get("probe") is not None:
        store.write_json("evidence/probe.json", probe_by_the_axis(spec["probe"], store,
                                                                  spec["params"]["contract"]["max_context_tokens"]))
    for axis in ("environment", "capacity", "prefix_cache", "agent"):
        if spec.get(axis) is not None:
            store.write_json(f"evidence/{axis}.json", record(axis, spec[axis], (statuses or {}).get(axis, "pass"),
                                                             spec["params"]["contract"]["planned_concurrency"],
                                                             tmp_path))
    store.write_json("decision.json", {"decision": spec["decision"], "reasons": [], "build": "official"})
    return store


def changed(**paths: Any) -> dict[str, Any]:
    """BASE with `section__key__sub=value` replaced (None deletes)."""
    spec = copy.deepcopy(BASE)
    for dotted, value in paths.items():
        *parents, last = dotted.split("__")
        node = spec
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return spec


@pytest.fixture()
def baseline(tmp_path):
    return write_run(tmp_path, "baseline", BASE)


def test_same_deployment_same_levels(tmp_path, baseline):
    run = write_run(tmp_path, "run", BASE)
    cmp = compare_with_baseline(run.root, baseline.root)
    assert not cmp.reopens and not cmp.drift and not cmp.unverified and cmp.refused is None
    assert cmp.headline().startswith("same deployment as baseline")
    assert {f.rule for f in cmp.checks} >= {"baseline.identity.image_digest", "baseline.drift.prefix_hit_rate"}


@pytest.mark.parametrize("change, item", [
    pytest.param({"environment__image": IMAGE_B}, "image digest", id="image-digest"),
    pytest.param({"environment__driver_version": "580.82.07"}, "host driver", id="driver"),
    pytest.param({"probe__vllm_version": "0.28.0"}, "vLLM version", id="vllm-version"),
    pytest.param({"environment__gpu_count": 16, "environment__gpus_per_node": 16}, "GPU count", id="gpu-count"),
    pytest.param({"environment__tensor_parallel_size": 4, "environment__data_parallel_size": 2},
                 "parallelism (TP/PP/DP)", id="parallelism"),
    pytest.param({"probe__served_models__0__max_model_len": 131072}, "server context limit (max_model_len)",
                 id="server-context-limit"),
    pytest.param({"params__contract__max_context_tokens": 65536}, "contract context limit", id="contract-context"),
])
def test_an_identity_change_reopens_the_sheet_stated_on_top(tmp_path, baseline, change, item):
    run = write_run(tmp_path, "run", changed(**change))
    cmp = compare_with_baseline(run.root, baseline.root)
    assert cmp.reopens
    assert [f.observed["item"] for f in cmp.reopen] == [item]
    lines = cmp.lines()
    assert lines[0].startswith("THE ACCEPTANCE SHEET REOPENS") and item in lines[0]
    assert lines[1].startswith("REOPEN ") and "reopens" in lines[1]


@pytest.mark.parametrize("change, drifted", [
    pytest.param({"capacity__steps__0__queue_p95_ms": 900.0}, ["queue_time_p95_s"], id="queue-time-up"),
    pytest.param({"capacity__steps__0__queue_p95_ms": 520.0}, [], id="queue-time-inside-band"),
    pytest.param({"capacity__steps__0__queue_p95_ms": 50.0}, [], id="queue-time-better"),
    pytest.param({"capacity__steps__0__kv_usage_max": 0.80}, ["kv_usage_at_planned"], id="kv-usage-up"),
    pytest.param({"capacity__steps__0__kv_usage_max": 80}, ["kv_usage_at_planned"], id="kv-usage-as-percent"),
    pytest.param({"prefix_cache__observed_hit_tokens": 500}, ["prefix_hit_rate"], id="hit-rate-down"),
    pytest.param({"prefix_cache__observed_hit_tokens": 950}, [], id="hit-rate-up"),
    pytest.param({"agent__valid": 97}, ["tool_call_validity"], id="tool-validity-down"),
])
def test_metrics_outside_the_accepted_band_are_drift(tmp_path, baseline, change, drifted):
    run = write_run(tmp_path, "run", changed(**change))
    cmp = compare_with_baseline(run.root, baseline.root)
    assert not cmp.reopens
    assert [f.rule.removeprefix("baseline.drift.") for f in cmp.drift] == drifted
    for f in cmp.drift:
        assert "outside the accepted band" in f.message and f.status == "warn"


@pytest.mark.parametrize("missing, item", [
    pytest.param({"capacity": None}, ["queue time p95", "KV-cache usage at planned load"], id="no-capacity"),
    pytest.param({"prefix_cache": None}, ["prefix-cache hit rate"], id="no-prefix-cache"),
    pytest.param({"agent": None}, ["tool-call validity"], id="no-agent"),
])
def test_a_metric_the_baseline_banded_and_the_run_did_not_measure_is_never_inside_the_band(tmp_path, baseline,
                                                                                           missing, item):
    """A re-validation that measured nothing for a metric (an axis that ran out of time, or did not run) shows no
    drift for it either: the comparison names it, says drift is not ruled out, and neither `k3 compare` nor the
    fleet's judge passes it."""
    import argparse

    from k3lib.batch.fleet import judge
    from k3lib.cli.baseline import cmd_compare

    run = write_run(tmp_path, "run", changed(**missing))
    cmp = compare_with_baseline(run.root, baseline.root)
    assert not cmp.drift and not cmp.reopens
    assert [f.observed["item"] for f in cmp.unmeasured] == item
    assert all(f.status == "not-observable" and "not measured in this run" in f.message for f in cmp.unmeasured)
    assert "DRIFT NOT RULED OUT" in cmp.headline() and "every compared metric" not in cmp.headline()
    assert [line for line in cmp.lines() if line.startswith("UNMEASURED ")] == [
        f"UNMEASURED {f.message}" for f in cmp.unmeasured]
    assert cmd_compare(argparse.Namespace(run=str(run.root), baseline=str(baseline.root))) == 1
    regressions, notes = judge("production", "production", cmp)
    assert regressions and all(r.startswith("drift not ruled out: ") for r in regressions) and not notes
    dumped = cmp.model_dump(mode="json")
    assert [f["rule"] for f in dumped["unmeasured"]] == [f.rule for f in cmp.unmeasured]


def test_official_and_custom_builds_are_never_compared(tmp_path, baseline):
    spec = changed(environment__build="custom", params__recipe__build="custom",
                   environment__driver_version="575.51.03")
    run = write_run(tmp_path, "run", spec)
    cmp = compare_with_baseline(run.root, baseline.root)
    assert cmp.refused is not None and cmp.refused.status == "fail"
    assert "never compared as one" in cmp.refused.message and "custom" in cmp.refused.message
    assert cmp.checks == () and not cmp.reopen and not cmp.drift  # no finding that would pass as a comparison
    assert cmp.headline().startswith("NOT COMPARED")


def test_missing_evidence_is_unverified_never_unchanged(tmp_path, baseline):
    spec = changed(environment__host_driver=False, capacity=None)
    run = write_run(tmp_path, "run", spec)
    cmp = compare_with_baseline(run.root, baseline.root)
    assert not cmp.reopens
    assert [f.observed["item"] for f in cmp.unverified] == ["host driver"]
    assert "cannot confirm it is unchanged" in cmp.unverified[0].message
    assert "evidence/environment.json data.observed.driver" in cmp.unverified[0].message
    queue = next(f for f in cmp.checks if f.rule == "baseline.drift.queue_time_p95_s")
    assert queue.status == "not-observable" and "not measured in this run" in queue.message
    assert cmp.headline().startswith("SAME DEPLOYMENT NOT PROVEN: host driver")


def test_a_baseline_axis_that_failed_gives_no_band(tmp_path):
    base = write_run(tmp_path, "baseline", BASE, statuses={"prefix_cache": "fail"})
    run = write_run(tmp_path, "run", changed(prefix_cache__observed_hit_tokens=0))
    cmp = compare_with_baseline(run.root, base.root)
    hit = next(f for f in cmp.checks if f.rule == "baseline.drift.prefix_hit_rate")
    assert hit.status == "not-observable" and "no accepted baseline value" in hit.message
    assert not cmp.drift


def test_tampered_or_unaccepted_baseline_is_flagged(tmp_path):
    base = write_run(tmp_path, "baseline", changed(decision="capacity-extension"))
    path = base.path("evidence/capacity.json")
    path.write_text(path.read_text().replace("400.0", "900.0"))
    run = write_run(tmp_path, "run", BASE)
    cmp = compare_with_baseline(run.root, base.root)
    rules = {f.rule: f for f in cmp.checks}
    integrity = rules["baseline.integrity"]
    assert integrity.status == "fail" and "evidence/capacity.json" in integrity.message
    assert rules["baseline.accepted"].status == "warn"


def test_capacity_steps_and_custom_bands(tmp_path):
    steps = {"steps": [{"concurrency": 4, "queue_p95_ms": 100.0}, {"concurrency": 8, "queue_p95_ms": 450.0}]}
    base = write_run(tmp_path, "baseline", BASE)
    run = write_run(tmp_path, "run", changed(capacity=steps))
    level = acc.queue_time_p95_s(acc.read_run(run.root))
    assert level.value == pytest.approx(0.45) and level.source == "evidence/capacity.json: data.steps.1.queue_p95_ms"
    assert not compare_with_baseline(run.root, base.root).drift  # 0.45 ≤ 0.4 × 1.25 + 0.05
    tight = {"queue_time_p95_s": Band("queue time p95", "higher", relative=0.0, unit="s")}
    cmp = compare_with_baseline(run.root, base.root, bands=tight)
    assert [f.rule for f in cmp.drift] == ["baseline.drift.queue_time_p95_s"]


def test_the_comparison_dumps_json_ready(tmp_path, baseline):
    import json

    run = write_run(tmp_path, "run", changed(probe__vllm_version="0.28.0"))
    data = compare_with_baseline(run.root, baseline.root).model_dump(mode="json")
    json.dumps(data)
    assert data["reopens"] is True and data["headline"].startswith("THE ACCEPTANCE SHEET REOPENS")


def test_levels_are_derived_tolerantly(tmp_path):
    spec = changed(capacity={"planned_concurrency": 8,
                             "steps": [{"concurrency": 8, "preemptions": 6, "start_wall": 0.0, "end_wall": 120.0,
                                        "server_errors": 1, "sent": 50, "kv_usage_max": 62.0}]})
    store = write_run(tmp_path, "run", spec)
    store.write_text("evidence/agent.json", "{not json")
    run = acc.read_run(store.root)
    assert acc.preemptions_per_s(run).value == pytest.approx(0.05)
    assert acc.error_ratio(run).value == pytest.approx(0.02)
    assert acc.kv_usage_at_planned(run).value == pytest.approx(0.62)
    validity = acc.tool_call_validity(run)
    assert validity.value is None
    assert "evidence/agent.json" in validity.reason and "not readable JSON" in validity.reason
    assert "agent" in run.unreadable
    assert acc.parallelism(run).value == {"tensor_parallel_size": 8, "pipeline_parallel_size": 1,
                                          "data_parallel_size": 1}


def test_a_hand_edited_mistyped_level_is_refused_with_its_reason_not_guessed(tmp_path):
    store = write_run(tmp_path, "run", BASE)
    path = store.path("evidence/capacity.json")
    data = json.loads(path.read_text())
    data["data"]["steps"][0]["kv_usage_max"] = "62%"
    path.write_text(json.dumps(data))
    level = acc.kv_usage_at_planned(acc.read_run(store.root))
    assert level.value is None and "evidence/capacity.json" in level.reason and "kv_usage_max" in level.reason


def test_every_evidence_path_the_levels_read_is_declared_by_its_axis_model():
    from k3lib.core.evidence import DATA_MODELS, CapacityStep, ProbeData

    undeclared = [f"{axis}.{dotted}" for cands in acc.CANDIDATES.values() for axis, dotted, _ in cands
                  if axis != "params" and (axis not in DATA_MODELS or not acc.declared_path(DATA_MODELS[axis], dotted))]
    undeclared += [f"capacity.steps.{key}" for keys in acc.STEP_KEYS.values() for key, _ in keys
                   if not acc.declared_path(CapacityStep, key)]
    assert undeclared == []

    assert not acc.declared_path(ProbeData, "served_models.0.max_ok_len")


def test_the_probe_keeps_the_card_fields_it_declares_and_the_whole_body_in_its_endpoints(tmp_path):
    store = RunStore.create_at(tmp_path / "run")
    rec = probe_by_the_axis(BASE["probe"], store, 32768)
    assert rec["data"]["served_models"] == [{"id": "kimi-k3", "root": None, "owned_by": None, "max_model_len": 65536}]
    assert '"permission"' in rec["data"]["endpoints"]["models"]["body"]
    assert acc.context_limit_tokens(acc.read_run(write_run(tmp_path, "r2", BASE).root)).value == 65536


def test_compare_main_exit_codes_and_precheck(tmp_path, baseline, capsys):
    import argparse

    from k3lib.verdict.baseline import precheck_baseline
    from k3lib.cli.baseline import cmd_compare as compare_main
    from k3lib.core.errors import BadInputError

    same = write_run(tmp_path, "same", BASE)
    assert compare_main(argparse.Namespace(run=str(same.root), baseline=str(baseline.root))) == 0
    moved = write_run(tmp_path, "moved", changed(environment__driver_version="590.48.01"))
    assert compare_main(argparse.Namespace(run=str(moved.root), baseline=str(baseline.root))) == 1
    assert capsys.readouterr().out.splitlines()[-2].startswith("THE ACCEPTANCE SHEET REOPENS")
    # the digest missing from the run: nothing changed that the kit saw, but the same image is not proven
    undigested = write_run(tmp_path, "undigested", changed(environment__inspected=False))
    assert compare_main(argparse.Namespace(run=str(undigested.root), baseline=str(baseline.root))) == 1
    out = capsys.readouterr().out
    assert "SAME DEPLOYMENT NOT PROVEN: image digest" in out and "UNVERIFIED image digest" in out
    custom = write_run(tmp_path, "custom", changed(environment__build="custom"))
    with pytest.raises(BadInputError, match="never compared as one"):
        compare_main(argparse.Namespace(run=str(custom.root), baseline=str(baseline.root)))
    precheck_baseline(baseline.root, "official")
    with pytest.raises(BadInputError, match="never compared as one"):
        precheck_baseline(baseline.root, "custom")
    with pytest.raises(BadInputError, match="not a k3kit run folder"):
        precheck_baseline(tmp_path, "official")


def test_tool_call_validity_from_the_agent_rates_table(tmp_path):
    """The agent record built by the agent axis' own record builder from its per-reply check outcomes."""
    import types

    from k3lib.axes.agent.judge import agent_record
    from k3lib.axes.agent.result import AgentResult

    steps = [agent_reply(1, i, True, other_check=False) for i in range(10)] + \
        [agent_reply(8, i, i >= 2, other_check=False) for i in range(30)]
    result = AgentResult({"min_pass_rate": 1.0}, {"cases": [{"id": "weather", "title": "weather"}]},
                         [{"level": 1}, {"level": 8}], [], steps)
    ctx = types.SimpleNamespace(store=types.SimpleNamespace(path=lambda rel: tmp_path / "absent" / rel))
    agent = agent_record(result, ctx).model_dump(mode="json")
    store = write_run(tmp_path, "run", changed(agent=None))
    store.write_json("evidence/agent.json", agent)
    level = acc.tool_call_validity(acc.read_run(store.root))
    assert level.value == pytest.approx(38 / 40) and "check=arguments_valid" in level.source
    assert level.axis_status == "fail"  # function_name failed: the rate is known, the axis did not accept it


def test_levels_from_the_capacity_steps_as_k3lib_capacity_writes_them(tmp_path):
    steps = [{"concurrency": 4, "queue_p95_ms": 10.0, "kv_usage_max": 0.2, "preemptions": 0, "start_wall": 0.0,
              "end_wall": 60.0, "sent": 40, "server_errors": 0},
             {"concurrency": 8, "queue_p95_ms": 350.0, "kv_usage_max": 0.58, "preemptions": 3, "start_wall": 100.0,
              "end_wall": 160.0, "sent": 80, "server_errors": 2},
             {"concurrency": 16, "queue_p95_ms": 2000.0, "kv_usage_max": 0.99, "preemptions": 40}]
    store = write_run(tmp_path, "run", changed(capacity={"steps": steps, "planned_concurrency": 8}))
    run = acc.read_run(store.root)
    assert acc.queue_time_p95_s(run).value == pytest.approx(0.35)
    assert acc.kv_usage_at_planned(run).value == pytest.approx(0.58)
    pre = acc.preemptions_per_s(run)
    assert pre.value == pytest.approx(0.05) and pre.source.startswith("evidence/capacity.json: data.steps.1.")
    assert acc.error_ratio(run).value == pytest.approx(0.025)


def test_hit_rate_from_the_prefix_axis_token_sums(tmp_path):
    store = write_run(tmp_path, "run", changed(prefix_cache={"gain_counted": True, "observed_hit_tokens": 1536,
                                                             "warm_prompt_tokens": 2048, "designed_hit_tokens": 1536}))
    level = acc.prefix_hit_rate(acc.read_run(store.root))
    assert level.value == pytest.approx(0.75) and "observed_hit_tokens / data.warm_prompt_tokens" in level.source


def test_levels_read_a_capacity_record_built_by_the_capacity_axis(tmp_path):
    """No hand-written data: the capacity axis' own record builder writes it, the accepted levels read it back."""
    import types
    from pathlib import Path

    from k3lib.axes.capacity import capacity_record
    from k3lib.axes.capacity.result import CapacityResult
    from k3lib.core.params import load_params

    params = load_params([Path(__file__).resolve().parents[1] / "parameters" / "emulator.yaml"],
                         ["contract.planned_concurrency=8"])
    steps = [{"concurrency": 8, "status": "done", "held": True, "why": [], "queue_p95_ms": 350.0,
              "kv_usage_max": 0.58, "preemptions": 3, "start_wall": 100.0, "end_wall": 160.0, "sent": 80,
              "server_errors": 2}]
    phases = [{"phase": "concurrency", "status": "done", "start_wall": 100.0, "end_wall": 160.0, "note": ""}]
    record = capacity_record(CapacityResult({"plan": {}, "phases": phases, "steps": steps}, [], [], [], None, None),
                             types.SimpleNamespace(params=params))
    store = write_run(tmp_path, "run", changed(capacity=None))
    store.write_json("evidence/capacity.json", record.model_dump(mode="json"))
    run = acc.read_run(store.root)
    assert acc.queue_time_p95_s(run).value == pytest.approx(0.35)
    assert acc.kv_usage_at_planned(run).value == pytest.approx(0.58)
    assert acc.preemptions_per_s(run).value == pytest.approx(0.05)
    assert acc.error_ratio(run).value == pytest.approx(0.025)
