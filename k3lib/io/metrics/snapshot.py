"""Snapshots of one or many /metrics endpoints, read through the canonical names: aggregation across DP engines
and endpoints, `require` for series an axis cannot do without, and `cache_config_info`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property

from k3lib.core.errors import MissingSeriesError
from k3lib.io.metrics.names import SERVER_PREFIXES, SeriesSpec, spec_for
from k3lib.io.metrics.parse import Exposition, Sample, SkippedLine, parse_exposition

_HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


@dataclass(frozen=True)
class EndpointScrape:
    """One endpoint's samples at one moment, or the error that kept them away (then `samples` is empty)."""

    endpoint: str
    samples: tuple[Sample, ...]
    t_wall: float
    t_mono_ns: int
    skipped: tuple[SkippedLine, ...] = ()
    error: str | None = None

    @cached_property
    def by_name(self) -> dict[str, tuple[Sample, ...]]:
        index: dict[str, list[Sample]] = {}
        for s in self.samples:
            index.setdefault(s.name, []).append(s)
        return {k: tuple(v) for k, v in index.items()}

    def resolve(self, spec: SeriesSpec) -> str | None:
        """The first of the spec's names this endpoint exposes (histograms: through any of their suffixes)."""
        for name in spec.names:
            if spec.kind == "histogram":
                if any(name + suffix in self.by_name for suffix in _HISTOGRAM_SUFFIXES):
                    return name
            elif name in self.by_name:
                return name
        return None

    def series(self, spec: SeriesSpec) -> tuple[Sample, ...]:
        """Samples of the resolved name; for histograms all of _bucket/_count/_sum."""
        name = self.resolve(spec)
        if name is None:
            return ()
        if spec.kind == "histogram":
            return tuple(s for suffix in _HISTOGRAM_SUFFIXES for s in self.by_name.get(name + suffix, ()))
        return self.by_name[name]


@dataclass(frozen=True)
class Snapshot:
    """Every endpoint scraped at (about) one moment. `t_wall` is unix seconds, `t_mono_ns` is perf_counter_ns,
    the clock the chat client marks requests with, so windows line up with client timings."""

    endpoints: tuple[EndpointScrape, ...]
    t_wall: float = field(default_factory=time.time)
    t_mono_ns: int = field(default_factory=time.perf_counter_ns)

    @classmethod
    def from_text(cls, text: str, endpoint: str = "<text>", *, t_wall: float | None = None,
                  t_mono_ns: int | None = None) -> Snapshot:
        """A snapshot of one exposition read from a file or a string (tests, `k3 inspect metrics FILE`)."""
        return cls.from_expositions({endpoint: parse_exposition(text)}, t_wall=t_wall, t_mono_ns=t_mono_ns)

    @classmethod
    def from_expositions(cls, expositions: dict[str, Exposition], *, t_wall: float | None = None,
                         t_mono_ns: int | None = None) -> Snapshot:
        wall = time.time() if t_wall is None else t_wall
        mono = time.perf_counter_ns() if t_mono_ns is None else t_mono_ns
        scrapes = tuple(
            EndpointScrape(endpoint=url, samples=exp.samples, skipped=exp.skipped, t_wall=wall, t_mono_ns=mono)
            for url, exp in expositions.items()
        )
        return cls(endpoints=scrapes, t_wall=wall, t_mono_ns=mono)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(e.endpoint for e in self.endpoints)

    def endpoint(self, url: str) -> EndpointScrape:
        for e in self.endpoints:
            if e.endpoint == url:
                return e
        raise KeyError(f"{url} is not in this snapshot (it holds {', '.join(self.urls) or 'nothing'})")

    def _scrapes(self, endpoint: str | None) -> tuple[EndpointScrape, ...]:
        return self.endpoints if endpoint is None else (self.endpoint(endpoint),)

    def samples(self, canonical: str, endpoint: str | None = None) -> list[tuple[str, Sample]]:
        """(endpoint, sample) pairs of a canonical series, each endpoint through the first name it exposes."""
        spec = spec_for(canonical)
        return [(e.endpoint, s) for e in self._scrapes(endpoint) for s in e.series(spec)]

    def value(self, canonical: str, endpoint: str | None = None) -> float | None:
        """The series aggregated as its meaning requires (usage → max; counters, running/waiting → sum) over
        engines, label values and endpoints; None when no endpoint carries it. Histograms give their count."""
        spec = spec_for(canonical)
        if spec.kind == "info":
            raise ValueError(f"{canonical} is an info series; use cache_config_info()")
        values = [s.value for _, s in self.samples(canonical, endpoint)
                  if spec.kind != "histogram" or s.name.endswith("_count")]
        values = [v for v in values if not math.isnan(v)]
        if not values:
            return None
        if spec.aggregate == "max":
            return max(values)
        if spec.aggregate == "mean":
            return sum(values) / len(values)
        return math.fsum(values)

    def values(self, canonicals: tuple[str, ...] | list[str]) -> dict[str, float | None]:
        return {c: self.value(c) for c in canonicals}

    def engines(self) -> int:
        """Distinct (endpoint, engine) pairs among the server's own series; an endpoint without `engine` counts 1."""
        total = 0
        for e in self.endpoints:
            if not e.samples:
                continue
            engines = {s.labels["engine"] for s in e.samples if "engine" in s.labels}
            total += len(engines) or 1
        return total

    def ranks(self) -> list[tuple[str, str]]:
        """(endpoint, engine label) of every DP rank the server's series show, in endpoint then rank order."""
        out: list[tuple[str, str]] = []
        for e in self.endpoints:
            engines = {s.labels["engine"] for s in e.samples if "engine" in s.labels and s.name.startswith(SERVER_PREFIXES)}
            out.extend((e.endpoint, engine) for engine in sorted(engines, key=_engine_order))
        return out

    def rank_view(self, endpoint: str, engine: str) -> Snapshot:
        """This snapshot restricted to one DP rank: the endpoint's samples labelled with that engine."""
        scrape = self.endpoint(endpoint)
        samples = tuple(s for s in scrape.samples if s.labels.get("engine") == engine)
        return Snapshot((EndpointScrape(endpoint, samples, scrape.t_wall, scrape.t_mono_ns),),
                        t_wall=self.t_wall, t_mono_ns=self.t_mono_ns)

    def model_name(self) -> str | None:
        """The `model_name` label of the server's series (vLLM: the first --served-model-name)."""
        for e in self.endpoints:
            for s in e.samples:
                if s.name.startswith(SERVER_PREFIXES) and s.labels.get("model_name"):
                    return s.labels["model_name"]
        return None

    def cache_config_info(self, engine: str | None = None, endpoint: str | None = None) -> dict[str, str]:
        """`vllm:cache_config_info` labels as strings, exactly as exposed ("True", "None", "16"); the lowest
        engine's unless `engine` is given; {} when absent (V0 and very old V1 builds may lack it)."""
        rows = [s for _, s in self.samples("cache_config_info", endpoint)]
        if engine is not None:
            rows = [s for s in rows if s.labels.get("engine") == engine]
        if not rows:
            return {}
        rows.sort(key=lambda s: _engine_order(s.labels.get("engine")))
        return dict(rows[0].labels)

    def skipped(self) -> list[tuple[str, SkippedLine]]:
        return [(e.endpoint, line) for e in self.endpoints for line in e.skipped]


def _engine_order(engine: str | None) -> tuple[int, str]:
    if engine is None:
        return (-1, "")
    return (int(engine), engine) if engine.isdigit() else (1 << 30, engine)


def require(snapshot: Snapshot, canonical: str, endpoint: str | None = None) -> float:
    """The aggregated value of a series the caller cannot do without, or MissingSeriesError naming every
    endpoint looked at and every name tried."""
    value = snapshot.value(canonical, endpoint)
    if value is not None:
        return value
    spec = spec_for(canonical)
    scrapes = snapshot._scrapes(endpoint)
    where = ", ".join(_describe(e) for e in scrapes) or "no endpoint"
    raise MissingSeriesError(f"no {spec.tried()} at {where} — {_hint(scrapes)}")


def _describe(scrape: EndpointScrape) -> str:
    return f"{scrape.endpoint} (scrape failed: {scrape.error})" if scrape.error else scrape.endpoint


def _hint(scrapes: tuple[EndpointScrape, ...]) -> str:
    if scrapes and all(e.error for e in scrapes):
        return "is the server up and the URL its /metrics?"
    if not any(s.name.startswith(SERVER_PREFIXES) for e in scrapes for s in e.samples):
        return "is this a vLLM server?"
    # Some vllm: series are there: the version predates this one, hides it, or it needs a flag.
    return ("the server exposes other vllm: series; this one may need a newer vLLM, a flag, or "
            "--show-hidden-metrics-for-version")
