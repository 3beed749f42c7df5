"""k3kit's library: drives requests, collects metrics and GPU data, checks contracts and decides."""

from . import agent, capacity, compat, explorer, operations, prefix, renewal
from .decision import Decision, decide
from .errors import (APIError, ArtifactError, BadInputError, EvidenceError, K3Error, MissingSeriesError,
                     ProtocolError, TargetError, TargetUnreachable)
from .evidence import EvidenceRecord, Finding
from .params import Params, load_params
from .probe import probe_record, run_probe
from .session import AxisContext, open_axis, open_summary, read_records
from .store import RunStore
from .summary import decide_run, findings_table, records_table

__all__ = [
    "APIError",
    "ArtifactError",
    "AxisContext",
    "BadInputError",
    "Decision",
    "EvidenceError",
    "EvidenceRecord",
    "Finding",
    "K3Error",
    "MissingSeriesError",
    "Params",
    "ProtocolError",
    "RunStore",
    "TargetError",
    "TargetUnreachable",
    "agent",
    "capacity",
    "compat",
    "decide",
    "decide_run",
    "explorer",
    "findings_table",
    "load_params",
    "open_axis",
    "open_summary",
    "operations",
    "prefix",
    "probe_record",
    "read_records",
    "records_table",
    "renewal",
    "run_probe",
]
