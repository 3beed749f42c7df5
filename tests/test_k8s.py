"""deploy/k8s/cronjob.yaml: checked with the kubernetes client's models (scripts/k8s_check.py, run by the Airflow
environment's Python, which holds the client), and the fleet file its ConfigMap carries read by the kit itself.

The checker is shown able to fail: a misspelt field, a wrong type, a missing required field and a bad schedule
are each refused, named by their path."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflowenv import require_airflow

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "deploy" / "k8s" / "cronjob.yaml"
CHECK = ROOT / "scripts" / "k8s_check.py"
DOCS: list[dict[str, Any]] = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return by_kind(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def python() -> Path:
    return require_airflow() / "bin" / "python"


def check(python: Path, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(CHECK), str(path)], capture_output=True, text=True, timeout=120)


@pytest.mark.airflow
def test_the_cronjob_manifest_passes_the_models(python):
    done = check(python, MANIFEST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"{MANIFEST}: document 1 ConfigMap k3kit-fleet: ok",
                                        f"{MANIFEST}: document 2 PersistentVolumeClaim k3kit-fleet-runs: ok",
                                        f"{MANIFEST}: document 3 CronJob k3kit-fleet: ok"]


def _misspelt(docs):
    by_kind(docs, "CronJob")["spec"]["concurrencyPolice"] = by_kind(docs, "CronJob")["spec"].pop("concurrencyPolicy")


def _cpu_as_number(docs):
    pod(docs)["containers"][0]["resources"]["limits"]["cpu"] = 2


def _no_container_image_name(docs):
    del pod(docs)["containers"][0]["name"]


def _bad_schedule(docs):
    by_kind(docs, "CronJob")["spec"]["schedule"] = "0 2 * *"


@pytest.mark.airflow
@pytest.mark.parametrize("breaks, expected", [
    (_misspelt, ".spec.concurrencyPolice: unknown field of V1CronJobSpec"),
    (_cpu_as_number, ".spec.jobTemplate.spec.template.spec.containers[0].resources.limits.cpu: expected str, got int"),
    (_no_container_image_name, "V1Container name"),
    (_bad_schedule, "spec.schedule: '0 2 * *' is not a cron expression"),
])
def test_the_checker_refuses_a_broken_manifest_naming_what(python, tmp_path, breaks, expected):
    docs = copy.deepcopy(DOCS)
    breaks(docs)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    done = check(python, path)
    assert done.returncode == 1 and expected in done.stdout, done.stdout + done.stderr


def test_the_configmap_fleet_file_is_one_the_kit_reads_and_the_job_runs_k3_fleet_on_it(tmp_path):
    from k3lib.batch.fleet import load_fleet

    data = by_kind(DOCS, "ConfigMap")["data"]
    for name, text in data.items():
        (tmp_path / name).write_text(text)
    ff = load_fleet(tmp_path / "fleet.yaml")
    assert ff.names == ["paris-h200-a", "paris-h200-b"]
    assert ff.folder("paris-h200-a") == Path("/var/lib/k3kit/fleet/paris-h200-a")
    container = pod(DOCS)["containers"][0]
    assert container["command"] == ["k3", "fleet", "/etc/k3kit/fleet.yaml"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    # the fleet file's folders are the mounted volumes: the runs on the claim, the textfiles on the host's directory
    assert mounts["fleet"] == "/etc/k3kit" and ff.fleet.outputs.startswith(mounts["runs"] + "/")
    assert ff.fleet.textfile_dir == mounts["textfile"]
    assert by_kind(DOCS, "CronJob")["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0


def test_the_configmap_parameters_load_with_each_deployment_of_the_fleet(tmp_path):
    from k3lib.batch.fleet import load_fleet
    from k3lib.core.params import load_params

    data = by_kind(DOCS, "ConfigMap")["data"]
    # the image holds the repository's parameters/ at /opt/k3kit/parameters
    for name, text in data.items():
        (tmp_path / name).write_text(text.replace("/opt/k3kit/parameters/", f"{ROOT}/parameters/"))
    ff = load_fleet(tmp_path / "fleet.yaml")
    for d in ff.fleet.deployments:
        params = load_params([ff.here(f) for f in [*ff.fleet.defaults.params, *d.params]],
                             [*ff.fleet.defaults.set, *d.set, f"run.label={d.name}"])
        assert params.target.base_url.startswith("http://vllm-") and params.run.label == d.name
        assert params.target.api_key_env == "K3_API_KEY" and params.target.gpu_metrics.source == "prometheus"
