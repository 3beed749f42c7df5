"""The shared clock of a measured run: one /metrics sampler and one GPU sampler, started and stopped together.

Used by the capacity axis for its four phases and by the OOM explorer for each burst.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from .gpu import DcgmExporterSource, GpuSource, NvmlSource, PrometheusGpuSource, gpu_sampler
from .metrics import MetricsSampler
from ..core.params import GpuMetricsParams

SCRAPE_TIMEOUT_S = 3.0


def gpu_source(gpu: GpuMetricsParams, timeout_s: float, http: httpx.Client | None = None) -> GpuSource | None:
    """The GPU memory source the parameters name (the kit pins the emulator's dcgm path when it started one).
    `http` is reused by the dcgm source: a client per scrape would rebuild a TLS context every tick."""
    if gpu.source == "dcgm" and gpu.url:
        return DcgmExporterSource(list(gpu.urls) or gpu.url, http, timeout_s=timeout_s)
    if gpu.source == "prometheus" and gpu.url:
        return PrometheusGpuSource(gpu.url, selector=gpu.selector)
    if gpu.source == "nvml":
        return NvmlSource()
    return None



class Timeline:
    """The /metrics and GPU samplers of one run (or one explorer burst), started together, stopped together."""

    def __init__(self, metrics_urls: Sequence[str], gpu: GpuMetricsParams, *, interval_s: float,
                 max_duration_s: float) -> None:
        timeout = max(min(interval_s, SCRAPE_TIMEOUT_S), 0.5)
        self.metrics = MetricsSampler(list(metrics_urls), interval_s=interval_s, max_duration_s=max_duration_s,
                                      timeout_s=timeout)
        self._http = httpx.Client(timeout=timeout) if gpu.source == "dcgm" else None
        self.gpu_source = gpu_source(gpu, timeout, self._http)
        self.gpu_kind = gpu.source
        self.gpu = (gpu_sampler(self.gpu_source, interval_s=interval_s, max_duration_s=max_duration_s)
                    if self.gpu_source is not None else None)

    def start(self) -> Timeline:
        self.metrics.start()
        if self.gpu is not None:
            self.gpu.start()
        return self

    def stop(self) -> None:
        # a sampler blocked in a scrape of a stalled endpoint is a daemon thread: do not wait for it long
        self.metrics.stop(timeout_s=2 * SCRAPE_TIMEOUT_S)
        if self.gpu is not None:
            self.gpu.stop(timeout_s=2 * SCRAPE_TIMEOUT_S)
        if self._http is not None and not (self.gpu is not None and self.gpu.running):
            self._http.close()

    def metric_rows(self) -> list[dict[str, Any]]:
        return self.metrics._sampler.rows()  # noqa: SLF001 — MetricsSampler exposes frame() only

    def gpu_rows(self) -> list[dict[str, Any]]:
        return self.gpu.rows() if self.gpu is not None else []

    def errors(self) -> dict[str, list[str]]:
        out = {"metrics": [e.error for e in self.metrics.errors][:20]}
        if self.gpu is not None:
            out["gpu"] = [e.error for e in self.gpu.errors][:20]
        return out
