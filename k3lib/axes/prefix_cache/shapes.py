"""The JSON shapes the prefix-cache axis writes and reads back, as TypedDicts (nothing changes at run time): the
counters scraped around each request, the hybrid retention settings as read, the reuse finding's observed figures.
`typing_extensions.TypedDict`: pydantic validates `PrefixCacheResult`'s fields with them on Python 3.11."""

from __future__ import annotations

from typing_extensions import TypedDict



class CounterRow(TypedDict, total=False):
    """The cumulative prefix-cache counters as scraped around one request (run._counter_row)."""

    t_wall: float
    request_id: str
    kind: str
    phase: str
    queries: float | None
    hits: float | None
    cached: float | None
    sparse_retention_misses: float | None
    endpoints_ok: int


class RetentionStatement(TypedDict):
    """One statement of the retention interval: where it was read and what it says (retention.retention_settings)."""

    source: str
    value: int


class Retention(TypedDict, total=False):
    """What the server says of its hybrid retention (retention.retention_settings); empty when not read."""

    interval: int | None
    interval_source: str | None
    state_cache_mode: str | None
    hybrid: bool | None
    statements: list[RetentionStatement]
    log_read: bool


class ReuseObserved(TypedDict, total=False):
    """The reuse finding's observed figures (judge._reuse_finding)."""

    pairs: int
    pairs_with_hits: int
    designed_hit_tokens: int
    observed_hit_tokens: int
    ttft_gain_pct: float | None
    gain_judged_at_prefix_tokens: int
    ttft_gain_pct_by_prefix: dict[str, float | None]
    ttft_gain_interval: dict[str, float] | None
    sightings: dict[str, int]
