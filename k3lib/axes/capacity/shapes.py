"""The JSON shapes the capacity axis writes to its run folder and reads back (`evidence/capacity/run.json`, its series
and request lines), and the parts its phases assemble a step or the soak from. TypedDicts: they type what is read and
written without changing a byte of it (`core.evidence.CapacityStep` is the validated record of one step; `StepRow` is
the same step as a dict, as the run description keeps it)."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from ...core.evidence import FindingStatus

#: The canonical /metrics series a sample row carries (k3lib.io.metrics.names), read by name.
SeriesName = Literal["kv_cache_usage_perc", "num_requests_running", "num_requests_waiting", "num_preemptions_total",
                     "prefix_cache_queries_total", "prefix_cache_hits_total"]


class MetricRow(TypedDict, total=False):
    """One /metrics sample (k3lib.io.metrics.sampler): when, how many endpoints answered, the canonical series and,
    with several DP ranks, each rank's own."""

    t_wall: float
    t_rel_s: float
    endpoints_ok: int
    kv_cache_usage_perc: float | None
    num_requests_running: float | None
    num_requests_waiting: float | None
    num_requests_swapped: float | None
    prefix_cache_hit_rate: float | None
    num_preemptions_total: float | None
    prefix_cache_queries_total: float | None
    prefix_cache_hits_total: float | None
    prompt_tokens_total: float | None
    generation_tokens_total: float | None
    ranks: dict[str, dict[str, float | None]]


class GpuRow(TypedDict, total=False):
    """One GPU at one moment (k3lib.io.gpu.GpuSample as a sampler row)."""

    t_wall: float
    t_rel_s: float
    host: str
    gpu: int
    uuid: str | None
    name: str | None
    fb_used_bytes: int | None
    fb_total_bytes: int | None
    util_pct: float | None
    mig_instance: str | None


class RequestRow(TypedDict, total=False):
    """One request line of `requests.jsonl`: the client's record (k3lib.io.client.ChatRecord.to_dict, without its
    raw reply) and where in the run it was sent."""

    request_id: str
    ok: bool
    phase: str
    step: str
    http_status: int | None
    error: str | None
    error_kind: str | None
    cancelled: bool
    ttft_ms: float | None
    e2e_ms: float | None
    itl_ms: list[float]
    tpot_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    sent_wall_ns: int | None
    done_wall_ns: int | None
    raw_json: Any


class Interval(TypedDict, total=False):
    """A bootstrap interval of a percentile (k3lib.core.stats.Interval.to_dict)."""

    estimate: float
    low: float
    high: float
    n: int
    confidence: float
    q: float


class AgreementItem(TypedDict):
    """One pair of measurements of a window compared (k3lib.axes.capacity.agreement)."""

    quantity: str
    server: float | None
    client: float | None
    tolerance: float | None
    agrees: bool | None
    note: str


class Agreement(TypedDict):
    """Every pair of measurements of one window compared (k3lib.axes.capacity.agreement.window_agreement)."""

    agrees: bool | None
    samples: int
    items: list[AgreementItem]
    disagreements: list[str]
    text: str


class CrossCheckItemRow(TypedDict):
    """One quantity counted by the client and by the server (k3lib.io.crosscheck.CrossCheckItem.to_dict)."""

    quantity: str
    client: float | None
    server: float | None
    tolerance: float
    unit: str
    note: str
    server_extra: float
    server_short: float
    diff: float | None
    agrees: bool | None


class CrossCheckData(TypedDict, total=False):
    """The client-vs-server cross-check as a window keeps it (k3lib.axes.capacity.trust.cross_check_data)."""

    agrees: bool | None
    counts_agree: bool | None
    disagreements: list[str]
    items: list[CrossCheckItemRow]
    error: str | None
    incomplete: dict[str, int]
    error_statuses: dict[str, int]
    by_endpoint: dict[str, dict[str, float | None]]  # metrics URL -> what its counters moved by


class ClientStats(TypedDict, total=False):
    """A window's client-side numbers (k3lib.axes.capacity.window.record_stats)."""

    sent: int
    ok: int
    server_errors: int
    refused: int
    timeouts: int
    unreachable: int
    cancelled: int
    error_statuses: dict[str, int]
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    e2e_p95_ms: float | None
    ttft_p95_interval: dict[str, float] | None  # core.stats.Interval.to_dict
    e2e_p95_interval: dict[str, float] | None
    prompt_tokens_mean: float | None
    completion_tokens_mean: float | None


class WindowNumbers(TypedDict, total=False):
    """A window's server counters and histograms between two boundary scrapes (window.window_numbers)."""

    preemptions: float | None
    server_ttft_p95_ms: float | None
    queue_p95_ms: float | None
    queue_p95_low_ms: float | None
    queue_p95_high_ms: float | None
    queue_p95_basis: str
    queue_p95_text: str
    queue_mean_ms: float | None
    queue_count: float


class SettledStats(TypedDict):
    """A step's server gauges over its settled part (analysis.settled_stats)."""

    samples: int
    waiting_mean: float | None
    waiting_max: float | None
    running_mean: float | None
    running_max: float | None
    kv_usage_mean: float | None
    kv_usage_max: float | None
    preemptions_sampled: float | None
    admit_limit: int | None
    waiting_full_mean: float | None


class Trust(TypedDict, total=False):
    """Whether a window's client latency is trusted, and its cross-check (trust.gate_step, calibration.trust)."""

    latency_valid: bool
    invalid_reason: str | None
    calibrated_at: int | None
    loop_lag_p99_ms: float | None
    cross_check: CrossCheckData
    workers: int | None
    degraded: str | None


class RankRow(TypedDict, total=False):
    """One DP rank over a window (ranks.rank_window): counter deltas, sampled gauges and its KV pool."""

    rank: str
    name: str
    endpoint: str
    engine: str
    preemptions: float | None
    generation_tokens: float | None
    prefix_queries: float | None
    prefix_hits: float | None
    hit_rate: float | None
    num_gpu_blocks: int | None
    enable_prefix_caching: str | None
    samples: int
    kv_usage_max: float | None
    kv_usage_mean: float | None
    running_mean: float | None
    waiting_mean: float | None
    waiting_max: float | None
    decode_tokens_per_s: float | None
    itl_mean_ms: float | None
    decode_tokens_per_s_per_seq: float | None


#: The per-rank figures compared across ranks by name (ranks._outliers, ranks.spread).
RankFigure = Literal["num_gpu_blocks", "decode_tokens_per_s_per_seq", "hit_rate", "preemptions", "waiting_mean",
                     "kv_usage_max", "running_mean"]


class StepRow(ClientStats, WindowNumbers, total=False):
    """One load step as the run description keeps it (core.evidence.CapacityStep, dumped with its set fields)."""

    latency_valid: bool
    invalid_reason: str | None
    calibrated_at: int | None
    loop_lag_p99_ms: float | None
    cross_check: CrossCheckData
    workers: int | None
    degraded: str | None
    concurrency: int
    label: str | None
    status: str | None
    note: str
    out_of_contract: bool
    held: bool | None
    why: list[str]
    prompt_tokens: int | None
    sized_by: str | None
    output_tokens: int | None
    start_wall: float | None
    end_wall: float | None
    engine_alive_after: bool | None
    samples: int | None
    waiting_mean: float | None
    waiting_max: float | None
    running_mean: float | None
    running_max: float | None
    kv_usage_mean: float | None
    kv_usage_max: float | None
    preemptions_sampled: float | None
    admit_limit: int | None
    waiting_full_mean: float | None
    agreement: Agreement | None
    ranks: list[RankRow] | None


class MemoryAt(TypedDict):
    """One GPU's memory at a moment (analysis.memory_at)."""

    gpu: str
    name: str | None
    t_wall: float
    used_mib: float | None
    total_mib: float | None
    used_frac: float | None


class MemoryPoint(TypedDict):
    """One GPU sample around a moment (analysis.memory_around)."""

    gpu: str
    t_rel_s: float
    used_mib: float | None


class MemoryGrowth(TypedDict):
    """One GPU's fitted memory growth over a window (analysis.memory_growth)."""

    gpu: str
    samples: int
    first_mib: float | None
    last_mib: float | None
    growth_mib: float | None
    slope_mib_per_min: float | None
    r2: float | None


class SoakAnalysis(TypedDict):
    """The soak's accumulation, eviction, fragmentation and queue signals (analysis.soak_analysis)."""

    duration_s: float
    samples: int
    memory: list[MemoryGrowth]
    memory_growing: list[str]
    kv_usage_first: float | None
    kv_usage_last: float | None
    kv_rise: float | None
    kv_accumulating: bool
    hit_rate_first: float | None
    hit_rate_last: float | None
    hit_rate_drop: float | None
    evicting: bool
    fragmentation_share: float | None
    fragmented: bool
    preemptions: float | None
    preemptions_per_min: float | None
    waiting_mean: float | None
    waiting_full_mean: float | None
    admit_limit: int | None
    queueing: bool


class SoakRow(ClientStats, Trust, total=False):
    """The soak as the run description keeps it (soak.soak): its window, client numbers, trust, ranks, analysis
    and the agreement of its measurements."""

    start_wall: float
    end_wall: float
    concurrency: int
    prompt_tokens: int | None
    shared_prefix_tokens: int
    output_tokens: int
    distinct_prompts: int
    note: str
    engine_alive_after: bool
    ranks: list[RankRow] | None
    duration_s: float
    samples: int
    memory: list[MemoryGrowth]
    memory_growing: list[str]
    kv_usage_first: float | None
    kv_usage_last: float | None
    kv_rise: float | None
    kv_accumulating: bool
    hit_rate_first: float | None
    hit_rate_last: float | None
    hit_rate_drop: float | None
    evicting: bool
    fragmentation_share: float | None
    fragmented: bool
    preemptions: float | None
    preemptions_per_min: float | None
    waiting_mean: float | None
    waiting_full_mean: float | None
    admit_limit: int | None
    queueing: bool
    agreement: Agreement
    held: bool | None
    why: list[str]
    # a step's, read alike of any load window (agreement.py): the soak does not write them
    queue_mean_ms: float | None
    queue_count: float
    preemptions_sampled: float | None


Window = StepRow | SoakRow  # a load window: a concurrency step or the soak


class PhaseRow(TypedDict, total=False):
    """One phase of the run (core.evidence.CapacityPhase, dumped)."""

    phase: str
    start_wall: float | None
    end_wall: float | None
    status: str
    note: str


class PlanRow(TypedDict):
    """The plan as the run description keeps it (shape.CapacityPlan.to_dict)."""

    planned_concurrency: int
    context_limit_tokens: int
    context_lengths_tokens: tuple[int, ...] | list[int]
    long_context_output_tokens: int
    long_context_repeats: int
    out_of_contract_tokens: int
    steps: tuple[int, ...] | list[int]
    beyond_contract: int
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int
    step_duration_s: float
    step_max_requests: int
    soak_duration_s: float
    soak_max_requests: int
    ready_timeout_s: float
    request_timeout_s: float
    calibration_concurrencies: tuple[int, ...] | list[int]
    calibration_max_error_ms: float
    calibration_server: str
    planned_sessions: int
    session_levels: tuple[int, ...] | list[int]
    session_duration_s: float
    session_think_s: float
    budget_s: dict[str, float]


class SessionPlan(TypedDict):
    """The session phase's part of the plan (shape.session_plan)."""

    planned_sessions: int
    session_levels: tuple[int, ...]
    session_duration_s: float
    session_think_s: float


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
    reports: list[dict[str, Any]]  # k3lib.io.calibration.CalibrationReport.to_dict, as it writes them


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
    turns: list[TurnRow]


Unit = StepRow | SoakRow | LevelRow | LengthRow  # what a phase's figure marks: its steps, soak, levels or lengths


class RunJson(TypedDict, total=False):
    """`evidence/capacity/run.json`: the run description (run.CapacityRunner.describe), rewritten after each phase."""

    plan: PlanRow
    target: str
    gpu_source: str | None
    gpu_driver: str | None
    phases: list[PhaseRow]
    steps: list[StepRow]
    long_context: list[LengthRow]
    refusal: dict[str, Any]
    ready: ReadyRow
    health: list[HealthRow]
    failure: FailureRow | None
    dead: bool
    soak: SoakRow | None
    notes: list[str]
    calibration: CalibrationData
    model_card: dict[str, Any] | None
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


class OomEvent(TypedDict, total=False):
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


class TurnRow(TypedDict, total=False):
    """One session turn of `sessions.jsonl` (k3lib.io.sessions.replay.turn_record, with the level it was played at)."""

    level: int
    session: str
    turn: int
    think_s: float
    ok: bool
    request_id: str
    http_status: int | None
    error: str | None
    cancelled: bool
    sent_wall: float | None
    done_wall: float | None
    prompt_tokens: int | None
    previous_prompt_tokens: int | None
    growth_tokens: int | None
    expected_growth_tokens: int | None
    cached_tokens: int | None
    designed_cached_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    reasoning_sent_back: bool
    expect_tool: bool
    function: str | None
    calls: list[Any]
    tool_ok: bool | None
    function_match: bool | None
    previous_call_ids: list[str]
    answers: list[Any]
    plain_results: int
    ttft_ms: float | None
    max_gap_ms: float | None
    max_silence_ms: float | None
    e2e_ms: float | None
    finish_reason: str | None
    # aligned with the server's series (sessionjudge.align)
    kv_usage_max: float | None
    running_max: float | None
    waiting_max: float | None
    preemptions_around: float | None
