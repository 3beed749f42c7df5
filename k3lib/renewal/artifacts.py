"""The creative pipeline check: from the manifest a pipeline writes (audio, video, design), are its intermediate
artifacts recoverable — no partial files, metadata present, names as declared, steps in order, and only the failed
step to re-run? Findings are values; a manifest that cannot be read is a BadInputError.

Manifest (JSON): {"pipeline": str, "steps": [{"name", "order", "status": done|failed|pending, "depends_on": [...],
"rerun": argv-or-null, "outputs": [{"path", "bytes", "sha256"?, "metadata": {...}}]}]}; paths relative to it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from ..core.errors import BadInputError
from .drillshapes import PipelineCheckData

_TEMP_SUFFIXES = (".partial", ".tmp", ".part", ".crdownload", ".incomplete")


class PipelineOutput(TypedDict, total=False):
    path: str
    bytes: int
    sha256: str
    metadata: Any  # the pipeline's own metadata, as it wrote it (only its presence is checked)


class _StepName(TypedDict):
    name: str


class PipelineStep(_StepName, total=False):
    order: int
    status: str  # done, failed or pending
    depends_on: list[str]
    rerun: list[str] | str | None  # the step's own re-run command
    outputs: list[PipelineOutput]


class PipelineManifest(TypedDict):
    """The manifest a creative pipeline writes (`artifacts.read_manifest` checks its steps' names)."""

    pipeline: NotRequired[str]
    steps: list[PipelineStep]


def _finding(check: str, status: str, message: str, **evidence: list[str]) -> PipelineCheckData:
    return {"check": check, "status": status, "message": message, "evidence": evidence}


def read_manifest(path: str | Path) -> PipelineManifest:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInputError("file not found; expected a pipeline manifest (JSON)", source=str(p)) from None
    except (OSError, ValueError) as exc:
        raise BadInputError(f"not a JSON pipeline manifest ({exc})", source=str(p)) from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in data["steps"]):
        raise BadInputError("expected {\"steps\": [{\"name\": …, \"order\": …, \"outputs\": […]}, …]}",
                            source=str(p), field="steps")
    return cast(PipelineManifest, data)  # its steps' names checked; the rest read tolerantly


def check_pipeline(manifest_path: str | Path) -> list[PipelineCheckData]:
    """Five findings (partial files, metadata, names, step order, re-run), each pass / fail with its evidence."""
    root = Path(manifest_path).parent
    steps = read_manifest(manifest_path)["steps"]
    outputs = [(s["name"], o) for s in steps for o in (s.get("outputs") or [])]
    partial, no_meta, bad_names = [], [], []
    for step, out in outputs:
        rel = str(out.get("path", ""))
        f = root / rel
        if step_status(steps, step) != "done":
            continue  # a failed step's outputs are expected to be incomplete; its re-run replaces them
        if not f.is_file() or f.stat().st_size == 0 or rel.endswith(_TEMP_SUFFIXES):
            partial.append(rel)
        elif out.get("bytes") is not None and f.stat().st_size != out["bytes"]:
            partial.append(rel)
        elif out.get("sha256") and hashlib.sha256(f.read_bytes()).hexdigest() != out["sha256"]:
            partial.append(rel)
        if not out.get("metadata"):
            no_meta.append(rel)
    declared = [str(o.get("path", "")) for _, o in outputs]
    dupes = sorted({n for n in declared if declared.count(n) > 1})
    stray = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                   and p.name != Path(manifest_path).name and str(p.relative_to(root)) not in declared)
    bad_names = dupes + [s for s in stray if s.endswith(_TEMP_SUFFIXES)]
    orders: list[Any] = [s.get("order") for s in steps]  # as the manifest wrote them: compared, never trusted
    names = [s["name"] for s in steps]
    order_ok = orders == sorted(orders) and orders == list(range(1, len(steps) + 1))
    for s in steps:
        for dep in s.get("depends_on") or []:
            if dep not in names or names.index(dep) >= names.index(s["name"]):
                order_ok = False
    failed = [s for s in steps if s.get("status") == "failed"]
    rerun_ok, rerun_msg = True, "no failed step"
    for s in failed:
        deps_done = all(step_status(steps, d) == "done" for d in s.get("depends_on") or [])
        rerun = s.get("rerun")
        if not rerun or not deps_done:
            rerun_ok = False
            rerun_msg = (f"step {s['name']} has no re-run command of its own" if not rerun
                         else f"step {s['name']} depends on a step that is not done: the chain must re-run")
        else:
            rerun_msg = f"step {s['name']} re-runs alone: {rerun}"
    return [
        _finding("partial-files", "fail" if partial else "pass",
                 f"{len(partial)} finished output(s) missing, empty, truncated or temporary: {', '.join(partial)}"
                 if partial else "every finished output is complete", files=partial),
        _finding("metadata", "fail" if no_meta else "pass",
                 f"outputs without metadata: {', '.join(no_meta)}" if no_meta else "every output carries metadata",
                 files=no_meta),
        _finding("output-names", "fail" if bad_names else "pass",
                 f"duplicate or temporary output names: {', '.join(bad_names)}" if bad_names
                 else "output names are unique and as declared", files=bad_names, undeclared=stray),
        _finding("step-order", "pass" if order_ok else "fail",
                 "steps numbered 1…n, each after the steps it depends on" if order_ok
                 else f"step order broken: orders {orders}, dependencies must point to earlier steps"),
        _finding("rerun-failed-step-only", "pass" if rerun_ok else "fail", rerun_msg),
    ]


def step_status(steps: list[PipelineStep], name: str) -> str:
    return next((str(s.get("status", "pending")) for s in steps if s["name"] == name), "missing")
