"""What an acceptance axis notebook opens first: its context (parameters, run folder, target reached or started)
and its views. The context itself is `k3lib.core.session`."""

from __future__ import annotations

from ..axes.estimate import axis_estimate_s
from ..core import progress
from ..core.params import Params
from ..core.session import AxisContext, open_run
from ..core.store import RunStore
from ..core.target import pin_target
from ..io.target import resolve_target
from ..report import views


def open_axis(axis: str, params_file: str, overrides: list[str] | None = None, run_dir: str = "",
              interactive: bool = False) -> AxisContext:
    """The first call of every axis notebook."""
    views.install()
    params, store = open_run(params_file, overrides, run_dir)
    target = resolve_target(params)
    if not store.path("params.json").exists():
        store.write_json("params.json", pin_target(params, target).public_dict())
    seconds, planned, at_most = _planned(store, params, axis)
    progress.set_current(progress.AxisProgress(axis, store.root, estimate_s=seconds, show=interactive,
                                               planned=planned, at_most=at_most, target=target.base_url))
    return AxisContext(axis=axis, params=params, store=store, target=target, interactive=interactive)


def _planned(store: RunStore, params: Params, axis: str) -> tuple[float | None, int | None, int | None]:
    """The axis' seconds, expected requests and most requests as the batch planned them (`plan.json`: what the
    operator saw and consented to), else estimated here at a default speed (seconds only: no consent to hold)."""
    plan = store.read_json("plan.json") if store.path("plan.json").is_file() else None
    for entry in (plan or {}).get("axes", []) if isinstance(plan, dict) else []:
        if isinstance(entry, dict) and entry.get("axis") == axis and isinstance(entry.get("seconds"), (int, float)):
            planned, most = entry.get("requests"), entry.get("at_most")
            return (float(entry["seconds"]), planned if isinstance(planned, int) and planned else None,
                    most if isinstance(most, int) and most else None)
    try:
        return axis_estimate_s(params, axis, None, embedded=params.target.uses_emulator), None, None
    except Exception:  # noqa: BLE001 - a sample that cannot be read is the axis' own error to report, not here
        return None, None, None


def open_summary(params_file: str, overrides: list[str] | None = None, run_dir: str = "") -> tuple[Params, RunStore]:
    """The summary notebook reads evidence only; it never starts or calls a target."""
    views.install()
    return open_run(params_file, overrides, run_dir)
