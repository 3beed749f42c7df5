"""The JSON shapes of one load window of the capacity axis, as TypedDicts (they type what is read and written without
changing a byte of it): the sampled series and request lines it reads, the parts a step or the soak is assembled from,
and the step and the soak as the run description keeps them (`core.evidence.CapacityStep` is the validated record of
one step; `StepRow` is the same step as a dict). The run description around them is in `run_shapes`."""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import TypedDict  # pydantic validates a model's TypedDict field only from here before 3.12

from ...io.crosscheck import CrossCheckItemDict

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


class IntervalRow(TypedDict, total=False):
    """A bootstrap interval of a percentile (k3lib.core.stats.Interval, dumped)."""

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




class CrossCheckData(TypedDict, total=False):
    """The client-vs-server cross-check as a window keeps it (k3lib.axes.capacity.trust.cross_check_data)."""

    agrees: bool | None
    counts_agree: bool | None
    disagreements: list[str]
    items: list[CrossCheckItemDict]
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
    ttft_p95_interval: dict[str, float] | None  # core.stats.Interval, dumped
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


class SoakAnalysis(TypedDict, total=False):
    """The soak's accumulation, eviction, fragmentation and queue signals (analysis.soak_analysis gives every key; a
    soak read back from an older run may lack one)."""

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


class SoakWindow(ClientStats, Trust, total=False):
    """The soak's own window (soak.soak): its load, client numbers, trust, ranks and the agreement of its
    measurements."""

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
    agreement: Agreement
    held: bool | None
    why: list[str]


class SoakRow(SoakWindow, SoakAnalysis, total=False):
    """The soak as the run description keeps it: its window and its analysis (analysis.soak_analysis), one dict."""
    # a step's, read alike of any load window (agreement.py): the soak does not write them
    queue_mean_ms: float | None
    queue_count: float
    preemptions_sampled: float | None


Window = StepRow | SoakRow  # a load window: a concurrency step or the soak
