"""Scrape one or many /metrics endpoints (DP ranks, nodes) over httpx into a Snapshot, async or sync."""

from __future__ import annotations

import asyncio
import time
from typing import Iterable
from urllib.parse import urlsplit, urlunsplit

import httpx

from k3lib.core.errors import APIError, TargetUnreachable
from k3lib.io.metrics.names import INSPECT_SERIES
from k3lib.io.metrics.parse import parse_exposition
from k3lib.io.metrics.sampler import IntervalSampler
from k3lib.io.metrics.snapshot import EndpointScrape, Snapshot

DEFAULT_TIMEOUT_S = 10.0


def metrics_url(url: str) -> str:
    """`http://host:8000` and `http://host:8000/` mean that server's /metrics; any other path is kept."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _as_list(urls: str | Iterable[str]) -> list[str]:
    return [metrics_url(urls)] if isinstance(urls, str) else [metrics_url(u) for u in urls]


def _failure(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _scrape_result(url: str, response: httpx.Response | None, exc: Exception | None) -> EndpointScrape:
    wall, mono = time.time(), time.perf_counter_ns()
    if exc is not None:
        return EndpointScrape(url, (), wall, mono, error=_failure(exc))
    assert response is not None
    if response.status_code != 200:
        return EndpointScrape(url, (), wall, mono, error=f"HTTP {response.status_code}")
    exposition = parse_exposition(response.text)
    return EndpointScrape(url, exposition.samples, wall, mono, skipped=exposition.skipped)


def _raise_first_failure(snapshot: Snapshot) -> None:
    for e in snapshot.endpoints:
        if e.error is None:
            continue
        if e.error.startswith("HTTP "):
            status = int(e.error.split()[1])
            raise APIError(status, f"scraping {e.endpoint} returned {e.error}; is this the server's /metrics?",
                           url=e.endpoint)
        raise TargetUnreachable(f"cannot scrape {e.endpoint}: {e.error}")


async def scrape_async(urls: str | Iterable[str], client: httpx.AsyncClient | None = None, *,
                       timeout_s: float = DEFAULT_TIMEOUT_S, strict: bool = True) -> Snapshot:
    """Scrape every endpoint concurrently. `strict=False` records a failing endpoint in the snapshot
    (`EndpointScrape.error`) instead of raising TargetUnreachable / APIError; samplers use that."""
    targets = _as_list(urls)
    t_wall, t_mono = time.time(), time.perf_counter_ns()
    own = client is None
    client = client or httpx.AsyncClient(timeout=timeout_s)
    try:
        async def one(url: str) -> EndpointScrape:
            try:
                return _scrape_result(url, await client.get(url), None)
            except httpx.HTTPError as exc:
                return _scrape_result(url, None, exc)

        results = await asyncio.gather(*(one(u) for u in targets))
    finally:
        if own:
            await client.aclose()
    snapshot = Snapshot(tuple(results), t_wall=t_wall, t_mono_ns=t_mono)
    if strict:
        _raise_first_failure(snapshot)
    return snapshot


def scrape(urls: str | Iterable[str], client: httpx.Client | None = None, *,
           timeout_s: float = DEFAULT_TIMEOUT_S, strict: bool = True) -> Snapshot:
    """Synchronous scrape for notebooks and sampler threads (no event loop: a notebook already runs one)."""
    targets = _as_list(urls)
    t_wall, t_mono = time.time(), time.perf_counter_ns()
    own = client is None
    client = client or httpx.Client(timeout=timeout_s)
    results = []
    try:
        for url in targets:
            try:
                results.append(_scrape_result(url, client.get(url), None))
            except httpx.HTTPError as exc:
                results.append(_scrape_result(url, None, exc))
    finally:
        if own:
            client.close()
    snapshot = Snapshot(tuple(results), t_wall=t_wall, t_mono_ns=t_mono)
    if strict:
        _raise_first_failure(snapshot)
    return snapshot


# Series a load phase records by default: the gauges that show pressure and the counters whose deltas matter —
# the same headline set `k3 inspect metrics` prints.
SAMPLED_SERIES: tuple[str, ...] = INSPECT_SERIES
# ...and per DP rank when the endpoints show several: the gauges a rank saturates on
RANK_SERIES: tuple[str, ...] = ("kv_cache_usage_perc", "num_requests_running", "num_requests_waiting")


class MetricsSampler:
    """Scrapes the endpoints every `interval_s` during a load phase. `frame()` has columns t_wall, t_rel_s,
    endpoints_ok and one per canonical series; `first` / `last` keep whole snapshots for window deltas and
    histogram quantiles. Stops by itself after `max_duration_s`, or when `stop_event` is set."""

    def __init__(self, urls: str | Iterable[str], *, interval_s: float = 1.0, max_duration_s: float = 3600.0,
                 stop_event=None, series: tuple[str, ...] = SAMPLED_SERIES, timeout_s: float | None = None,
                 client: httpx.Client | None = None) -> None:
        self.urls = _as_list(urls)
        self.series = series
        self.first: Snapshot | None = None
        self.last: Snapshot | None = None
        own = client is None
        # A scrape must not outlast the interval by much, or samples bunch up behind a slow endpoint.
        self._client = client or httpx.Client(timeout=timeout_s or max(interval_s, 1.0))
        self._sampler = IntervalSampler(self._rows, interval_s=interval_s, max_duration_s=max_duration_s,
                                        stop_event=stop_event, name="k3-metrics-sampler",
                                        on_finish=self._client.close if own else None)

    def _rows(self) -> list[dict[str, object]]:
        snapshot = scrape(self.urls, self._client, strict=False)
        if self.first is None:
            self.first = snapshot
        self.last = snapshot
        row: dict[str, object] = {"t_wall": snapshot.t_wall,
                                  "endpoints_ok": sum(1 for e in snapshot.endpoints if e.error is None)}
        row.update(snapshot.values(self.series))
        ranks = snapshot.ranks()
        if len(ranks) > 1:
            # per DP rank (endpoint#engine): the aggregate hides the one rank that fills first
            row["ranks"] = {f"{url}#{engine}": snapshot.rank_view(url, engine).values(RANK_SERIES)
                            for url, engine in ranks}
        return [row]

    def start(self) -> MetricsSampler:
        self._sampler.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        self._sampler.stop(timeout_s)

    def join(self, timeout_s: float | None = None) -> None:
        self._sampler.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._sampler.running

    @property
    def errors(self):
        return self._sampler.errors

    def __enter__(self) -> MetricsSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def frame(self):
        frame = self._sampler.frame()
        for column in ("endpoints_ok", *self.series):
            if column not in frame.columns:
                frame[column] = None
        return frame
