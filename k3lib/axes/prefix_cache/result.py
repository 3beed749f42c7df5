"""What the prefix-cache protocol observed, as data: one request's sample and the run's result (JSON round-trip, so
the judge and the figures re-render from the run folder), the files it keeps, and which sighting of a prefix is
judged. `run.py` measures it; `judge.py` and `figures.py` read it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...core.errors import EvidenceError
from .shapes import CounterRow, Retention

AXIS = "prefix_cache"
REQUESTS_JSONL = f"evidence/{AXIS}/requests.jsonl"
SAMPLES_JSONL = f"evidence/{AXIS}/samples.jsonl"
COUNTERS_JSON = f"evidence/{AXIS}/counters.json"
TOKEN_IDS_JSONL = f"evidence/{AXIS}/token_ids.jsonl"
RESULT_JSON = f"evidence/{AXIS}/result.json"

#: cache_config_info labels kept as evidence of how the cache was configured.
CONFIG_LABELS = ("enable_prefix_caching", "block_size", "hash_block_size", "prefix_match_unit",
                 "cache_hit_alignment_tokens", "prefix_caching_hash_algo", "num_gpu_blocks", "kv_cache_size_tokens",
                 "prefix_cache_retention_interval", "mamba_cache_mode", "mamba_block_size")
#: The requests of one session, in the order sent: the prefix's first, second and third sightings.
KINDS = ("cold", "warm", "third")


class RequestSample(BaseModel):
    """One cold or warm request with the counter deltas of its own window and the hits its ids were designed
    to get. Token counts are in tokens; `designed_hits` comes from the ids (None when /tokenize is missing)."""

    model_config = ConfigDict(frozen=True)


    session: int
    prefix_target: int
    kind: str  # "cold" | "warm" | "third": the prefix's first, second and third sightings
    request_id: str
    salt: str | None
    nonce: str
    sent_wall_s: float
    ok: bool
    error: str | None
    prompt_tokens: int | None  # from usage
    tokenized_tokens: int | None  # from /tokenize (chat form, the same template)
    ttft_ms: float | None
    e2e_ms: float | None
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens; None: not sent
    queries_delta: float | None
    hits_delta: float | None
    cached_counter_delta: float | None  # vllm:prompt_tokens_cached_total (0.16+)
    success_delta: float | None
    replica_queries: dict[str, float]
    replica_hits: dict[str, float]
    counter_reset: bool
    settled: bool  # the counters moved by this request's prompt within the settle time
    contaminated: str | None  # why this window also holds someone else's traffic, if it does
    designed_hits: int | None
    intended_hits: int | None  # what a warm request changed only in its last turn would get
    divergence_at: int | None  # first token where this request differs from its cold request
    common_prefix_tokens: int | None = None  # tokens shared with its cold request (warm and third only)
    sparse_misses_delta: float | None = None  # vllm:prefix_cache_sparse_retention_misses (hybrid models), if exported

    @property
    def replica(self) -> str | None:
        """The replica (endpoint, engine) whose query counter took this request, when exactly one did."""
        moved = [k for k, v in self.replica_queries.items() if v > 0]
        return moved[0] if len(moved) == 1 else None


class PrefixCacheResult(BaseModel):
    """Everything the protocol observed, JSON-round-trippable so figures re-render from the run folder: written with
    `model_dump()`, read back with `model_validate` (a sample's unknown keys ignored)."""

    model_config = ConfigDict(frozen=True)

    samples: tuple[RequestSample, ...]
    counters: tuple[CounterRow, ...]
    cache_config: dict[str, str]
    unit: int | None
    unit_source: str
    isolation: str
    warm_change: str
    metrics_urls: tuple[str, ...]
    sized_by: str
    min_ttft_gain_pct: float
    stopped: str | None = None  # why the protocol stopped before its plan, if it did
    planned_pairs: int = 0
    retention: Retention = Field(default_factory=lambda: Retention())  # hybrid retention settings, as read

    def pairs(self) -> list[tuple[RequestSample, RequestSample]]:
        """(cold, the sighting judged) per session and prefix length, in the order sent: the warm request, or the
        third sighting when the warm one reused nothing and the third did (`judged_sighting`); a missing half drops
        the pair."""
        cold = {(s.session, s.prefix_target): s for s in self.samples if s.kind == "cold"}
        third = {(s.session, s.prefix_target): s for s in self.samples if s.kind == "third"}
        return [(cold[key], judged_sighting(s, third.get(key))[0]) for s in self.samples
                if s.kind == "warm" and (key := (s.session, s.prefix_target)) in cold]

    def sighting_of(self, sample: RequestSample) -> int:
        return KINDS.index(sample.kind) + 1 if sample.kind in KINDS else 2

    @classmethod
    def load(cls, store: Any) -> PrefixCacheResult:
        """Read back a run's result (`evidence/prefix_cache/result.json`) to re-render without re-running."""
        data = store.read_json(RESULT_JSON)
        if data is None:
            raise EvidenceError(f"{store.path(RESULT_JSON)} is missing: the prefix-cache axis has not run in this "
                                "folder")
        try:
            return cls.model_validate(data)
        except (TypeError, ValueError) as exc:
            raise EvidenceError(f"{store.path(RESULT_JSON)}: not a prefix-cache result ({exc})") from None


def reused(sample: RequestSample | None) -> bool:
    """Whether a request's own window shows a prefix hit (the counter, else usage's cached_tokens)."""
    if sample is None or not sample.ok:
        return False
    hits = sample.hits_delta if sample.hits_delta is not None else sample.cached_tokens
    return bool(hits and hits > 0)


def judged_sighting(warm: RequestSample, third: RequestSample | None) -> tuple[RequestSample, int]:
    """The request the reuse verdict reads, and which sighting of the prefix it was: the warm one (2nd), unless it
    reused nothing and the third did — a hybrid model that keeps a prefix's state only on its second hit."""
    if not reused(warm) and third is not None and reused(third):
        return third, 3
    return warm, 2
