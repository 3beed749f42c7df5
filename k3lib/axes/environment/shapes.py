"""The JSON shapes the environment axis builds and keeps, as TypedDicts (nothing changes at run time): the topology a
re-validation compares and one row of the seed's evidence table (the server's answers: sources.ServerAnswers).
`JsonValue` (pydantic's) types what truly is arbitrary JSON: a `/v1/models` card, a request body."""

from __future__ import annotations

from typing import TypedDict




class TopologyRow(TypedDict):
    """GPU count and parallel sizes as the server was started (judge.topology; core.evidence.Topology reads it)."""

    tensor_parallel_size: int | None
    pipeline_parallel_size: int | None
    data_parallel_size: int | None
    gpu_count: int | None


#: One row of the seed's evidence table (judge.table_rows): its columns are judge.COLUMNS, then the findings.
TableRow = TypedDict("TableRow", {
    "item": str, "level": str, "observed": str, "proof kept": str, "expected": str, "status": str,
    "decision on mismatch": str, "finding": str, "rules": list[str]})
