"""The JSON shapes axis 2 sends and keeps, as `TypedDict`s (nothing changes at run time): the chat messages and the
request body it sends, and each record of `evidence/agent/` — a scenario step (`requests.jsonl`), a tool turn
(`tool_turns.jsonl`), a contract row (`contract.jsonl`) and the run summary (`run.json`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from ...io.shapes import ChatBody, ChatMessage, FunctionDef, ToolDef
from ..shapes import CrossCheckDict, JsonObject, JsonValue, Reply

__all__ = ["ChatBody", "ChatMessage", "FunctionDef", "ToolDef"]  # the io shapes this axis sends, named here too

# -- what the kit sends ---------------------------------------------------------------------------------------------


class BodyExtras(TypedDict, total=False):
    """What a contract request adds to its messages and sampling: the tools, the choice, the format asked."""

    tools: list[ToolDef]
    tool_choice: JsonValue
    response_format: JsonObject | None


# -- what the kit keeps -----------------------------------------------------------------------------------------------


class StoredCall(TypedDict):
    """One tool call as the agent and paths records store it (`ToolCall.model_dump()`): the fields and their
    parse."""

    index: int
    id: Any  # a string by contract; kept as received
    type: Any
    name: Any
    arguments: Any
    parsed: JsonValue
    json_error: str | None


class ParsedReply(TypedDict, total=False):
    """A reply as the client reads it (`scenario.parsed_reply`); a failed request keeps fewer fields, a failed tool
    turn none."""

    content: str | None
    reasoning: str | None
    reasoning_field: str | None
    finish_reason: str | None
    tool_calls: list[StoredCall]
    leaked_markup: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    usage_present: bool
    longest_silence_s: float | None


class CheckRow(TypedDict):
    """One check's outcome as the steps and turns files store it (`CheckResult.model_dump()`)."""

    check: str
    passed: bool
    detail: str


class Step(TypedDict):
    """One request of the scenario (`evidence/agent/requests.jsonl`): where it sits, what was sent, what came back,
    its parse, its checks and the client's decision."""

    level: int
    repetition: int
    seq: int
    case: str
    turn: int
    round: int
    phase: str
    request: ChatBody
    max_tokens: int | None
    context_limit: int
    temperature: float | None
    tool_choice: JsonValue
    tools: list[str]
    tool_schema: dict[str, JsonObject]
    response_format: JsonObject | None
    reply: Reply
    parsed: ParsedReply
    decision: str
    checks: list[CheckRow]
    environment: str | None
    tool_results: NotRequired[list[ChatMessage]]


class LevelRun(TypedDict):
    """One concurrency level as it ran (`run.json` `levels`)."""

    level: int
    in_flight: int
    repetitions_planned: int
    repetitions_completed: int
    requests: int
    stopped_by: str | None
    duration_s: float


class SkippedCase(TypedDict):
    case: str
    reason: str


class TurnRetry(TypedDict):
    reply: Reply
    parsed: ParsedReply
    checks: list[CheckRow]
    failure: str | None


class TurnRow(TypedDict):
    """One turn of the tool-turn series (`evidence/agent/tool_turns.jsonl`), with its one retry if it failed."""

    turn: int
    case: str
    mode: str
    level: int
    request: ChatBody
    reply: Reply
    parsed: ParsedReply
    checks: list[CheckRow]
    failure: str | None
    retry: TurnRetry | None
    recovered: bool | None


class SeriesSummary(TypedDict, total=False):
    """How the tool-turn series ran (`run.json` `series`; empty when it did not)."""

    planned: int
    completed: int
    concurrency: int
    requests: int
    stopped_by: str | None
    failed_early: bool
    duration_s: float
    turns_from: list[str]


class ModeRate(TypedDict):
    turns: int
    failures: int
    rate: float
    interval: list[float]


class FailureRateObserved(TypedDict):
    """What `agent.tool_call_failure_rate` observed over the series (`rate.failure_rate_finding`)."""

    turns: int
    planned: int
    needed: int
    failures: int
    recovered_by_retry: int
    not_recovered: int
    max_rate: float
    judged_at: float
    by_mode: dict[str, ModeRate]
    causes: dict[str, int]
    rate: NotRequired[float]
    interval: NotRequired[list[float]]


#: What a contract row saw beside its verdict (finish reason, calls, prompt tokens, ...).
ObservedValue = str | int | float | bool | list[str] | None


class ContractRow(TypedDict):
    """One result of the vendor contract check (`evidence/agent/contract.jsonl`); a row derived from the others
    (`contract_judge.derived_rows`) carries no request of its own."""

    id: str
    mode: str
    passed: bool | None
    detail: str
    observed: dict[str, ObservedValue]
    request: NotRequired[ChatBody | None]
    http_status: NotRequired[int | None]
    reply: NotRequired[Reply | None]


class ContractSheetRow(TypedDict):
    """A contract result as the sheet shows it (`contract_judge.contract_rows`)."""

    id: str
    mode: str
    passed: bool | None
    detail: str
    seed_item: str
    blocks: bool


class CaseRow(TypedDict):
    """One case as the record keeps it (`judge.case_rows`)."""

    case: str
    title: str
    status: str
    runs: int
    failed_runs: int
    requests: int
    failing_checks: str
    evidence: str
    usual_decision: str


class ContextGrowth(TypedDict):
    max_prompt_tokens: int
    target_tokens: int | None
    context_limit: int | None


class SampleCase(TypedDict):
    id: str
    title: NotRequired[str]
    turns: NotRequired[int]
    requires_images: NotRequired[bool]
    grows_context: NotRequired[bool]


class SampleSummary(TypedDict, total=False):
    """The sample played (`run.sample_summary`): name, version, source, tools, and each case."""

    name: str
    version: int | str
    source: str
    tools: list[str]
    cases: list[SampleCase]


class SettingsRow(TypedDict, total=False):
    """`RunSettings.model_dump()` as `run.json` keeps it (an older run's may lack a field)."""

    levels: Sequence[int]
    repetitions: int
    stream_modes: Sequence[str]
    max_requests: int
    max_duration_s: float
    request_timeout_s: float
    max_tool_rounds: int
    context_limit: int
    max_output_tokens: int
    images_served: bool
    long_context_tokens: int
    min_pass_rate: float
    sample_source: str
    history: str
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    thinking: bool | None
    tool_turns: int
    tool_turns_needed: int
    max_tool_call_failure_rate: float
    contract_check: bool
    client_stream_modes: Sequence[str]
    client_reasoning_field: str | None
    sampling_pinned: bool
    client_idle_timeout_s: float | None
    gateway_timeout_s: float | None
    e2e_p95_ms: float | None
    spec_decode_min_acceptance_length: float | None


class SpecDecode(TypedDict, total=False):
    """The spec-decode counters' deltas over the run, or why they could not be read."""

    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    error: str


class StrictStatement(TypedDict):
    source: str
    value: str


class ToolStrict(TypedDict):
    """`--tool-strict-level` and `VLLM_ENFORCE_STRICT_TOOL_CALLING` as the server log states them."""

    log_read: bool
    statements: list[StrictStatement]


class ServingRow(TypedDict, total=False):
    tool_strict: ToolStrict


class ServedCounters(TypedDict, total=False):
    """The server's request and token counters over the whole run against the kit's requests (empty when an older
    run recorded none)."""

    cross_check: CrossCheckDict | None
    error: str | None
    requests: int


class AgentRun(TypedDict):
    """`evidence/agent/run.json`."""

    settings: SettingsRow
    sample: SampleSummary
    levels: list[LevelRun]
    skipped: list[SkippedCase]
    series: SeriesSummary
    spec_decode: SpecDecode
    serving: ServingRow
    served: ServedCounters
    stopped: str | None
