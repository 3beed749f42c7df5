"""Canonical metric names: every name vLLM (V0, 0.8 V1, 0.10 → 0.33) and SGLang used for one meaning, and how
it aggregates across DP engines and endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter", "histogram", "info"]
Aggregate = Literal["sum", "max", "mean", "none"]


@dataclass(frozen=True)
class SeriesSpec:
    """One canonical series. `names` are exposed sample names (histograms: the base name), preferred first."""

    canonical: str
    kind: Kind
    aggregate: Aggregate
    names: tuple[str, ...]

    def tried(self) -> str:
        """The names as an error message lists them: "`a` or `b`"."""
        return " or ".join(f"`{n}`" for n in self.names)


def _spec(canonical: str, kind: Kind, aggregate: Aggregate, *names: str) -> SeriesSpec:
    return SeriesSpec(canonical, kind, aggregate, names)


# Order inside `names` matters: the first name an endpoint exposes wins, so a 0.10/0.11 server that exports both
# the new name and its deprecated alias (same value) is never counted twice.
SERIES: tuple[SeriesSpec, ...] = (
    # --- gauges -------------------------------------------------------------------------------------------------
    # Usage is a per-engine fraction: the fullest engine is what runs out first, so max (never sum).
    # `gpu_cache_usage_perc` is V0 / 0.8 / 0.10 (hidden in 0.11, gone in 0.12); SGLang calls it token_usage.
    _spec("kv_cache_usage_perc", "gauge", "max",
          "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    _spec("num_requests_running", "gauge", "sum", "vllm:num_requests_running", "sglang:num_running_reqs"),
    _spec("num_requests_waiting", "gauge", "sum", "vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    _spec("num_requests_swapped", "gauge", "sum", "vllm:num_requests_swapped"),  # V0 only
    # A rate gauge, not a counter: V0's per-block hit rate (-1 = no data) and SGLang's. Never a substitute for
    # the token counters below; a window hit rate must come from counter deltas.
    _spec("prefix_cache_hit_rate", "gauge", "mean", "vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
    # --- counters (cumulative; per-run numbers are deltas between two snapshots) --------------------------------
    _spec("num_preemptions_total", "counter", "sum", "vllm:num_preemptions_total"),
    # Counted in tokens. The gpu_ aliases are 0.10–0.11; V0 has no counters here (its *_hit_rate gauges don't count).
    _spec("prefix_cache_queries_total", "counter", "sum",
          "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    _spec("prefix_cache_hits_total", "counter", "sum",
          "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    _spec("external_prefix_cache_queries_total", "counter", "sum", "vllm:external_prefix_cache_queries_total"),
    _spec("external_prefix_cache_hits_total", "counter", "sum", "vllm:external_prefix_cache_hits_total"),
    _spec("prompt_tokens_total", "counter", "sum", "vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    _spec("generation_tokens_total", "counter", "sum",
          "vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    # vLLM 0.16+: cached prompt tokens, local + external; SGLang's cached_tokens_total has the same meaning.
    _spec("prompt_tokens_cached_total", "counter", "sum",
          "vllm:prompt_tokens_cached_total", "sglang:cached_tokens_total"),
    # Summed over engines AND finished_reason (stop/length/abort/error/repetition).
    _spec("request_success_total", "counter", "sum", "vllm:request_success_total", "sglang:num_requests_total"),
    _spec("admission_rejections_total", "counter", "sum", "vllm:admission_rejections_total"),
    # Hybrid (KDA/Mamba) models: matched prefix tokens thrown away because no recurrent-state checkpoint fell inside
    # the shared prefix (proposed in vllm#52527; read when a server exports it).
    _spec("prefix_cache_sparse_retention_misses_total", "counter", "sum",
          "vllm:prefix_cache_sparse_retention_misses_total"),
    _spec("spec_decode_num_drafts_total", "counter", "sum", "vllm:spec_decode_num_drafts_total"),
    _spec("spec_decode_num_draft_tokens_total", "counter", "sum", "vllm:spec_decode_num_draft_tokens_total"),
    _spec("spec_decode_num_accepted_tokens_total", "counter", "sum",
          "vllm:spec_decode_num_accepted_tokens_total"),
    # --- histograms (base names; samples are _bucket/_sum/_count) -----------------------------------------------
    _spec("time_to_first_token_seconds", "histogram", "sum",
          "vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    # time_per_output_token_seconds is the 0.10–0.14 name of the same per-output-event gap (new name 0.10.2+).
    _spec("inter_token_latency_seconds", "histogram", "sum",
          "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
          "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    _spec("e2e_request_latency_seconds", "histogram", "sum",
          "vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    _spec("request_time_per_output_token_seconds", "histogram", "sum", "vllm:request_time_per_output_token_seconds"),
    _spec("request_queue_time_seconds", "histogram", "sum", "vllm:request_queue_time_seconds"),
    _spec("request_inference_time_seconds", "histogram", "sum", "vllm:request_inference_time_seconds"),
    _spec("request_prefill_time_seconds", "histogram", "sum", "vllm:request_prefill_time_seconds"),
    _spec("request_decode_time_seconds", "histogram", "sum", "vllm:request_decode_time_seconds"),
    _spec("request_prompt_tokens", "histogram", "sum", "vllm:request_prompt_tokens"),
    _spec("request_generation_tokens", "histogram", "sum", "vllm:request_generation_tokens"),
    _spec("request_prefill_kv_computed_tokens", "histogram", "sum", "vllm:request_prefill_kv_computed_tokens"),
    # Literally named *_total but a histogram of tokens per engine step.
    _spec("iteration_tokens", "histogram", "sum", "vllm:iteration_tokens_total"),
    # --- info ---------------------------------------------------------------------------------------------------
    _spec("cache_config_info", "info", "none", "vllm:cache_config_info"),
)

BY_CANONICAL: dict[str, SeriesSpec] = {s.canonical: s for s in SERIES}

# What `inspect_metrics` reports, in this order.
INSPECT_SERIES: tuple[str, ...] = (
    "kv_cache_usage_perc",
    "num_requests_running",
    "num_requests_waiting",
    "num_preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
)

SERVER_PREFIXES: tuple[str, ...] = ("vllm:", "sglang:")


def spec_for(canonical: str) -> SeriesSpec:
    """The spec of a canonical name; a KeyError lists the known names, since a typo here is a programming error."""
    try:
        return BY_CANONICAL[canonical]
    except KeyError:
        raise KeyError(f"unknown canonical series {canonical!r}; known: {', '.join(sorted(BY_CANONICAL))}") from None
