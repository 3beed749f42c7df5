"""The client's values: one request becomes one frozen `ChatRecord` (timing marks, usage, content, tool calls, the
error that ended it); a probe of an endpoint one `ProbeRecord`; a `/tokenize` answer one `TokenizeResult`."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypedDict, cast

from pydantic import SerializationInfo, SkipValidation, computed_field, field_serializer

from k3lib.core.record import Record
from k3lib.io.chatstream import PARSE, ToolCall
from k3lib.io.shapes import AskedFields

#: How much of an error or probe body is kept as text (the whole JSON of a successful reply is always kept).
BODY_TEXT_LIMIT_CHARS = 4096

# ---------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------


#: `ChatRecord.model_dump(context=WITHOUT_RAW)`: the record with its raw reply left out (`raw_json`, `raw_lines` None)
WITHOUT_RAW: Final = {"raw": False}


class ChatRecord(Record):
    """What the client saw for one chat request, written as `model_dump()` (its fields, then what is derived from
    them: `ok`, `ttft_ms`, `itl_ms`, `e2e_ms`, `client_queue_ms`, `tpot_ms`, `sent_wall_ns`), or
    `model_dump(context=WITHOUT_RAW)` without the raw reply; its tool calls as their fields alone.

    All `*_ns` marks are `time.perf_counter_ns()` values; `wall_anchor_ns` (`time.time_ns()`) was taken at the
    same instant as `perf_anchor_ns`, so `wall_ns(mark)` places any mark on the Prometheus/NVML time axis.
    `enqueued_ns` is when the caller handed the request over (or the time it gives as `enqueued_ns`);
    `sent_ns` when the request headers started onto the wire. TTFT, ITL and e2e are measured from `sent_ns`;
    the wait before it is `client_queue_ms`, reported apart (vllm#54101).
    """

    request_id: str
    url: str
    stream: bool
    wall_anchor_ns: int
    perf_anchor_ns: int
    enqueued_ns: int
    sent_ns: int | None = None
    first_byte_ns: int | None = None
    first_content_ns: int | None = None
    first_reasoning_ns: int | None = None
    first_tool_call_ns: int | None = None
    last_token_ns: int | None = None
    done_ns: int | None = None
    #: perf marks of the SSE events that carried output (content, reasoning or a tool-call delta)
    output_chunk_ns: tuple[int, ...] = ()
    #: every SSE data event, output or not (role-only first delta, usage chunk…)
    chunk_count: int = 0
    connect_ms: float | None = None
    http_status: int | None = None
    model: str | None = None
    response_id: str | None = None
    system_fingerprint: str | None = None
    finish_reason: str | None = None
    content: str | None = None
    reasoning: str | None = None
    #: which field carried reasoning: "reasoning" (vLLM 0.12+), "reasoning_content" (≤0.14), or both
    reasoning_field: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    #: None when the server sent no `prompt_tokens_details` (vLLM ≤0.22 on a miss, or the flag is off); 0 is a miss
    cached_tokens: int | None = None
    usage_present: bool = False
    #: the full JSON reply (non-stream) — kept so the agent axis can show a failing reply raw
    raw_json: Any = None
    #: every raw `data:` payload of a stream, in order, including `[DONE]`
    raw_lines: tuple[str, ...] = ()
    error: str | None = None
    #: "APIError", "ProtocolError", "TargetUnreachable", "Timeout" or "Cancelled"
    error_kind: str | None = None
    api_error_type: str | None = None
    api_error_param: str | None = None
    cancelled: bool = False
    #: what the request asked (`asked_of`): the served reply is held to it (k3lib.axes.served); kept as asked
    asked: SkipValidation[AskedFields | None] = None

    # -- the dump ------------------------------------------------------------------------------------------

    @field_serializer("tool_calls")
    def _calls(self, calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
        return [c.model_dump(exclude=PARSE) for c in calls]

    @field_serializer("output_chunk_ns", "itl_ms")
    def _listed(self, marks: tuple[float, ...]) -> list[float]:
        return list(marks)

    @field_serializer("raw_lines")
    def _raw_lines(self, lines: tuple[str, ...], info: SerializationInfo) -> list[str] | None:
        return list(lines) if _with_raw(info) else None

    @field_serializer("raw_json")
    def _raw_json(self, raw: Any, info: SerializationInfo) -> Any:
        return copy.deepcopy(raw) if _with_raw(info) else None

    @field_serializer("asked")
    def _asked(self, asked: AskedFields | None) -> AskedFields | None:
        return copy.deepcopy(asked)

    # -- derived, in ms ------------------------------------------------------------------------------------

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return self.error is None and self.http_status == 200

    @property
    def first_token_ns(self) -> int | None:
        marks = [m for m in (self.first_content_ns, self.first_reasoning_ns, self.first_tool_call_ns)
                 if m is not None]
        return min(marks) if marks else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ttft_ms(self) -> float | None:
        """First content, reasoning or tool-call token, from send. None for a non-streamed request."""
        return _ms(self.sent_ns, self.first_token_ns)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def itl_ms(self) -> tuple[float, ...]:
        """Gaps between successive output-carrying chunks (one chunk may hold several tokens)."""
        marks = self.output_chunk_ns
        return tuple((b - a) / 1e6 for a, b in zip(marks, marks[1:]))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def e2e_ms(self) -> float | None:
        return _ms(self.sent_ns, self.done_ns)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def client_queue_ms(self) -> float | None:
        """Time between hand-over and send: our semaphore, the connection pool, TCP connect."""
        return _ms(self.enqueued_ns, self.sent_ns)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tpot_ms(self) -> float | None:
        """Mean time per output token after the first, from usage (not from chunks)."""
        if self.completion_tokens is None or self.completion_tokens < 2:
            return None
        span = _ms(self.first_token_ns, self.last_token_ns)
        return None if span is None else span / (self.completion_tokens - 1)

    def wall_ns(self, perf_mark_ns: int | None) -> int | None:
        """Convert a perf mark of this record to wall-clock nanoseconds since the epoch."""
        if perf_mark_ns is None:
            return None
        return self.wall_anchor_ns + (perf_mark_ns - self.perf_anchor_ns)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sent_wall_ns(self) -> int | None:
        """When the request was sent, on the wall clock (ns since the epoch)."""
        return self.wall_ns(self.sent_ns)


def _with_raw(info: SerializationInfo) -> bool:
    return not (isinstance(info.context, Mapping) and info.context.get("raw") is False)


@dataclass(frozen=True)
class ProbeRecord:
    """One probe of an endpoint. Failures are values here: the probe axis reports them, it does not stop."""

    url: str
    method: str
    status: int | None
    latency_ms: float | None
    body_text: str
    body_truncated: bool
    wall_ns: int
    error: str | None = None
    error_kind: str | None = None
    #: answered 2xx without a transport error (derived; `dataclasses.asdict` carries it after the fields)
    ok: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", self.error is None and self.status is not None and 200 <= self.status < 300)

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty, truncated or not JSON."""
        if self.body_truncated or not self.body_text:
            return None
        try:
            return json.loads(self.body_text)
        except ValueError:
            return None



@dataclass(frozen=True)
class TokenizeResult:
    count: int
    max_model_len: int | None
    tokens: tuple[int, ...] = ()


class RecordFields(TypedDict, total=False):
    """The `ChatRecord` fields read from a reply (`completion_fields`, `StreamAssembler.record_fields`)."""

    model: str | None
    response_id: str | None
    system_fingerprint: str | None
    usage_present: bool
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    cached_tokens: int | None
    reasoning_tokens: int | None
    finish_reason: str | None
    content: str | None
    reasoning: str | None
    reasoning_field: str | None
    tool_calls: tuple[ToolCall, ...]
    raw_lines: tuple[str, ...]
    chunk_count: int
    output_chunk_ns: tuple[int, ...]
    first_content_ns: int | None
    first_reasoning_ns: int | None
    first_tool_call_ns: int | None
    last_token_ns: int | None


class RecordError(TypedDict, total=False):
    """What ended a request (`_Attempt.fail`), as `ChatRecord` fields; the first cause is kept."""

    error: str
    error_kind: str
    cancelled: bool
    api_error_type: str | None
    api_error_param: str | None


#: The body fields that shape a reply and that the kit holds the reply to: length, sampling, tools, stream.
ASKED_FIELDS = ("max_tokens", "max_completion_tokens", "min_tokens", "ignore_eos", "temperature", "top_p", "top_k",
                "seed", "n", "tool_choice", "stream", "response_format")


#: At or above this temperature replies to one question are sampled: they must differ (k3lib.axes.served).
SAMPLED_TEMPERATURE = 0.6
_NOT_THE_QUESTION = frozenset({"stream", "stream_options", "cache_salt", "request_id", "user", "model"})


def asked_of(body: Mapping[str, Any]) -> AskedFields:
    """What one chat body asked, as the record keeps it: the reply-shaping fields sent (`ASKED_FIELDS`), the names
    of the tools offered, and `prompt_key` (sampled requests only, temperature >= `SAMPLED_TEMPERATURE`), a hash of
    everything that makes two requests the same question (the messages, tools, tool choice, sampling and length; not
    the stream mode, the salt or the request's id), so the replies to one question can be compared
    (k3lib.axes.served)."""
    out = cast(AskedFields, {k: body[k] for k in ASKED_FIELDS if k in body})
    tools = body.get("tools")
    if tools:
        out["tools"] = [str((t.get("function") or {}).get("name") if isinstance(t, Mapping) else t) for t in tools]
    temperature = body.get("temperature")
    if isinstance(temperature, (int, float)) and temperature >= SAMPLED_TEMPERATURE:
        # only where the replies are to be compared: hashing a long prompt costs the load phases' clients time
        same = {k: v for k, v in body.items() if k not in _NOT_THE_QUESTION}
        out["prompt_key"] = hashlib.blake2b(json.dumps(same, sort_keys=True, default=str).encode(),
                                            digest_size=12).hexdigest()
    return out


def _ms(start_ns: int | None, end_ns: int | None) -> float | None:
    if start_ns is None or end_ns is None:
        return None
    return (end_ns - start_ns) / 1e6


def record_of(exc: BaseException) -> ChatRecord | None:
    """The partial record a failed `chat` attached to its exception (what was received before the failure)."""
    rec = getattr(exc, "record", None)
    return rec if isinstance(rec, ChatRecord) else None
