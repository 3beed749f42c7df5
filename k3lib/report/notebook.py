"""What a notebook opens first: its context (parameters, run folder, target) and its views.

The openers sit above the axes and the views: they install the notebook's display set-up (`k3lib.report.views`), so
the data model never imports the presentation. The context itself is `k3lib.core.session`.
"""

from __future__ import annotations

from . import views
from ..core.params import Params
from ..core.session import AxisContext, open_run
from ..core.store import RunStore
from ..core.target import pin_target, resolve_target


def open_axis(axis: str, params_file: str, overrides: list[str] | None = None, run_dir: str = "",
              interactive: bool = False) -> AxisContext:
    """The first call of every axis notebook."""
    views.install()
    params, store = open_run(params_file, overrides, run_dir)
    target = resolve_target(params)
    if not store.path("params.json").exists():
        store.write_json("params.json", pin_target(params, target).public_dict())
    return AxisContext(axis=axis, params=params, store=store, target=target, interactive=interactive)


def open_summary(params_file: str, overrides: list[str] | None = None, run_dir: str = "") -> tuple[Params, RunStore]:
    """The summary notebook reads evidence only; it never starts or calls a target."""
    views.install()
    return open_run(params_file, overrides, run_dir)
