"""The context an axis runs in: resolved parameters, its run folder and the target — alone or inside a batch.

The openers the notebooks call first (`open_axis`, `open_summary`) are `k3lib.notebook`: they also install the
notebook's views, which sit above every axis.

A notebook works three ways with the same cells: in the batch (the runner passes the run folder and the
resolved `params.json`, the target already pinned), alone under papermill, and cell by cell in JupyterLab
(both of which create a run folder and, when the parameters name no target URL, start the embedded emulator).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from .errors import BadInputError
from .evidence import EvidenceRecord, read_records
from .params import Params, load_any
from .store import RunStore, utc_now
from .target import Target

__all__ = ["PROJECT_ROOT", "AxisContext", "find_path", "open_run", "outputs_dir", "read_records"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The parameters cell of every notebook: literals only, the same four names (checked by the tests).
NOTEBOOK_PARAMETERS = ("params_file", "overrides", "run_dir", "interactive")


def find_path(path: str | Path) -> Path:
    """A relative path as given (from the current folder), else from the project root (JupyterLab runs
    kernels in notebooks/, papermill in the caller's folder)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    alt = PROJECT_ROOT / p
    return alt if alt.exists() else p


def outputs_dir() -> Path:
    local = PROJECT_ROOT / "outputs"
    return local if (PROJECT_ROOT / "pyproject.toml").exists() else Path.cwd() / "outputs"


@dataclasses.dataclass
class AxisContext:
    axis: str
    params: Params
    store: RunStore
    target: Target
    interactive: bool = False
    started_at: str = dataclasses.field(default_factory=utc_now)
    _t0: float = dataclasses.field(default_factory=time.monotonic)

    def record(self, record: EvidenceRecord) -> EvidenceRecord:
        """Stamp timing and target onto the axis record and write `evidence/<axis>.json` atomically."""
        record = record.model_copy(update={
            "started_at": record.started_at or self.started_at,
            "finished_at": utc_now(),
            "duration_s": round(time.monotonic() - self._t0, 3),
            "target": record.target or self.target.base_url,
        })
        self.store.write_json(f"evidence/{record.axis}.json", record.model_dump(mode="json"))
        return record

    def __repr__(self) -> str:
        return f"AxisContext(axis={self.axis!r}, run={str(self.store.root)!r}, target={self.target!r})"


def open_run(params_file: str, overrides: list[str] | None = None, run_dir: str = "") -> tuple[Params, RunStore]:
    params = load_any(find_path(params_file), list(overrides or []))
    if run_dir:
        root = Path(run_dir)
        store = RunStore.open(root) if (root / "manifest.json").exists() else _create_at(root)
    else:
        store = RunStore.create(outputs_dir(), label=params.run.label)
    return params, store


def _create_at(root: Path) -> RunStore:
    if root.exists() and any(root.iterdir()):
        raise BadInputError("exists and is not a k3kit run folder (no manifest.json)", source=str(root))
    return RunStore.create_at(root)
