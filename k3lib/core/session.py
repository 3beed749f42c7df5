"""The context an axis runs in: resolved parameters, its run folder and the target — alone or inside a batch.

The openers the notebooks call first (`open_axis`, `open_summary`) are `k3lib.opening.axis`: they also install the
notebook's views, which sit above every axis.

A notebook works three ways with the same cells: in the batch (the runner passes the run folder and the
resolved `params.json`, the target already pinned), alone under papermill, and cell by cell in JupyterLab
(both of which create a run folder and, when the parameters name no target URL, start the embedded emulator).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Protocol

from . import progress
from .errors import BadInputError
from .evidence import EvidenceRecord, read_records
from .params import Params, load_any
from .store import MANIFEST, RunStore, utc_now
from .target import Target

__all__ = ["PROJECT_ROOT", "AxisContext", "adopt_folder", "find_path", "open_run", "open_run_folder",
           "outputs_dir", "read_records", "write_record"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
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


class JudgeContext(Protocol):
    """What an axis' judge reads of its context: the resolved parameters and the run folder, never the target (a
    judge sends nothing). An `AxisContext` is one; the re-judge (`k3lib.verdict.rejudge`) builds one from a stored
    run."""

    @property
    def params(self) -> Params: ...

    @property
    def store(self) -> RunStore: ...


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
        """Stamp timing and target onto the axis record and write `evidence/<axis>.json` atomically; the axis'
        progress ends there."""
        written = write_record(self.store, record, started_at=self.started_at, t0=self._t0,
                               target=self.target.base_url)
        reporter = progress.current()
        if reporter is not None and reporter.axis == self.axis:
            reporter.close()
            progress.set_current(None)
        return written

    def __repr__(self) -> str:
        return f"AxisContext(axis={self.axis!r}, run={str(self.store.root)!r}, target={self.target!r})"


# -- shared by both batches' sessions (acceptance here, renewal in k3lib.renewal.notebook) ------------------------------

def open_run_folder(run_dir: str | Path = "", label: str = "") -> RunStore:
    """The run folder named by `run_dir` (a run folder, or an empty or new folder to create one in), or a new one
    under outputs/ when `run_dir` is empty. A folder with other content is refused: it is not a run folder."""
    if not run_dir:
        return RunStore.create(outputs_dir(), label=label)
    root = Path(run_dir)
    if (root / MANIFEST).exists():
        return RunStore.open(root)
    if root.exists() and any(root.iterdir()):
        raise BadInputError("exists and is not a k3kit run folder (no manifest.json)", source=str(root))
    return RunStore.create_at(root)


def write_record(store: RunStore, record: EvidenceRecord, *, started_at: str, t0: float,
                 target: str | None) -> EvidenceRecord:
    """Stamp timing and the target (or the data source) onto an axis record, unless the record already names them,
    and write `evidence/<axis>.json` atomically. Returns the stamped record."""
    record = record.model_copy(update={
        "started_at": record.started_at or started_at,
        "finished_at": utc_now(),
        "duration_s": round(time.monotonic() - t0, 3),
        "target": record.target or target,
    })
    store.write_json(f"evidence/{record.axis}.json", record.model_dump(mode="json"))
    return record


def adopt_folder(store: RunStore, rel: str) -> list[str]:
    """Hash every file of a folder inside the run (written there by someone else) into the manifest."""
    adopted = [f"{rel}/{f.name}" for f in sorted(store.path(rel).iterdir()) if f.is_file()]
    for name in adopted:
        store.adopt(name)
    return adopted


def open_run(params_file: str, overrides: list[str] | None = None, run_dir: str = "") -> tuple[Params, RunStore]:
    params = load_any(find_path(params_file), list(overrides or []))
    return params, open_run_folder(run_dir, params.run.label)

