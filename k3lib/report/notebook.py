"""What a notebook opens first: its context (parameters, run folder, target) and its views.

The openers sit above the axes and the views: they install the notebook's display set-up (`k3lib.report.views`), so
the data model never imports the presentation. The context itself is `k3lib.core.session`.
"""

from __future__ import annotations

from . import views
from ..core import progress
from ..core.params import Params
from ..core.session import AxisContext, open_run
from ..core.store import RunStore
from ..core.target import pin_target
from ..io.target import resolve_target


def open_axis(axis: str, params_file: str, overrides: list[str] | None = None, run_dir: str = "",
              interactive: bool = False) -> AxisContext:
    """The first call of every axis notebook."""
    views.install()
    params, store = open_run(params_file, overrides, run_dir)
    target = resolve_target(params)
    if not store.path("params.json").exists():
        store.write_json("params.json", pin_target(params, target).public_dict())
    progress.set_current(progress.AxisProgress(axis, store.root, estimate_s=_estimate_s(store, params, axis),
                                               show=interactive))
    return AxisContext(axis=axis, params=params, store=store, target=target, interactive=interactive)


def _estimate_s(store: RunStore, params: Params, axis: str) -> float | None:
    """The axis' seconds as the batch planned them (`plan.json`), else estimated here at a default speed."""
    from ..axes.estimate import axis_estimate_s

    plan = store.read_json("plan.json") if store.path("plan.json").is_file() else None
    for entry in (plan or {}).get("axes", []) if isinstance(plan, dict) else []:
        if isinstance(entry, dict) and entry.get("axis") == axis and isinstance(entry.get("seconds"), (int, float)):
            return float(entry["seconds"])
    try:
        return axis_estimate_s(params, axis, None, embedded=params.target.uses_emulator)
    except Exception:  # noqa: BLE001 - a sample that cannot be read is the axis' own error to report, not here
        return None


def open_summary(params_file: str, overrides: list[str] | None = None, run_dir: str = "") -> tuple[Params, RunStore]:
    """The summary notebook reads evidence only; it never starts or calls a target."""
    views.install()
    return open_run(params_file, overrides, run_dir)
