"""The JSON shapes the environment axis builds and keeps, as TypedDicts (nothing changes at run time): the server's own
answers as read from their texts, the topology a re-validation compares, and one row of the seed's evidence table.
`JsonValue` (pydantic's) types what truly is arbitrary JSON: a `/v1/models` card, a request body."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from pydantic import JsonValue

if TYPE_CHECKING:
    from .sources import ToolChoiceProbe

#: A JSON object whose keys the kit does not fix (a `/v1/models` card, a probe's request body).
JsonObject = dict[str, JsonValue]


class ServerAnswers(TypedDict, total=False):
    """What the server's own answers say (sources.server_answers): `/version`, `/v1/models`, the chat reply and the
    auto-tool-choice probe."""

    api_version: str | None
    models: tuple[JsonObject, ...]
    fingerprint: str | None
    chat_reasoning: bool
    tool_probe: ToolChoiceProbe


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
