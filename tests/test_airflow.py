"""The fleet DAG (deploy/airflow/k3kit_fleet.py) under `airflow dags test`, SQLite and no scheduler, against two
emulators in their own processes: the healthy deployment's task passes, the faulty one's fails with the reason, so
the DAG run fails; each run folder, trend page and textfile is left where the fleet file says.

Needs the Airflow environment (`make airflow`): skips with the reason without it, fails instead under
K3_REQUIRE_AIRFLOW=1 (as CI runs it). Lean on purpose (three short validations, ~3 minutes on two busy cores):
the phases are cut to one small step each, as in tests/test_hardening_faults.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from airflowenv import require_airflow
from k3lib.verdict import accepted as acc
from k3lib.verdict.baseline import DRIFT_LEVELS
from realengine import stop

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
K3 = Path(sys.executable).parent / "k3"  # the kit's own venv: the DAG's tasks run it, Airflow's env has no kit
EMULATOR_YAML = ROOT / "parameters" / "emulator.yaml"
LOGICAL_DATE = "2026-12-04T02:00:00+00:00"

# Every phase still runs, each at its smallest (one agent level, one concurrency step, a one-second soak, one prefix
# session); the same for the baseline and the fleet, so the comparison compares like with like. No GPU metrics
# source: both runs decide limited-observation on that, so a busy machine's timing cannot make the healthy
# deployment's decision stronger than its baseline's.
# Short, but each step runs its whole window (not cut after 40 quick requests): the KV usage compared with the
# baseline is the peak of the step's settled /metrics samples, and a step cut after one sample gave 0.016 in one run
# and 0.066 in the next (one request in flight at that instant, then four): drift on a healthy deployment. Two-second
# steps sampled every 0.1 s: a level needs three settled samples, a metric not measured is drift not ruled out, and
# beside real vLLM in the whole suite a one-second step kept 2 (at 0.2 s, 3 or 4 with the machine idle). The agent's
# and prefix pair's bounds are what a busy machine needs, not what they take (the agent level ends in about 2 s idle):
# a run that measured no tool call has no validity to compare, and a baseline whose agent axis failed on a timeout
# has no band.
TINY = [
    "contract.planned_concurrency=4", "run.notebook_timeout_s=150", "target.restart_timeout_s=5",
    "axes.probe.timeout_s=3", "axes.environment.timeout_s=3",
    "axes.agent.repetitions=1", "axes.agent.concurrency_levels=[2]", "axes.agent.max_requests=30",
    "axes.agent.tool_turns=4",  # drift, not the contract's 381-turn series (about 8 s of each of the three runs)
    "axes.agent.max_duration_s=20", "axes.agent.request_timeout_s=10",
    "axes.capacity.ready_timeout_s=2", "axes.capacity.request_timeout_s=3",
    "axes.capacity.context_lengths_tokens=[800]", "axes.capacity.long_context_output_tokens=8",
    "axes.capacity.concurrency_steps=[2]", "axes.capacity.prompt_tokens=256", "axes.capacity.output_tokens=16",
    "axes.capacity.step_duration_s=2", "axes.capacity.sample_interval_s=0.1", "axes.capacity.step_max_requests=400",
    "axes.capacity.soak_duration_s=1", "axes.capacity.soak_max_requests=40",
    "axes.prefix_cache.sessions=1", "axes.prefix_cache.prefix_tokens=[600]", "axes.prefix_cache.max_duration_s=20",
    "axes.prefix_cache.request_timeout_s=10", "axes.prefix_cache.settle_s=0.5", "axes.operations.drill_timeout_s=10",
]


@pytest.fixture(scope="module")
def airflow() -> Path:
    return require_airflow() / "bin" / "airflow"


@contextlib.contextmanager
def emulator(tmp_path: Path, name: str, *faults: str) -> Iterator[str]:
    """`k3 emulator` in its own process (its own session, stopped with its group); yields its URL."""
    out = tmp_path / f"emulator-{name}.txt"
    with open(out, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "k3lib", "emulator", "--port", "0", "--time-scale", "0.05",
                                 *[f"--fault={f}" for f in faults]], stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (lines := out.read_text(errors="replace").splitlines()) and time.monotonic() < deadline:
            assert proc.poll() is None, f"the {name} emulator exited {proc.returncode}"
            time.sleep(0.1)
        assert lines and lines[0].startswith("http://127.0.0.1:"), f"{name} emulator printed {lines[:3]}"
        yield lines[0].split()[0]
    finally:
        stop(proc)


def run(cmd: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


def textfile(path: Path) -> dict[tuple[str, str], float]:
    """(metric, label) → value of the textfile's samples (the deployment's label is its fleet name)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, s.labels.get("label", "")): s.value
            for fam in text_string_to_metric_families(path.read_text()) for s in fam.samples}


def test_fleet_dag_passes_the_healthy_deployment_and_fails_the_faulty_one_with_the_reason(airflow, tmp_path):
    runs, prom = tmp_path / "fleet-runs", tmp_path / "textfile"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "deploy" / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "K3_BIN": str(K3)}
    migrated = run([str(airflow), "db", "migrate"], env, 300)  # SQLite in AIRFLOW_HOME
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    # every tool call of the faulty one breaks its schema: its tool-call validity drifts from the baseline's 1,
    # while its decision (limited-observation, as the baseline's) would not fail it on its own
    with emulator(tmp_path, "healthy") as healthy, emulator(tmp_path, "faulty", "bad-tool-args=1") as faulty:
        # the accepted baseline: one run of the healthy deployment into its fleet folder, as before scheduling
        sets = [a for s in [*TINY, f"target.base_url={healthy}", "run.label=healthy"] for a in ("--set", s)]
        accepted = run([str(K3), "validate", "-p", str(EMULATOR_YAML), *sets, "--out", str(runs / "healthy")],
                       env, 300)
        assert accepted.returncode == 3, accepted.stdout[-3000:] + accepted.stderr[-3000:]
        (baseline,) = [p for p in (runs / "healthy").iterdir() if (p / "manifest.json").is_file()]
        base = acc.read_run(baseline)  # the bands the fleet's runs are held to: each metric compared has one
        assert {key: read(base).accepted for key, read in DRIFT_LEVELS.items()} == {
            "queue_time_p95_s": False, "kv_usage_at_planned": True, "prefix_hit_rate": True,
            "tool_call_validity": True}, {key: read(base).reason for key, read in DRIFT_LEVELS.items()}
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(yaml.safe_dump({
            "outputs": "fleet-runs", "textfile_dir": "textfile",
            "defaults": {"params": [str(EMULATOR_YAML)], "set": TINY},
            # healthy: no baseline named, so the latest accepted run in its folder; faulty: a replica of the same
            # recipe, accepted by that same run, named
            "deployments": [{"name": "healthy", "set": [f"target.base_url={healthy}"]},
                            {"name": "faulty", "set": [f"target.base_url={faulty}"],
                             "baseline": str(baseline.relative_to(tmp_path))}]}))
        done = run([str(airflow), "dags", "test", "k3kit_fleet", LOGICAL_DATE, "-c", json.dumps({"fleet": str(fleet)})],
                   env, 480)
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-4000:]  # the DAG run failed
    states = run([str(airflow), "tasks", "states-for-dag-run", "k3kit_fleet", LOGICAL_DATE, "-o", "json"], env, 120)
    got = {(t["task_id"], str(t.get("map_index") or "")): t["state"] for t in json.loads(
        states.stdout[states.stdout.index("["):])}
    assert got == {("deployments", ""): "success", ("revalidate", "0"): "success",
                   ("revalidate", "1"): "failed"}, (got, log[-4000:])

    lines = [line for line in log.splitlines() if "fleet: faulty: REGRESSED:" in line]
    assert lines and "drift: outside the accepted band — tool-call validity" in lines[-1], log[-4000:]
    assert "fleet: healthy: ok: limited-observation; same deployment as " + baseline.name in log, log[-4000:]

    # every run folder kept (with its comparison), one trend page per deployment
    kept = {d: sorted(p.name for p in (runs / d).iterdir() if (p / "manifest.json").is_file())
            for d in ("healthy", "faulty")}
    assert len(kept["healthy"]) == 2 and kept["healthy"][0] == baseline.name and len(kept["faulty"]) == 1, kept
    for d in ("healthy", "faulty"):
        comparison = json.loads((runs / d / kept[d][-1] / "baseline.json").read_text())
        assert comparison["baseline"] == baseline.name and (runs / d / "history.html").is_file()
    # the textfile of each deployment, labelled by its fleet name: drift 0 for the healthy one, 1 for the faulty
    healthy_prom, faulty_prom = textfile(prom / "k3kit-healthy.prom"), textfile(prom / "k3kit-faulty.prom")
    assert healthy_prom[("k3kit_drift_metrics", "healthy")] == 0
    assert faulty_prom[("k3kit_drift_metrics", "faulty")] == 1
    assert faulty_prom[("k3kit_tool_call_validity_ratio", "faulty")] < 1
