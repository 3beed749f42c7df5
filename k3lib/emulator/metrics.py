"""The `/metrics` exposition: vLLM v1's metric names, types, labels and buckets for the reported version.

One CollectorRegistry per emulated server (a restart starts from zero, like a real restart resets the
counters). Labels are `model_name` (the first served name) and `engine` (the DP index as a string).
Names that came and went across releases follow `vllm_version` (research notes §1.1, §2).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .scheduler import EngineRequest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                    240.0, 480.0, 960.0, 1920.0, 7680.0)
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def buckets_1_2_5(limit: int) -> tuple[float, ...]:
    out: list[float] = []
    mag = 1
    while True:
        for m in (1, 2, 5):
            if m * mag > limit:
                return tuple(out)
            out.append(float(m * mag))
        mag *= 10


class ServerMetrics:
    """vLLM's Prometheus families, fed by the runtime's engine observer."""

    def __init__(self, cfg, *, num_gpu_blocks: int, kv_cache_size_tokens: int, max_concurrency: float,
                 per_engine: list[tuple[int, int, bool]] | None = None) -> None:
        self.cfg = cfg
        # the `engine` label is the global DP rank: a node serving ranks 2 and 3 labels them "2" and "3"
        self._labels = [str(cfg.rank(i)) for i in range(cfg.local_ranks)]
        self.registry = CollectorRegistry()
        v = cfg.version()
        r = self.registry
        # vLLM's process collector (outside multiprocess mode): when this server started, as the target's identity
        Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
              registry=r).set(time.time())
        self.model = cfg.served_model_name
        labels = ["model_name", "engine"]
        self.old_names = v < (0, 12)   # deprecated aliases exported (0.10) or hidden-but-listed (0.11)
        self._add_scheduler_gauges(r, labels, v)
        self._add_cache_and_draft_counters(r, labels)
        self._add_token_and_request_counters(r, labels, v)
        self._add_histograms(r, labels, v)
        self._precreate_series(r, num_gpu_blocks, kv_cache_size_tokens, max_concurrency, per_engine)
        # the per-token series, looked up once: `labels()` on every token of 256 streams was engine-step lag
        self._token_series = {i: tuple(h.labels(self.model, e) for h in (self.itl, self.tpot_old) if h is not None)
                              for i, e in enumerate(self._labels)}

    # -- the families, one group each, created in the order they are exposed -------------------------
    def _add_scheduler_gauges(self, r: CollectorRegistry, labels: list[str], v: tuple[int, ...]) -> None:
        """Running and waiting requests and KV-cache usage (with the 0.10–0.11 `gpu_` alias)."""
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             labels, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             labels, registry=r)
        self.waiting_by_reason = (Gauge("vllm:num_requests_waiting_by_reason",
                                        "Number of waiting requests by reason.", labels + ["reason"], registry=r)
                                  if v >= (0, 20) else None)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                              registry=r)
        self.gpu_usage = (Gauge("vllm:gpu_cache_usage_perc",
                                "GPU KV-cache usage. 1 means 100 percent usage.", labels, registry=r)
                          if self.old_names else None)

    def _add_cache_and_draft_counters(self, r: CollectorRegistry, labels: list[str]) -> None:
        """Prefix-cache queries and hits (a hybrid's retention misses, the 0.10–0.11 `gpu_` aliases) and the
        speculative decoder's drafts."""
        self.queries = Counter("vllm:prefix_cache_queries",
                               "Prefix cache queries, in terms of number of queried tokens.", labels, registry=r)
        self.hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                            labels, registry=r)
        # a hybrid model's retention (proposed in vllm#52527): matched tokens dropped for want of a state checkpoint
        self.sparse_misses = (Counter("vllm:prefix_cache_sparse_retention_misses",
                                      "Prefix cache tokens matched but not reused: no recurrent-state checkpoint "
                                      "inside the shared prefix.", labels, registry=r)
                              if self.cfg.hybrid_retention else None)
        # speculative decoding (DSpark for Kimi K3): one draft of `speculative_tokens` per decode step, a share of
        # its tokens accepted (dspark-low-accept: almost none)
        self.spec = None
        if self.cfg.speculative_tokens:
            self.spec = tuple(Counter(n, h, labels, registry=r) for n, h in (
                ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")))
        self.spec_acceptance = 0.02 if "dspark-low-accept" in self.cfg.fault_set() else self.cfg.spec_acceptance
        self.gpu_queries = self.gpu_hits = None
        if self.old_names:
            self.gpu_queries = Counter("vllm:gpu_prefix_cache_queries",
                                       "GPU prefix cache queries, in terms of number of queried tokens.", labels,
                                       registry=r)
            self.gpu_hits = Counter("vllm:gpu_prefix_cache_hits",
                                    "GPU prefix cache hits, in terms of number of cached tokens.", labels, registry=r)

    def _add_token_and_request_counters(self, r: CollectorRegistry, labels: list[str], v: tuple[int, ...]) -> None:
        """Tokens, preemptions, finished requests by reason, admission rejections, the tool parser's invocations,
        the counters exported at zero and the sleep state."""
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                   labels, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels,
                                         registry=r)
        self.by_source = self.cached = None
        if v >= (0, 16):
            self.by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                                     labels + ["source"], registry=r)
            self.cached = Counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
                                  labels, registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               labels + ["finished_reason"], registry=r)
        self.reasons = ["stop", "length", "abort"] + (["error"] if v >= (0, 13) else []) \
            + (["repetition"] if v >= (0, 18) else [])
        # seen on a real 0.32.0 server (tests/test_conformance.py); the notes had read 0.33 for the first two
        self.admission = (Counter("vllm:admission_rejections", "Number of requests rejected at admission.",
                                  ["model_name", "reason"], registry=r) if v >= (0, 32) else None)
        self.cached_by_source = (Counter("vllm:prompt_tokens_cached_by_source",
                                         "Number of cached prompt tokens by cache tier.", labels + ["source"],
                                         registry=r) if v >= (0, 32) else None)
        self.tool_parser_calls = (Counter("vllm:tool_call_parser_invocations",
                                          "Number of tool call parser invocations.",
                                          ["mode", "model_name", "outcome", "request_type"], registry=r)
                                  if v >= (0, 32) and self.cfg.tool_call_parser else None)
        # exported whether or not the feature is in use (a real 0.32.0 text-only server shows them all at zero)
        self.zero_counters = [Counter(name, help_, labels, registry=r) for name, help_, since in (
            ("vllm:external_prefix_cache_queries", "External prefix cache queries, in tokens.", (0, 12)),
            ("vllm:external_prefix_cache_hits", "External prefix cache hits, in tokens.", (0, 12)),
            ("vllm:mm_cache_queries", "Multi-modal cache queries, in items.", (0, 12)),
            ("vllm:mm_cache_hits", "Multi-modal cache hits, in items.", (0, 12)),
            ("vllm:estimated_flops_per_gpu", "Estimated number of floating point operations per GPU.", (0, 32)),
            ("vllm:estimated_read_bytes_per_gpu", "Estimated bytes read from memory per GPU.", (0, 32)),
            ("vllm:estimated_write_bytes_per_gpu", "Estimated bytes written to memory per GPU.", (0, 32)),
        ) if v >= since]
        self.sleep_state = (Gauge("vllm:engine_sleep_state", "Engine sleep state; awake = 1 when not sleeping.",
                                  labels + ["sleep_state"], registry=r) if v >= (0, 12) else None)

    def _add_histograms(self, r: CollectorRegistry, labels: list[str], v: tuple[int, ...]) -> None:
        """Per-request and per-step histograms, each where the version exports it."""
        def hist(name: str, help_: str, buckets, since: tuple = (0,), until: tuple | None = None):
            if v < since or (until is not None and v >= until):
                return None
            return Histogram(name, help_, labels, buckets=buckets, registry=r)

        tok_buckets = buckets_1_2_5(self.cfg.max_model_len)
        self.iteration = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                              _ITERATION_BUCKETS)
        self.req_prompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok_buckets)
        self.req_gen = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tok_buckets)
        self.req_max_gen = hist("vllm:request_max_num_generation_tokens",
                                "Histogram of maximum number of requested generation tokens.", tok_buckets)
        self.req_n = hist("vllm:request_params_n", "Histogram of the n request parameter.", (1, 2, 5, 10, 20))
        self.req_max_tokens = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
                                   tok_buckets)
        self.req_kv_computed = hist("vllm:request_prefill_kv_computed_tokens",
                                    "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                                    tok_buckets, since=(0, 13))
        self.req_preemptions = hist("vllm:request_num_preemptions", "Number of preemptions per request.",
                                    (1, 2, 3, 4, 5, 10, 20), since=(0, 31))
        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         _TTFT_BUCKETS)
        self.tpot_old = hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                             _ITL_BUCKETS, until=(0, 12))
        self.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        _ITL_BUCKETS, since=(0, 10, 2))
        self.req_tpot = hist("vllm:request_time_per_output_token_seconds",
                             "Histogram of time_per_output_token_seconds per request.", _ITL_BUCKETS, since=(0, 11))
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                        _LATENCY_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds",
                          "Histogram of time spent in WAITING phase for request.", _LATENCY_BUCKETS)
        self.inference = hist("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.", _LATENCY_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.", _LATENCY_BUCKETS)
        self.decode = hist("vllm:request_decode_time_seconds",
                           "Histogram of time spent in DECODE phase for request.", _LATENCY_BUCKETS)

    def _precreate_series(self, r: CollectorRegistry, num_gpu_blocks: int, kv_cache_size_tokens: int,
                          max_concurrency: float, per_engine: list[tuple[int, int, bool]] | None) -> None:
        """The cache configuration per engine, and every labelled series at zero."""
        cfg = self.cfg
        info = cache_config_labels(cfg, num_gpu_blocks, kv_cache_size_tokens, max_concurrency)
        self.cache_info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                list(info) + ["engine"], registry=r)
        for i in range(cfg.local_ranks):
            e = self._labels[i]
            # each engine profiles its own GPU: a rank with less free memory states its own, smaller pool
            blocks, tokens, prefix = (per_engine[i] if per_engine else
                                      (num_gpu_blocks, kv_cache_size_tokens, cfg.enable_prefix_caching))
            own = cache_config_labels(cfg.replace(enable_prefix_caching=prefix), blocks, tokens,
                                      tokens / cfg.max_model_len) if per_engine else info
            self.cache_info.labels(**own, engine=e).set(1.0)
            # Pre-create every labelled series, as vLLM does, so a fresh server exposes zeros.
            for reason in self.reasons:
                self.success.labels(self.model, e, reason)
            if self.by_source is not None:
                for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
                    self.by_source.labels(self.model, e, source)
            self.set_gauges(i, 0, 0, 0.0)
            for c in (self.queries, self.hits, self.sparse_misses, *(self.spec or ()), self.gpu_queries,
                      self.gpu_hits, self.preemptions, self.prompt_tokens,
                      self.generation_tokens, self.cached, *self.zero_counters):
                if c is not None:
                    c.labels(self.model, e)
            if self.cached_by_source is not None:
                for source in ("device", "host", "p2p", "disk", "external_unspecified"):
                    self.cached_by_source.labels(self.model, e, source)
            if self.sleep_state is not None:
                for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
                    self.sleep_state.labels(self.model, e, state).set(value)
            for h in self._histograms():
                h.labels(self.model, e)
        if self.admission is not None:
            for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
                self.admission.labels(self.model, reason)
        if self.tool_parser_calls is not None:
            for mode in ("streaming", "non_streaming"):
                for outcome in ("tool_call", "no_tool_call"):
                    for kind in ("chat_completions", "responses", "other"):
                        self.tool_parser_calls.labels(mode, self.model, outcome, kind)

    def _histograms(self):
        return [h for h in (self.iteration, self.req_prompt, self.req_gen, self.req_max_gen, self.req_n,
                            self.req_max_tokens, self.req_kv_computed, self.req_preemptions, self.ttft, self.tpot_old,
                            self.itl, self.req_tpot, self.e2e, self.queue, self.inference, self.prefill, self.decode)
                if h is not None]

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # -- fed by the runtime ------------------------------------------------------------------------
    def set_gauges(self, engine: int, running: int, waiting: int, usage: float) -> None:
        e = self._labels[engine]
        self.running.labels(self.model, e).set(running)
        self.waiting.labels(self.model, e).set(waiting)
        if self.waiting_by_reason is not None:
            self.waiting_by_reason.labels(self.model, e, "capacity").set(waiting)
            self.waiting_by_reason.labels(self.model, e, "deferred").set(0)
        self.kv_usage.labels(self.model, e).set(usage)
        if self.gpu_usage is not None:
            self.gpu_usage.labels(self.model, e).set(usage)

    def on_sparse_miss(self, engine: int, tokens: int) -> None:
        if self.sparse_misses is not None and tokens:
            self.sparse_misses.labels(self.model, self._labels[engine]).inc(tokens)

    def on_admit(self, engine: int, queried: int, hit: int, resumed: bool) -> None:
        # 0.12+ keeps re-admissions after preemption out of the exported counters (issue #25780).
        if resumed and not self.old_names:
            return
        e = self._labels[engine]
        self.queries.labels(self.model, e).inc(queried)
        self.hits.labels(self.model, e).inc(hit)
        if self.gpu_queries is not None:
            assert self.gpu_hits is not None  # created with gpu_queries
            self.gpu_queries.labels(self.model, e).inc(queried)
            self.gpu_hits.labels(self.model, e).inc(hit)

    def on_preempt(self, engine: int) -> None:
        self.preemptions.labels(self.model, self._labels[engine]).inc()

    def on_step(self, engine: int, computed_prompt: int, all_prompt: int, generated: int) -> None:
        e = self._labels[engine]
        if generated:
            self.generation_tokens.labels(self.model, e).inc(generated)
            if self.spec is not None:
                k = self.cfg.speculative_tokens
                for counter, value in zip(self.spec, (generated, generated * k,
                                                      generated * k * self.spec_acceptance)):
                    counter.labels(self.model, e).inc(value)
        if all_prompt:
            self.prompt_tokens.labels(self.model, e).inc(all_prompt)
        # 0.24+ counts only computed prompt tokens per step; before, the full prompt of finished prefills.
        step_tokens = (computed_prompt if self.cfg.at_least("0.24") else all_prompt) + generated
        if step_tokens and self.iteration is not None:
            self.iteration.labels(self.model, e).observe(step_tokens)

    def on_first_token(self, engine: int, req: EngineRequest) -> None:
        e = self._labels[engine]
        assert req.first_token_s is not None  # the engine stamps it before calling
        self.ttft.labels(self.model, e).observe(req.first_token_s - req.arrival_s)
        cached = req.num_cached_tokens or 0
        if self.by_source is not None:
            assert self.cached is not None  # created with by_source
            self.by_source.labels(self.model, e, "local_compute").inc(len(req.prompt_ids) - cached)
            self.by_source.labels(self.model, e, "local_cache_hit").inc(cached)
            self.cached.labels(self.model, e).inc(cached)
        if self.cached_by_source is not None:
            self.cached_by_source.labels(self.model, e, "device").inc(cached)

    def on_token(self, engine: int, gap_s: float) -> None:
        for series in self._token_series[engine]:
            series.observe(gap_s)

    def on_finish(self, engine: int, req: EngineRequest) -> None:
        e = self._labels[engine]
        reason = req.finish_reason if req.finish_reason in self.reasons else "abort"
        self.success.labels(self.model, e, reason).inc()
        if req.first_token_s is None:
            return
        end = req.finished_s or req.last_token_s
        assert end is not None  # the engine stamps finished_s before calling
        sched = req.first_scheduled_s or req.arrival_s
        gen = req.num_output
        for h, value in ((self.e2e, end - req.arrival_s), (self.queue, sched - req.queued_s),
                         (self.inference, end - sched), (self.prefill, req.first_token_s - sched),
                         (self.decode, (req.last_token_s or end) - req.first_token_s),
                         (self.req_prompt, len(req.prompt_ids)), (self.req_gen, gen), (self.req_n, 1),
                         (self.req_max_gen, req.max_tokens),
                         (self.req_max_tokens, req.params_max_tokens or req.max_tokens),
                         (self.req_kv_computed, len(req.prompt_ids) - (req.num_cached_tokens or 0)),
                         (self.req_preemptions, req.num_preemptions),
                         (self.req_tpot, ((req.last_token_s or end) - req.first_token_s) / (gen - 1) if gen > 1 else 0)):
            if h is not None:
                h.labels(self.model, e).observe(max(value, 0))


def cache_config_labels(cfg, num_gpu_blocks: int, kv_tokens: int, max_concurrency: float) -> dict[str, str]:
    """CacheConfig fields as `str()` values; the field set follows the reported version (notes §1.2)."""
    v = cfg.version()
    d: dict[str, object] = {
        "block_size": cfg.block_size,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "cache_dtype": "auto",
        "is_attention_free": False,
        "num_gpu_blocks_override": cfg.num_gpu_blocks_override,
        "sliding_window": None,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "prefix_caching_hash_algo": "builtin" if v < (0, 11) else "sha256",
        "calculate_kv_scales": False,
        "cpu_kvcache_space_bytes": None,
        "mamba_page_size_padded": None,
        "num_gpu_blocks": num_gpu_blocks,
        "num_cpu_blocks": None,
    }
    if v >= (0, 32):
        # the field set of a real 0.32.0 server's cache_config_info (tests/test_conformance.py)
        for gone in ("calculate_kv_scales", "cpu_kvcache_space_bytes"):
            d.pop(gone)
        d.update(_block_size_resolved=True, user_specified_block_size=False, hash_block_size=None,
                 kv_cache_dtype_skip_layers=[], kv_cache_size_tokens=kv_tokens,
                 kv_cache_max_concurrency=round(max_concurrency, 2), kv_sharing_fast_prefill=False,
                 kv_cache_memory_bytes=None, kv_offloading_size=None, kv_offloading_backend="native",
                 kv_cache_layout=None, prefix_match_unit=None,
                 prefix_cache_retention_interval=cfg.prefix_cache_retention_interval,
                 effective_attention_block_size=cfg.block_size, cache_hit_alignment_tokens=None,
                 mamba_block_size=None, mamba_cache_dtype="auto",
                 mamba_cache_mode="align" if cfg.hybrid_retention else "none",
                 mamba_ssm_cache_dtype="float32", enable_mamba_shared_prefix_checkpoint=False,
                 replayssm_buffer_len=16, skip_page_size_padded=None, swa_bounded_replay=True,
                 use_kda_recoverssm=False, use_replayssm=False)
        if v >= (0, 33):
            d.update(simple_cpu_offload_num_blocks=None)
        return {k: str(val) for k, val in sorted(d.items())}
    if v < (0, 24):
        d.update(swap_space=4, cpu_offload_gb=0, swap_space_bytes=4 * 2**30)
    else:
        d.update(user_specified_block_size=cfg.block_size, user_specified_mamba_block_size=None,
                 hash_block_size=cfg.block_size, kv_cache_dtype_skip_layers=[], kv_cache_size_tokens=kv_tokens,
                 kv_cache_max_concurrency=round(max_concurrency, 2), kv_sharing_fast_prefill=False,
                 kv_cache_memory_bytes=None, kv_offloading_size=None, kv_offloading_backend="native")
    if v >= (0, 33):
        d.update(kv_cache_layout=None, prefix_match_unit=None, prefix_cache_retention_interval=None,
                 effective_attention_block_size=cfg.block_size, cache_hit_alignment_tokens=cfg.block_size,
                 simple_cpu_offload_num_blocks=None)
    return {k: str(val) for k, val in d.items()}
