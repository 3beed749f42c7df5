"""The Airflow environment for tests (`make airflow`: scripts/airflow.sh, cached outside the checkout and linked as
.venv-airflow). A test that needs it skips with the reason when it is missing, and fails instead under
K3_REQUIRE_AIRFLOW=1 (as CI runs them)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "airflow.sh"
VENV = ROOT / ".venv-airflow"
REQUIRE_ENV = "K3_REQUIRE_AIRFLOW"  # CI sets it after `make airflow`: a missing build fails, never skips


def missing_reason() -> str | None:
    """Why the environment cannot be used here, or None. The script holds the pinned versions, so it decides."""
    done = subprocess.run(["bash", str(SCRIPT), "check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return None if done.returncode == 0 else (done.stdout.strip() or done.stderr.strip() or "not built")


def require_airflow() -> Path:
    """The environment's folder, or skip (fail under K3_REQUIRE_AIRFLOW=1) with the reason."""
    reason = missing_reason()
    if reason and os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    if reason:
        pytest.skip(reason)
    return VENV
