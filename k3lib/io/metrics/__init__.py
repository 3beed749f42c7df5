"""The /metrics reader: parse, canonical names across vLLM 0.10–0.33 (and V0, SGLang), snapshots of many
endpoints, window deltas and quantiles, scraping and background sampling."""

from k3lib.io.metrics.inspect import inspect_metrics, inspect_snapshot
from k3lib.io.metrics.names import BY_CANONICAL, INSPECT_SERIES, SERIES, SeriesSpec, spec_for
from k3lib.io.metrics.parse import Exposition, Sample, SkippedLine, parse_exposition
from k3lib.io.metrics.sampler import IntervalSampler, SampleError
from k3lib.io.metrics.scrape import SAMPLED_SERIES, MetricsSampler, metrics_url, scrape, scrape_async
from k3lib.io.metrics.snapshot import EndpointScrape, Snapshot, require
from k3lib.io.metrics.window import (
    CounterDelta,
    HistogramWindow,
    QuantileBounds,
    delta,
    histogram_quantile,
    quantile_bounds,
    window_histogram,
    window_quantile,
)

__all__ = [
    "BY_CANONICAL",
    "CounterDelta",
    "EndpointScrape",
    "Exposition",
    "HistogramWindow",
    "INSPECT_SERIES",
    "IntervalSampler",
    "MetricsSampler",
    "QuantileBounds",
    "SAMPLED_SERIES",
    "SERIES",
    "Sample",
    "SampleError",
    "SeriesSpec",
    "SkippedLine",
    "Snapshot",
    "delta",
    "histogram_quantile",
    "inspect_metrics",
    "inspect_snapshot",
    "metrics_url",
    "parse_exposition",
    "quantile_bounds",
    "require",
    "scrape",
    "scrape_async",
    "spec_for",
    "window_histogram",
    "window_quantile",
]
