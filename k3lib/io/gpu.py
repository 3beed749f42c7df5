"""GPU memory and utilization behind one interface, from three sources: local NVML, a dcgm-exporter's /metrics,
or the same DCGM series in a Prometheus server (multi-node clusters). NVML missing is a described state, not an error.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping, Protocol, Sequence

import httpx

from k3lib.core.errors import APIError, ProtocolError, TargetUnreachable
from k3lib.io.metrics.parse import Sample, parse_exposition
from k3lib.io.metrics.sampler import IntervalSampler
from k3lib.io.metrics.scrape import DEFAULT_TIMEOUT_S

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# dcgm-exporter's default counters: framebuffer in MiB, utilization in percent.
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"  # newer exporters; NVML counts it in total = used + free + reserved
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_SERIES = (DCGM_FB_USED, DCGM_FB_FREE, DCGM_FB_RESERVED, DCGM_GPU_UTIL)


@dataclass(frozen=True)
class GpuSample:
    """One GPU (or MIG instance) at one moment. None where the source does not report a field."""

    t_wall: float
    host: str
    gpu: int
    uuid: str | None
    name: str | None
    fb_used_bytes: int | None
    fb_total_bytes: int | None
    util_pct: float | None
    mig_instance: str | None = None

    @property
    def fb_used_frac(self) -> float | None:
        if self.fb_used_bytes is None or not self.fb_total_bytes:
            return None
        return self.fb_used_bytes / self.fb_total_bytes


@dataclass(frozen=True)
class GpuSourceInfo:
    """What a source is and whether it can answer. `reason` says why not when `available` is False."""

    source: str  # "nvml" | "dcgm" | "prometheus"
    available: bool
    reason: str | None = None
    endpoint: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpu_count: int | None = None


class GpuSource(Protocol):
    def sample(self) -> list[GpuSample]: ...

    def describe(self) -> GpuSourceInfo: ...


# --- NVML -------------------------------------------------------------------------------------------------------

def _text(value: Any) -> str:
    # Older nvidia-ml-py returned bytes for names and versions.
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version_text(encoded: int) -> str:
    """NVML encodes the CUDA driver version as 1000·major + 10·minor (12040 → "12.4")."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


class NvmlSource:
    """Local GPUs through NVML (`pynvml`, from the nvidia-ml-py package), imported on first use. Without the
    package or the driver library, `sample()` returns [] and `describe()` says why; NVML's own errors never raise
    (they are logged), a bug in a call does."""

    def __init__(self, host: str | None = None) -> None:
        self.host = host or socket.gethostname()
        self._nvml: Any = None
        self._reason: str | None = None
        self._started = False
        self._lock = threading.Lock()

    def _init(self) -> Any:
        with self._lock:
            if not self._started:
                self._started = True
                try:
                    import pynvml
                except ImportError as exc:
                    self._reason = f"pynvml is not importable ({exc}); pip install nvidia-ml-py"
                    return None
                try:
                    pynvml.nvmlInit()
                except pynvml.NVMLError as exc:  # _LibraryNotFound, _DriverNotLoaded, …: all mean "no NVML here"
                    self._reason = f"NVML unavailable: {_text(exc) or type(exc).__name__}"
                    log.info("%s", self._reason)
                    return None
                self._nvml = pynvml
            return self._nvml

    def _call(self, fn: str, *args: Any) -> Any:
        """One NVML call; an NVMLError (a field a GPU does not support: MIG parent utilization, …) is logged and
        the field stays None. Anything else (a misspelt function, a wrong argument) is a bug and raises."""
        function = getattr(self._nvml, fn)
        try:
            return function(*args)
        except self._nvml.NVMLError as exc:
            log.debug("NVML %s%r failed: %s", fn, args, _text(exc) or type(exc).__name__)
            return None

    def sample(self) -> list[GpuSample]:
        nvml = self._init()
        if nvml is None:
            return []
        t_wall = time.time()
        count = self._call("nvmlDeviceGetCount") or 0
        out: list[GpuSample] = []
        for index in range(count):
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                continue
            memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            util = self._call("nvmlDeviceGetUtilizationRates", handle)
            name = self._call("nvmlDeviceGetName", handle)
            uuid = self._call("nvmlDeviceGetUUID", handle)
            out.append(GpuSample(
                t_wall=t_wall, host=self.host, gpu=index,
                uuid=_text(uuid) if uuid is not None else None,
                name=_text(name) if name is not None else None,
                fb_used_bytes=int(memory.used) if memory is not None else None,
                fb_total_bytes=int(memory.total) if memory is not None else None,
                util_pct=float(util.gpu) if util is not None else None,
            ))
        return out

    def describe(self) -> GpuSourceInfo:
        nvml = self._init()
        if nvml is None:
            return GpuSourceInfo("nvml", False, reason=self._reason, endpoint=self.host)
        driver = self._call("nvmlSystemGetDriverVersion")
        has_v2 = hasattr(nvml, "nvmlSystemGetCudaDriverVersion_v2")  # older nvidia-ml-py has only the first
        cuda = self._call("nvmlSystemGetCudaDriverVersion_v2") if has_v2 else None
        if cuda is None:
            cuda = self._call("nvmlSystemGetCudaDriverVersion")
        return GpuSourceInfo(
            "nvml", True, endpoint=self.host,
            driver_version=_text(driver) if driver is not None else None,
            cuda_driver_version=cuda_version_text(int(cuda)) if cuda is not None else None,
            gpu_count=self._call("nvmlDeviceGetCount"),
        )

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except self._nvml.NVMLError as exc:
                    log.debug("NVML shutdown failed: %s", _text(exc) or type(exc).__name__)
            self._nvml, self._started = None, False


# --- DCGM series (shared by the exporter and the Prometheus source) ---------------------------------------------

def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) or math.isinf(value) else value


def gpu_samples_from_dcgm(samples: Iterable[Sample], *, t_wall: float | None = None,
                          default_host: str = "unknown") -> list[GpuSample]:
    """Group DCGM_FI_DEV_* samples by GPU (labels Hostname, gpu, UUID, modelName; MIG: GPU_I_ID) into GpuSamples.
    Framebuffer series are MiB; total = used + free (+ reserved where exported). Pure."""
    stamp = time.time() if t_wall is None else t_wall
    # per GPU: its model name, and its series' values by series name
    by_gpu: dict[tuple[str, int, str | None, str | None], tuple[str | None, dict[str, float | None]]] = {}
    for s in samples:
        if s.name not in DCGM_SERIES:
            continue
        labels = s.labels
        try:
            index = int(labels.get("gpu", labels.get("device", "").removeprefix("nvidia")))
        except ValueError:
            continue
        host = labels.get("Hostname") or labels.get("instance") or default_host
        key = (host, index, labels.get("UUID"), labels.get("GPU_I_ID"))
        _, entry = by_gpu.setdefault(key, (labels.get("modelName"), {}))
        entry[s.name] = _finite(s.value)
    out = []
    for (host, index, uuid, mig), (name, entry) in sorted(by_gpu.items(),
                                                          key=lambda kv: (kv[0][0], kv[0][1], kv[0][3] or "")):
        used, free, reserved = entry.get(DCGM_FB_USED), entry.get(DCGM_FB_FREE), entry.get(DCGM_FB_RESERVED)
        total = None if used is None or free is None else used + free + (reserved or 0.0)
        out.append(GpuSample(
            t_wall=stamp, host=host, gpu=index, uuid=uuid, name=name,
            fb_used_bytes=int(used * MIB) if used is not None else None,
            fb_total_bytes=int(total * MIB) if total is not None else None,
            util_pct=entry.get(DCGM_GPU_UTIL), mig_instance=mig,
        ))
    return out


def _driver_from(samples: Iterable[Sample]) -> str | None:
    for s in samples:
        if s.name in DCGM_SERIES and s.labels.get("DCGM_FI_DRIVER_VERSION"):
            return s.labels["DCGM_FI_DRIVER_VERSION"]
    return None


class DcgmExporterSource:
    """dcgm-exporter endpoints scraped directly (default port 9400, path /metrics), one per node."""

    def __init__(self, urls: str | Sequence[str], client: httpx.Client | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        self._client = client
        self._timeout_s = timeout_s
        self._driver: str | None = None
        self._last_error: str | None = None

    def _fetch(self, client: httpx.Client, url: str) -> list[GpuSample]:
        try:
            response = client.get(url)
        except httpx.HTTPError as exc:
            raise TargetUnreachable(f"cannot scrape dcgm-exporter at {url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise APIError(response.status_code, "dcgm-exporter scrape failed", url=url)
        samples = parse_exposition(response.text).samples
        self._driver = self._driver or _driver_from(samples)
        gpus = gpu_samples_from_dcgm(samples, default_host=httpx.URL(url).host)
        if not gpus:
            raise ProtocolError(f"no {DCGM_FB_USED} / {DCGM_GPU_UTIL} series at {url} — is this a dcgm-exporter?")
        return gpus

    def sample(self) -> list[GpuSample]:
        client = self._client or httpx.Client(timeout=self._timeout_s)
        try:
            return [g for url in self.urls for g in self._fetch(client, url)]
        finally:
            if self._client is None:
                client.close()

    def describe(self) -> GpuSourceInfo:
        return GpuSourceInfo("dcgm", True, endpoint=", ".join(self.urls), driver_version=self._driver)


# --- Prometheus ---------------------------------------------------------------------------------------------------

def _vector_samples(result: Sequence[Mapping[str, Any]], name: str) -> list[Sample]:
    out = []
    for item in result:
        try:
            labels = dict(item["metric"])
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ProtocolError(f"unexpected Prometheus query result for {name}: {item!r}") from exc
        labels.pop("__name__", None)
        out.append(Sample(name=name, labels=labels, value=value))
    return out


class PrometheusGpuSource:
    """The DCGM series as a Prometheus server holds them for every node it scrapes. `selector` narrows them,
    e.g. 'Hostname=~"gpu-node-.*"'. `connect` is any object with PrometheusConnect's `custom_query` (tests);
    by default one is built from `url` with prometheus-api-client, imported on first use."""

    def __init__(self, url: str = "http://127.0.0.1:9090", *, selector: str = "", connect: Any = None,
                 disable_ssl: bool = False) -> None:
        self.url = url
        self.selector = selector
        self._connect = connect
        self._disable_ssl = disable_ssl

    def _client(self) -> Any:
        if self._connect is None:
            try:
                from prometheus_api_client import PrometheusConnect
            except ImportError as exc:
                raise ImportError("the Prometheus GPU source needs prometheus-api-client; "
                                  "pip install prometheus-api-client") from exc
            self._connect = PrometheusConnect(url=self.url, disable_ssl=self._disable_ssl)
        return self._connect

    def _query(self, name: str) -> list[Sample]:
        query = f"{name}{{{self.selector}}}" if self.selector else name
        try:
            result = self._client().custom_query(query)
        except Exception as exc:  # requests' and prometheus-api-client's errors, translated at the boundary
            raise TargetUnreachable(f"Prometheus query {query!r} at {self.url} failed: {exc}") from exc
        return _vector_samples(result, name)

    def sample(self) -> list[GpuSample]:
        t_wall = time.time()
        samples = [s for name in DCGM_SERIES for s in self._query(name)]
        return gpu_samples_from_dcgm(samples, t_wall=t_wall)

    def sample_range(self, start: datetime, end: datetime, step: str = "5s") -> list[GpuSample]:
        """The series over a past window (a load phase), one GpuSample per GPU per Prometheus step."""
        by_time: dict[float, list[Sample]] = {}
        for name in DCGM_SERIES:
            query = f"{name}{{{self.selector}}}" if self.selector else name
            try:
                result = self._client().custom_query_range(query, start_time=start, end_time=end, step=step)
            except Exception as exc:
                raise TargetUnreachable(f"Prometheus range query {query!r} at {self.url} failed: {exc}") from exc
            for item in result:
                for point in item.get("values", ()):
                    (sample,) = _vector_samples([{"metric": item["metric"], "value": point}], name)
                    by_time.setdefault(float(point[0]), []).append(sample)
        return [g for t in sorted(by_time) for g in gpu_samples_from_dcgm(by_time[t], t_wall=t)]

    def describe(self) -> GpuSourceInfo:
        return GpuSourceInfo("prometheus", True, endpoint=self.url)


# --- background sampling ------------------------------------------------------------------------------------------

def gpu_sampler(source: GpuSource, *, interval_s: float = 1.0, max_duration_s: float = 3600.0,
                stop_event: threading.Event | None = None) -> IntervalSampler:
    """A background sampler (the same mechanism as the metrics one) with one row per GPU per tick; its frame
    has t_wall, t_rel_s and the GpuSample fields. An unavailable NVML simply yields no rows."""
    return IntervalSampler(lambda: [asdict(g) for g in source.sample()], interval_s=interval_s,
                           max_duration_s=max_duration_s, stop_event=stop_event, name="k3-gpu-sampler")
