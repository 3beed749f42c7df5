"""The JSON shapes the paths comparison reads and writes, as TypedDicts (nothing changes at run time): the task set's
request part as hashed, one request line of `paths/requests.jsonl`, the record file's envelope. `JsonValue`
(pydantic's) types what truly is arbitrary JSON: a chat message, a JSON Schema, a tool result, a `response_format`."""

from __future__ import annotations

from typing import TypedDict

from ...core.jsonvalue import JsonObject, JsonValue



class TaskSetRequest(TypedDict):
    """What the paths are asked, hashed as the task set (tasks.TaskSet.request_part): tasks without their rules."""

    name: str
    version: int | str
    tools: list[JsonObject]
    tasks: list[JsonObject]


class SentCall(TypedDict):
    """A tool call as a request line keeps it."""

    name: str
    arguments: JsonValue


class RequestLine(TypedDict):
    """One request of one path, as `paths/requests.jsonl` keeps it (run.PathRunner._log)."""

    path: str
    task: str
    round: int
    attempt: int
    ok: bool
    http_status: int | None
    error_kind: str | None
    error: str
    ttft_ms: float | None
    e2e_ms: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None
    content: str
    tool_calls: list[SentCall]


class RecordFile(TypedDict):
    """`evidence/paths.json`: the schema id and the result as dumped (record.record_data)."""

    schema: str
    result: JsonObject
