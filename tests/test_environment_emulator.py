"""The compatibility axis against the embedded emulator over a real socket: healthy passes, each environment
fault fails with a finding naming its cause; sources are kept in the run folder; the notebook runs under papermill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3lib.axes.environment import check_environment, environment_record, environment_table
from k3lib.verdict.decision import level_for
from k3lib.core.evidence import parse_record
from k3lib.opening.axis import open_axis
from k3lib.core.store import RunStore

import k3lib.emulator as emulator_mod
ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, faults: tuple[str, ...], *extra: str):
    handle = emulator_mod.start_emulator(
        emulator_mod.EmulatorConfig.from_profile("demo", faults=faults, time_scale=0.05), host="127.0.0.1", port=0)
    try:
        ctx = open_axis("environment", str(ROOT / "parameters/emulator.yaml"),
                        [f"target.base_url={handle.url}", *extra], str(tmp_path / "run"))
        result = check_environment(ctx)
        record = ctx.record(environment_record(result, ctx))
    finally:
        handle.stop()
    return ctx, result, record


def test_healthy_emulator_passes_with_every_proof_kept(tmp_path):
    ctx, result, record = _run(tmp_path, ())
    assert record.status == "pass", [(f.rule, f.status, f.message) for f in record.findings if f.status != "pass"]
    assert record.data["mismatch"] is False and record.data["build"] == "official"
    for name in ("collect_env", "server_log", "version", "models", "chat", "tool_choice", "cache_config_info",
                 "image_inspect", "nvidia_smi"):
        rel = f"evidence/environment/{name}.txt"
        assert rel in record.attachments and ctx.store.path(rel).stat().st_size > 0, name
    back = parse_record(json.loads(ctx.store.path("evidence/environment.json").read_text()), "environment.json")
    assert back.axis == "environment" and back.title == "Compatibility chain"
    assert RunStore(ctx.store.root).verify() == []
    table = environment_table(result)
    assert (table["status"].isin(["pass", "info"])).all()
    assert table.loc["vLLM version", "observed"] == "0.33.0"
    # C01 rests on the inspected digest, C04 on the host's nvidia-smi compared with the container's collect_env
    image = record.by_rule("environment.image")
    assert image.status == "pass" and "@sha256:" in image.message and image.observed["digest"].startswith("sha256:")
    host = record.by_rule("environment.host_container")
    assert host.status == "pass" and "nvidia_smi (host)" in host.message


@pytest.mark.parametrize("fault, rule, says", [
    pytest.param("cuda12-image", "environment.cuda_build", "CUDA 12.9 build", id="cuda12-image"),
    pytest.param("old-driver", "environment.driver_branch", "570.172.08 is R570, below", id="old-driver"),
    pytest.param("old-vllm", "environment.vllm_version", "0.27.0", id="old-vllm"),
    pytest.param("no-tool-parser", "environment.flags", "--enable-auto-tool-choice", id="no-tool-parser"),
    pytest.param("oom-startup", "environment.startup", "the engine never became ready: OOM at startup",
                 id="oom-startup"),
])
def test_each_environment_fault_fails_with_a_finding_naming_its_cause(tmp_path, fault, rule, says):
    _, result, record = _run(tmp_path, (fault,))
    assert record.status == "fail"
    assert record.data["mismatch"] is True
    finding = record.by_rule(rule)
    assert finding is not None and finding.status == "fail" and says in finding.message, finding
    assert level_for(finding)[0] == "environment-rebuild"
    assert finding.evidence["proofs"], "a failing finding names the proofs it used"


def test_no_tool_parser_is_proven_by_behaviour_too(tmp_path):
    _, result, _ = _run(tmp_path, ("no-tool-parser",))
    assert result.sources.tool_probe.outcome == "rejected-flags"
    assert "400" in result.by_rule("environment.flags").message


def test_unconfigured_and_unreachable_sources_are_not_observable_never_raised(tmp_path):
    _, result, record = _run(tmp_path, (), "axes.environment.image_inspect=null",
                             "axes.environment.nvidia_smi={base_url}/_emulator/no-such-artifact",
                             f"axes.environment.collect_env={tmp_path}/missing.txt")
    findings = {(f.rule, f.evidence.get("source")): f for f in record.findings}
    assert findings[("environment.image", None)].status == "not-observable"
    assert findings[("environment.source", "nvidia_smi")].status == "not-observable"
    assert "HTTP 404" in findings[("environment.source", "nvidia_smi")].message
    assert "file not found" in findings[("environment.source", "collect_env")].message
    assert record.by_rule("environment.cuda_build").status == "not-observable"
    assert record.status == "warn"


def test_environment_notebook_under_papermill(tmp_path):
    import papermill as pm

    handle = emulator_mod.start_emulator(emulator_mod.EmulatorConfig.from_profile("demo", time_scale=0.05),
                                         host="127.0.0.1", port=0)
    run = tmp_path / "run"
    try:
        pm.execute_notebook(
            str(ROOT / "notebooks/01_environment.ipynb"), str(tmp_path / "env.ipynb"), kernel_name="python3",
            progress_bar=False, cwd=str(ROOT),
            parameters={"params_file": "parameters/emulator.yaml", "run_dir": str(run),
                        "overrides": [f"target.base_url={handle.url}"]})
    finally:
        handle.stop()
    record = json.loads((run / "evidence/environment.json").read_text())
    assert record["axis"] == "environment" and record["status"] == "pass", record["findings"]
    assert RunStore(run).verify() == []


def test_the_record_keeps_the_topology_a_revalidation_compares(tmp_path):
    from k3lib.verdict import accepted

    ctx, _, record = _run(tmp_path, ())
    topo = record.data["topology"]
    assert {k: topo[k] for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")} == \
        {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1}
    assert topo["gpu_count"] >= 1
    level = accepted.parallelism(accepted.read_run(ctx.store.root))
    assert level.known and level.value["tensor_parallel_size"] == 1
