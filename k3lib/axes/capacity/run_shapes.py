"""The JSON shapes of a capacity run's description (`evidence/capacity/run.json`, rewritten after each phase) and of
what the judge derives from it, as TypedDicts: the phases, the watch, the calibration, the cold load, the long-context
lengths, the session phase, the OOM event, the roofline (the load windows' shapes are in `shapes`; the plan is
`shape.CapacityPlan`'s own dump)."""

from __future__ import annotations

from typing import TypedDict

from ...core.jsonvalue import JsonObject, JsonValue

from ...core.evidence import FindingStatus
from ...io.calibration import CalibrationDict
from ...io.sessions.replay import TurnRecord
from .shapes import ClientStats, MemoryAt, MemoryPoint, SoakRow, StepRow, WindowNumbers


class PhaseRow(TypedDict, total=False):
    """One phase of the run (core.evidence.CapacityPhase, dumped)."""

    phase: str
    start_wall: float | None
    end_wall: float | None
    status: str
    note: str


class HealthRow(TypedDict):
    """One health poll (state.Recorder.poll_health)."""

    t_wall: float
    phase: str
    status: int | None
    latency_ms: float | None
    error: str | None
    endpoint: str


class FailureRow(TypedDict):
    """The first failure the watch saw (state.Recorder.note_failure, check_alive)."""

    via: str
    t_wall: float
    phase: str
    step: str | None
    in_flight: int
    request_id: str | None
    http_status: int | None
    error: str | None


class Watch(TypedDict):
    """The watch's part of the run description (state.Recorder.watch)."""

    health: list[HealthRow]
    failure: FailureRow | None
    dead: bool
    notes: list[str]


class KnownTiming(TypedDict):
    """The schedule the known-timing server follows (trust.known_timing)."""

    known_ttft_ms: float
    known_itl_ms: float
    chunks: int
    basis: str


class CalibrationSummary(TypedDict):
    """The few numbers of one calibration report a reader looks at first (trust.calibration_summary)."""

    concurrency: int
    valid: bool
    reason: str | None
    ok: int
    requests: int
    ttft_error_ms_p99: float | None
    itl_error_ms_p99: float | None
    delivery_ms_p99: float | None
    loop_lag_ms_p99: float | None
    max_error_ms: float


class CalibrationData(TypedDict, total=False):
    """The self-calibration as the run description keeps it (calibration.calibrate, not_run)."""

    enabled: bool
    ran: bool
    note: str
    server: str
    workers: int
    start_wall: float
    end_wall: float
    known_ttft_ms: float
    known_itl_ms: float
    chunks: int
    basis: str
    max_error_ms: float
    error: str | None
    summary: list[CalibrationSummary]
    reports: list[CalibrationDict]  # k3lib.io.calibration.calibration_dict, as it writes them


#: A setting as a source states it: a number where it reads as one, else its text (server._as_number), or a flag.
ConfigValue = int | float | str | bool | None


class ServerConfig(TypedDict):
    """The server's configuration as its log, cache_config_info and model card state it (server.server_config)."""

    values: dict[str, ConfigValue]
    sources: dict[str, str]


class DecodeRate(TypedDict):
    """One concurrency step's measured decode rates (roofline.measured_rates)."""

    concurrency: int
    requests: int
    per_sequence_tokens_per_s: float | None
    summed_tokens_per_s: float | None


class RooflineBound(TypedDict, total=False):
    """The per-sequence decode bound with every figure it rests on and where each came from (roofline.bound)."""

    gpu: str | None
    gpu_source: str | None
    gpu_shown: str | None
    hbm_table_tb_s: float | None
    tensor_parallel_size_source: str
    pipeline_parallel_size_source: str
    data_parallel_size_source: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    hbm_tb_s: float
    hbm_source: str
    known: bool
    why: str
    weight_dtype: str
    bytes_per_param: float
    active_params_b: float
    active_params_source: str
    bytes_per_token: float
    per_sequence_tokens_per_s: float
    arithmetic: str


class Roofline(TypedDict):
    """The bound, the measured rates and the judgement (roofline.roofline)."""

    bound: RooflineBound
    rates: list[DecodeRate]
    status: FindingStatus
    text: str
    above: list[str]
    min_share: float


class RestartRow(TypedDict, total=False):
    """The operator's restart command as the cold load ran it, and its observed effect (coldload.cold_load)."""

    command: str | None
    ok: bool | None
    detail: str
    returned_after_s: float
    effect: str


class ReadyRow(TypedDict, total=False):
    """The cold load's readiness (coldload.cold_load): empty when the phase did not run."""

    ready: bool
    observed_transition: bool
    restart: RestartRow
    polls: int
    ready_at_wall: float | None
    waited_s: float
    last_status: int | None
    last_error: str | None
    memory_at_ready: list[MemoryAt]


class LengthRow(ClientStats, WindowNumbers, total=False):
    """One planned length of the long-context phase (longcontext._one_length), or one skipped."""

    target_tokens: int
    prompt_tokens: int | None
    sized_by: str
    output_tokens: int
    status: str
    note: str
    start_wall: float
    end_wall: float
    engine_alive_after: bool
    error: str | None


class LevelRow(ClientStats, WindowNumbers, total=False):
    """One level of the session phase as it ended (sessions._session_level): its window, client numbers, the server's
    counters over it and the turns' own cached tokens."""

    sessions: int
    status: str
    note: str
    start_wall: float
    end_wall: float
    turns: int
    sessions_started: int
    sessions_finished: int
    engine_alive_after: bool
    prefix_cache_hits: float | None
    prefix_cache_queries: float | None
    usage_cached_tokens: int
    resumed: dict[str, str | int]


class CurrentLevel(TypedDict):
    """The level in progress (sessions._session_level): its size, the sessions that ended, the generator's next
    number."""

    sessions: int | None
    finished: list[str]
    next: int


class SessionsRow(TypedDict, total=False):
    """The session phase as the run description keeps it (sessions.SessionRun.describe)."""

    source: str
    planned_sessions: int
    levels: list[LevelRow]
    longest_exchange_tokens: int
    shared_prefix_tokens: int | None
    chars_per_token: float | None
    current: CurrentLevel


class SessionSummary(SessionsRow, total=False):
    """What the evidence record keeps of the session phase (sessionjudge.session_summary)."""

    turn_count: int
    turns: list[SessionTurnRow]


Unit = StepRow | SoakRow | LevelRow | LengthRow  # what a phase's figure marks: its steps, soak, levels or lengths


class RefusalRow(TypedDict, total=False):
    """The out-of-contract probe: a prompt beyond the contract's context limit, and what the server did with it
    (longcontext._refusal_probe; `outcome` alone when the phase did not run)."""

    outcome: str
    reason: str
    prompt_tokens: int | None
    sized_by: str
    contract_limit_tokens: int
    http_status: int | None
    message: str
    context_message: bool
    engine_alive_after: bool
    start_wall: float
    end_wall: float
    e2e_ms: float | None


class RunJson(TypedDict, total=False):
    """`evidence/capacity/run.json`: the run description (run.CapacityRunner.describe), rewritten after each phase."""

    plan: JsonObject  # shape.CapacityPlan, dumped
    target: str
    gpu_source: str | None
    gpu_driver: str | None
    phases: list[PhaseRow]
    steps: list[StepRow]
    long_context: list[LengthRow]
    refusal: RefusalRow
    ready: ReadyRow
    health: list[HealthRow]
    failure: FailureRow | None
    dead: bool
    soak: SoakRow | None
    notes: list[str]
    calibration: CalibrationData
    model_card: dict[str, JsonValue] | None  # the served model's /v1/models card
    cache_config_info: dict[str, str]
    config: ServerConfig
    log_error: str | None
    sampler_errors: dict[str, list[str]]
    files: dict[str, str | None]
    sessions: SessionsRow | None


class TrafficCapRow(TypedDict, total=False):
    """The concurrency a run can justify (judge.traffic_cap; core.evidence.TrafficCap validates it)."""

    max_concurrency: int | None
    saturation_point: int
    planned_concurrency: int
    basis: str


class OomEventRow(TypedDict, total=False):
    """The memory failure of a run, assembled from the client's first failure, the health polls and the server log
    (result.oom_event)."""

    kind: str
    phase: str | None
    step: str | None
    in_flight: int | None
    at_wall: float | None
    via: str
    first_error: str | None
    classification: dict[str, str] | None
    log_verdict: dict[str, str | int | None] | None
    log_line: int | None
    log_text: str | None
    lines_before: list[str]
    log_time: str | None
    log_collected_at: str | None
    log_time_wall: float | None
    memory_around: list[MemoryPoint]


class SessionTurnRow(TurnRecord, total=False):
    """One session turn of `sessions.jsonl`: the replay's record (k3lib.io.sessions.replay.turn_record, with the level
    it was played at) and the server's series around it."""

    # aligned with the server's series (sessionjudge.align)
    kv_usage_max: float | None
    running_max: float | None
    waiting_max: float | None
    preemptions_around: float | None
