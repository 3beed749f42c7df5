"""The JSON shapes the axes read and write, as `TypedDict`s (nothing changes at run time): a chat request's record as
the client stores it (`k3lib.io.client.ChatRecord.to_dict`), what it asked, the server's counters against the
client's (`k3lib.io.crosscheck.CrossCheck.model_dump`), and the asked-vs-served verdict (`k3lib.axes.served`).

`JsonValue` (`k3lib.core.jsonvalue`) types what truly is arbitrary JSON: a tool's arguments, a JSON Schema, a
server's body."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from typing_extensions import ReadOnly

from ..core.jsonvalue import JsonObject, JsonValue
from ..io.crosscheck import CrossCheckDict
from ..io.shapes import AskedFields

# the lower floors' shapes the axes read through this module
__all__ = ["AskedFields", "CrossCheckDict", "JsonObject", "JsonValue"]


class RecordedCall(TypedDict):
    """One tool call as a chat record stores it (`ToolCall.model_dump(exclude=PARSE)`): the fields as
    received."""

    index: int
    id: Any  # a string by contract; kept as received
    type: Any
    name: Any
    arguments: Any


class Reply(TypedDict):
    """One chat request as the client recorded it (`ChatRecord.model_dump()`)."""

    request_id: str
    url: str
    stream: bool
    wall_anchor_ns: int
    perf_anchor_ns: int
    enqueued_ns: int
    sent_ns: int | None
    first_byte_ns: int | None
    first_content_ns: int | None
    first_reasoning_ns: int | None
    first_tool_call_ns: int | None
    last_token_ns: int | None
    done_ns: int | None
    output_chunk_ns: list[int]
    chunk_count: int
    connect_ms: float | None
    http_status: int | None
    model: str | None
    response_id: str | None
    system_fingerprint: str | None
    finish_reason: str | None
    content: str | None
    reasoning: str | None
    reasoning_field: str | None
    tool_calls: list[RecordedCall]
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    reasoning_tokens: int | None
    cached_tokens: int | None
    usage_present: bool
    raw_json: JsonValue
    raw_lines: list[str] | None
    error: str | None
    error_kind: str | None
    api_error_type: str | None
    api_error_param: str | None
    cancelled: bool
    asked: AskedFields | None
    ok: bool
    ttft_ms: float | None
    itl_ms: list[float]
    e2e_ms: float | None
    client_queue_ms: float | None
    tpot_ms: float | None
    sent_wall_ns: int | None


# -- asked vs served (k3lib.axes.served) --------------------------------------------------------------------------


class LengthDeviation(TypedDict):
    request_id: str | None
    asked: int
    served: int
    finish_reason: str | None


class LengthCheck(TypedDict):
    checked: int
    no_usage: int
    deviations: int
    examples: list[LengthDeviation]
    served_min: int | None
    served_max: int | None
    text: NotRequired[str]


class RepeatCheck(TypedDict):
    questions: int
    compared: int
    byte_identical: int
    same_response_id: int
    deviates: bool
    text: NotRequired[str]


class CountersCheck(TypedDict):
    agrees: bool | None
    text: NotRequired[str]
    disagreements: NotRequired[list[str]]
    compared: NotRequired[list[str]]


ServedStatus = Literal["as-asked", "deviates", "not-observable"]


class ServedReason(TypedDict, total=False):
    """What opens a class' passing findings (`open_findings`): its served status and why (a `ServedVerdict`, or
    only these two, or nothing where the class has no verdict)."""

    status: ReadOnly[ServedStatus]
    reason: ReadOnly[str]


class ServedVerdict(TypedDict):
    """The three comparisons over one class' replies (`served_verdict`)."""

    status: ServedStatus
    reason: str
    fields: list[str]
    length: LengthCheck
    sampling: RepeatCheck
    counters: CountersCheck
