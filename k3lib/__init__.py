"""k3kit's library: drives requests, collects metrics and GPU data, checks contracts and decides.

Names are imported on first use (PEP 562), so `k3 --help` and `k3 inspect` start without loading every axis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._deferred import defer_rfc3987_syntax

defer_rfc3987_syntax()  # seconds per notebook kernel otherwise (see k3lib/_deferred.py)

# public name → module that defines it (a subpackage is named by itself)
_EXPORTS: dict[str, str] = {
    "APIError": ".errors",
    "ArtifactError": ".errors",
    "AxisContext": ".session",
    "BadInputError": ".errors",
    "Decision": ".decision",
    "EvidenceError": ".errors",
    "EvidenceRecord": ".evidence",
    "Finding": ".evidence",
    "K3Error": ".errors",
    "MissingSeriesError": ".errors",
    "Params": ".params",
    "ProtocolError": ".errors",
    "RunStore": ".store",
    "TargetError": ".errors",
    "TargetUnreachable": ".errors",
    "agent": ".agent",
    "capacity": ".capacity",
    "compat": ".compat",
    "decide": ".decision",
    "decide_run": ".summary",
    "explorer": ".explorer",
    "findings_table": ".summary",
    "load_params": ".params",
    "open_axis": ".notebook",
    "open_summary": ".notebook",
    "operations": ".operations",
    "paths": ".paths",
    "prefix": ".prefix",
    "probe_record": ".probe",
    "read_records": ".evidence",
    "records_table": ".summary",
    "renewal": ".renewal",
    "run_probe": ".probe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'k3lib' has no attribute {name!r}")
    module = importlib.import_module(module_name, __name__)
    value = module if module_name == f".{name}" else getattr(module, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from . import agent, capacity, compat, explorer, operations, paths, prefix, renewal
    from .decision import Decision, decide
    from .errors import (APIError, ArtifactError, BadInputError, EvidenceError, K3Error, MissingSeriesError,
                         ProtocolError, TargetError, TargetUnreachable)
    from .evidence import EvidenceRecord, Finding, read_records
    from .params import Params, load_params
    from .probe import probe_record, run_probe
    from .notebook import open_axis, open_summary
    from .session import AxisContext
    from .store import RunStore
    from .summary import decide_run, findings_table, records_table
