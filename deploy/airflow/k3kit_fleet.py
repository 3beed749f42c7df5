"""k3kit_fleet: the fleet's scheduled re-validation on Apache Airflow 3 (`make airflow` builds the environment).

One task lists the deployments of the fleet file (`k3 fleet FLEET --list`), then one mapped task per deployment runs
`k3 fleet FLEET --deployment NAME`: `k3 validate` into OUTPUTS/NAME/ against its baseline (each run folder kept),
`k3 history` of that folder with its node_exporter textfile, then the judgement. A deployment that regressed
(not comparable with its baseline, the sheet reopened, an identity item unverified, a metric out of its band, or
a decision stronger than the baseline's) fails its task with the reason, and so the DAG run; the other
deployments still run.

The tasks run the kit's own `k3` (K3_BIN) in a child process: Airflow's environment does not hold the kit, so
their pins never meet, and what a task runs is exactly what an operator runs by hand.

Environment (read when the scheduler parses this file):
  K3_BIN                   the kit's `k3` (default: `k3` on PATH)
  K3_FLEET_FILE            the fleet file (default /etc/k3kit/fleet.yaml; a run's conf `{"fleet": PATH}` overrides)
  K3_FLEET_SCHEDULE        cron expression (default "0 2 * * *": nightly at 02:00 UTC)
  K3_FLEET_PARALLEL        deployments validated at once (default 1: the validation host's cores are the load
                           generator, and the kit's calibration gate marks an overloaded client invalid)
  K3_FLEET_TASK_TIMEOUT_S  one deployment's limit (default 7200)
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess

from airflow.exceptions import AirflowException, AirflowFailException
from airflow.sdk import Param, dag, get_current_context, task

K3_BIN = os.environ.get("K3_BIN", "k3")
FLEET_FILE = os.environ.get("K3_FLEET_FILE", "/etc/k3kit/fleet.yaml")
SCHEDULE = os.environ.get("K3_FLEET_SCHEDULE", "0 2 * * *")
PARALLEL = int(os.environ.get("K3_FLEET_PARALLEL", "1"))
TASK_TIMEOUT_S = float(os.environ.get("K3_FLEET_TASK_TIMEOUT_S", "7200"))


def _fleet() -> str:
    return str(get_current_context()["params"]["fleet"])


def _last_k3_line(lines: list[str]) -> str:
    mine = [line.strip() for line in lines if line.startswith("k3: ")]
    return mine[-1] if mine else (lines[-1].strip() if lines else "(no output)")


@dag(
    dag_id="k3kit_fleet",
    description="re-validate every deployment of the fleet file against its accepted baseline",
    schedule=SCHEDULE,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,  # two nights' batches never load the same deployments at once
    params={"fleet": Param(FLEET_FILE, type="string", description="the fleet file")},
    tags=["k3kit"],
)
def k3kit_fleet() -> None:
    @task(retries=0)
    def deployments() -> list[str]:
        done = subprocess.run([K3_BIN, "fleet", _fleet(), "--list"], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise AirflowFailException(_last_k3_line(done.stderr.splitlines() + done.stdout.splitlines()))
        return [line.strip() for line in done.stdout.splitlines() if line.strip()]

    # retries=0: a regression is a verdict, not a transient error; running the batch again would only hide it
    @task(retries=0, max_active_tis_per_dagrun=PARALLEL, execution_timeout=dt.timedelta(seconds=TASK_TIMEOUT_S))
    def revalidate(name: str) -> str:
        # its own session: on a timeout or a kill the whole tree (k3 fleet and its validate) goes with the task
        proc = subprocess.Popen([K3_BIN, "fleet", _fleet(), "--deployment", name], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                print(line, end="", flush=True)  # the task log shows the batch as it runs
                lines.append(line)
            code = proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
        verdict = [line.strip() for line in lines if line.startswith(f"fleet: {name}: ")]
        if code == 0 and verdict:
            return verdict[-1]
        if code == 1 and verdict:
            raise AirflowFailException(verdict[-1])  # "fleet: NAME: REGRESSED: <reasons> (run PATH)"
        if code == 2:
            raise AirflowFailException(f"fleet: {name}: bad input: {_last_k3_line(lines)}")
        raise AirflowException(f"fleet: {name}: k3 fleet exited {code}: {_last_k3_line(lines)}")

    revalidate.expand(name=deployments())


k3kit_fleet()
