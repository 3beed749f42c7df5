"""Acceptance axis 4, prefix caching: cold/warm protocol, the hits the token ids were designed to get against the
counters, and a verdict that never counts the cache gain without measured reuse."""

from .blocks import (
    aligned_hits,
    cap_tokens,
    common_prefix_len,
    designed_hits,
    expected_hits,
    first_divergence,
    hit_unit,
    hits_for,
    units_reproducing,
)
from .config import CANDIDATE_UNITS
from .figures import counters_figure, hits_figure, hits_table, pairs_table, requests_table, ttft_figure
from .result import PrefixCacheResult, RequestSample
from .run import TOOLS, contamination, run_prefix_cache, session_messages
from .judge import NO_REUSE, PairReconciliation, iter_findings, prefix_cache_record, reconcile, reconcile_pair

__all__ = [
    "CANDIDATE_UNITS",
    "NO_REUSE",
    "PairReconciliation",
    "PrefixCacheResult",
    "RequestSample",
    "TOOLS",
    "aligned_hits",
    "cap_tokens",
    "common_prefix_len",
    "contamination",
    "counters_figure",
    "designed_hits",
    "expected_hits",
    "first_divergence",
    "hit_unit",
    "hits_figure",
    "hits_for",
    "hits_table",
    "iter_findings",
    "pairs_table",
    "prefix_cache_record",
    "reconcile",
    "reconcile_pair",
    "requests_table",
    "run_prefix_cache",
    "session_messages",
    "ttft_figure",
    "units_reproducing",
]
