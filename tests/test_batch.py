"""The acceptance batch end to end through the CLI, against the embedded emulator on a real socket."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import HEALTHY_KEY, HEALTHY_KEY_ENV
from k3lib.cli.main import main
from k3lib.core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
EMULATOR_YAML = str(ROOT / "parameters" / "emulator.yaml")


def _only_run(out: Path) -> RunStore:
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1
    return RunStore(runs[0])


def test_healthy_batch_decides_production(healthy_run, capsys):
    code, store = healthy_run
    decision = json.loads(store.path("decision.json").read_text())
    assert code == 0, decision
    assert decision["decision"] == "production"
    ids = [i["id"] for i in decision["checklist"]]
    assert ids[:5] == ["C01", "C02", "C03", "C04", "C05"]
    assert all(i["status"] == "pass" for i in decision["checklist"])


def test_run_folder_is_complete_and_verifies(healthy_run):
    _, store = healthy_run
    for rel in ("params.json", "evidence/probe.json", "notebooks/00_probe.ipynb", "notebooks/99_acceptance.ipynb",
                "report/00_probe.html", "report/99_acceptance.html", "report/index.html", "decision.json"):
        assert store.path(rel).is_file(), rel
        assert rel in store.manifest()["files"], rel
    assert store.verify() == []
    assert not list(store.path("notebooks").glob(".*partial*"))
    params = json.loads(store.path("params.json").read_text())
    assert params["target"]["base_url"].startswith("http://127.0.0.1:")


def test_report_is_self_contained(healthy_run):
    _, store = healthy_run
    index = store.path("report/index.html").read_text()
    assert "production" in index and "00_probe.html" in index
    page = store.path("report/99_acceptance.html").read_text()
    # every script a page loads is a file of the report folder itself (one plotly.js for all pages), never a URL
    sources = re.findall(r'<script[^>]*\ssrc="([^"]+)"', page)
    assert sources, "the page loads no script: its figures cannot draw"
    for src in sources:
        assert "://" not in src and not src.startswith("/") and store.path(f"report/{src}").is_file(), src
    assert "cdn." not in page.lower().replace("cdn.plot.ly/plotly", "")  # plotly.js mentions its CDN in comments
    assert "k3-hide-code" in page  # code hidden by default, shown on request


# fault → (decision, exit code, the axis whose finding names the cause). A whole batch where the assembly is the
# point: two faults on two axes (the stronger decision wins), and a fault every load axis meets (the long-context
# OOM leaves the engine dead mid-axis: the restart and the other axes' evidence must not change the decision).
MATRIX = [
    pytest.param(["oom-long-context"], "capacity-extension", "capacity", id="oom-long-context"),
    pytest.param(["bad-tool-args", "kv-starved"], "capacity-extension", "capacity", id="two-faults-stronger-wins"),
    pytest.param(["no-prefix-caching", "old-driver"], "environment-rebuild", "environment",
                 id="two-faults-rebuild-wins"),
]


@pytest.mark.slow
@pytest.mark.parametrize("faults, expected, axis", MATRIX)
def test_fault_matrix(tmp_path, capsys, faults, expected, axis):
    # a failing axis decides each case: the contract's 381-turn tool series (about 20 s a batch) would only add
    # a limited-observation beneath it
    # the capacity axis at the planned step (and the one beyond) and one session level: a failing axis still decides
    argv = ["validate", "-p", EMULATOR_YAML, "--out", str(tmp_path), "--set", "axes.agent.tool_turns=4",
            "--set", "axes.capacity.concurrency_steps=[4]", "--set", "contract.planned_sessions=1"]
    for fault in faults:
        argv += ["--fault", fault]
    code = main(argv)
    out = capsys.readouterr().out
    store = _only_run(tmp_path)
    decision = json.loads(store.path("decision.json").read_text())
    assert decision["decision"] == expected, decision["reasons"]
    assert code == {"environment-rebuild": 5, "capacity-extension": 4, "limited-observation": 3}[expected]
    assert f"decision: {expected}" in out
    record = json.loads(store.path(f"evidence/{axis}.json").read_text())
    assert record["status"] == "fail"
    assert store.verify() == []


def _axis_record(axis: str, ctx: Any) -> Any:
    """What the axis' notebook does between `open_axis` and `ctx.record` (notebooks/0*_*.ipynb), in-process."""
    import k3lib

    if axis == "probe":
        return k3lib.probe_record(k3lib.run_probe(ctx), ctx)
    if axis == "environment":
        return k3lib.environment.environment_record(k3lib.environment.check_environment(ctx), ctx)
    if axis == "agent":
        return k3lib.agent.agent_record(k3lib.agent.run_agent(ctx), ctx)
    if axis == "capacity":
        return k3lib.capacity.capacity_record(k3lib.capacity.run_capacity(ctx), ctx)
    assert axis == "prefix_cache", axis
    return k3lib.prefix_cache.prefix_cache_record(k3lib.prefix_cache.run_prefix_cache(ctx), ctx)


# One fault, one axis: the axis whose finding names the cause runs against the faulted emulator, and its record
# replaces that axis' record in the healthy batch's evidence; the decision rule over that evidence must reach the
# fault's decision, for the reason of that axis' failing finding. The batch's assembly is shown by the whole-batch
# cases above and by the healthy batch.
AXIS_MATRIX = [
    pytest.param("oom-startup", "environment-rebuild", "probe", id="oom-startup"),
    pytest.param("cuda12-image", "environment-rebuild", "environment", id="cuda12-image"),
    pytest.param("old-driver", "environment-rebuild", "environment", id="old-driver"),
    pytest.param("old-vllm", "environment-rebuild", "environment", id="old-vllm"),
    pytest.param("no-tool-parser", "environment-rebuild", "environment", id="no-tool-parser"),
    pytest.param("kv-starved", "capacity-extension", "capacity", id="kv-starved"),
    pytest.param("tool-markup-leak", "limited-observation", "agent", id="tool-markup-leak"),
    pytest.param("bad-tool-args", "limited-observation", "agent", id="bad-tool-args"),
    pytest.param("no-prefix-caching", "limited-observation", "prefix_cache", id="no-prefix-caching"),
    # agent sessions (issue 47): histories evicted between turns, caught by the capacity axis' session phase
    pytest.param("session-evict", "limited-observation", "capacity", id="session-evict"),
]


@pytest.mark.slow
@pytest.mark.parametrize("fault, expected, axis", AXIS_MATRIX)
def test_fault_decides_through_its_axis(healthy_run, tmp_path, fault, expected, axis):
    import k3lib
    from k3lib.core.evidence import read_records
    from k3lib.core.plan import ACCEPTANCE_AXES
    from k3lib.emulator import EmulatorConfig, start_emulator
    from k3lib.verdict.decision import EXIT_CODES, decide

    code, healthy = healthy_run
    assert code == 0
    with start_emulator(EmulatorConfig.from_profile("demo", faults=(fault,), time_scale=0.05),
                        host="127.0.0.1", port=0) as handle:
        ctx = k3lib.open_axis(axis, EMULATOR_YAML, [f"target.base_url={handle.url}"], str(tmp_path / "run"))
        record = ctx.record(_axis_record(axis, ctx))
    assert record.status == "fail", [(f.rule, f.status, f.message) for f in record.findings]
    records = read_records(healthy)
    assert decide(records, ACCEPTANCE_AXES).decision == "production"  # the healthy evidence alone
    records[axis] = record
    decision = decide(records, ACCEPTANCE_AXES)
    assert decision.decision == expected, decision.reasons
    assert decision.exit_code == EXIT_CODES[expected] == \
        {"environment-rebuild": 5, "capacity-extension": 4, "limited-observation": 3}[expected]
    # the decision rests on the faulted axis' own failing finding, at the fault's level
    assert any(r.startswith(f"{expected}: {f.rule}:") for f in record.failed() for r in decision.reasons), \
        decision.reasons
    assert RunStore(ctx.store.root).verify() == []


def test_api_key_value_never_reaches_an_output(healthy_run):
    """The healthy run sends a key (its emulator refuses /v1 without it, and the run decides production): the key's
    value is in no file of the run, its variable's name is in params.json."""
    code, store = healthy_run
    assert code == 0, store.read_json("decision.json")
    files = [p for p in store.root.rglob("*") if p.is_file()]
    assert len(files) > 8
    for path in files:
        assert HEALTHY_KEY.encode() not in path.read_bytes(), f"the key leaked into {path}"
    params = json.loads(store.path("params.json").read_text())
    assert params["target"]["api_key_env"] == HEALTHY_KEY_ENV


def test_missing_api_key_variable_is_bad_input(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("K3_ABSENT_KEY", raising=False)
    code = main(["validate", "-p", EMULATOR_YAML, "--set", "target.api_key_env=K3_ABSENT_KEY",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "K3_ABSENT_KEY" in err[0]
