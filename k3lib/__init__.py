"""k3kit's library: drives requests, collects metrics and GPU data, checks contracts and decides.

Names are imported on first use (PEP 562), so `k3 --help` and `k3 inspect` start without loading every axis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name → module that defines it (a subpackage is named by itself)
_EXPORTS: dict[str, str] = {
    "AcceptanceDecision": ".verdict.decision",
    "APIError": ".core.errors",
    "ArtifactError": ".core.errors",
    "AxisContext": ".core.session",
    "BadInputError": ".core.errors",
    "EvidenceError": ".core.errors",
    "EvidenceRecord": ".core.evidence",
    "Finding": ".core.evidence",
    "K3Error": ".core.errors",
    "MissingSeriesError": ".core.errors",
    "Params": ".core.params",
    "ProtocolError": ".core.errors",
    "RunStore": ".core.store",
    "TargetError": ".core.errors",
    "TargetUnreachable": ".core.errors",
    "agent": ".axes.agent",
    "capacity": ".axes.capacity",
    "decide": ".verdict.decision",
    "decide_run": ".verdict.assemble",
    "environment": ".axes.environment",
    "explorer": ".report.explorer",
    "findings_table": ".report.summary",
    "load_params": ".core.params",
    "open_axis": ".opening.axis",
    "open_summary": ".opening.axis",
    "operations": ".axes.operations",
    "paths": ".axes.paths",
    "prefix_cache": ".axes.prefix_cache",
    "probe_record": ".axes.probe",
    "read_records": ".core.evidence",
    "records_table": ".report.summary",
    "renewal": ".renewal",
    "review": ".opening.review",
    "run_probe": ".axes.probe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'k3lib' has no attribute {name!r}")
    module = importlib.import_module(module_name, __name__)
    value = module if module_name.rpartition(".")[2] == name else getattr(module, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from .axes import agent, capacity, environment, operations, paths, prefix_cache
    from .opening import review
    from .report import explorer
    from . import renewal
    from .verdict.decision import AcceptanceDecision, decide
    from .core.errors import (APIError, ArtifactError, BadInputError, EvidenceError, K3Error, MissingSeriesError,
                         ProtocolError, TargetError, TargetUnreachable)
    from .core.evidence import EvidenceRecord, Finding, read_records
    from .core.params import Params, load_params
    from .axes.probe import probe_record, run_probe
    from .opening.axis import open_axis, open_summary
    from .core.session import AxisContext
    from .core.store import RunStore
    from .report.summary import findings_table, records_table
    from .verdict.assemble import decide_run
