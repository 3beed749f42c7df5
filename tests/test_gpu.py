"""GPU sources behind one Protocol: NVML (real: unavailable here; fake: happy path), dcgm-exporter text, Prometheus."""

from __future__ import annotations

import sys
import threading
import time
import types

import httpx
import pytest

from k3lib.core.errors import ProtocolError, TargetUnreachable
from k3lib.io.gpu import (
    MIB,
    DcgmExporterSource,
    GpuSample,
    GpuSource,
    NvmlSource,
    PrometheusGpuSource,
    cuda_version_text,
    gpu_sampler,
    gpu_samples_from_dcgm,
)
from k3lib.io.metrics import parse_exposition

DCGM_TEXT = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H200",Hostname="node-1",DCGM_FI_DRIVER_VERSION="570.124.06"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H200",Hostname="node-1",DCGM_FI_DRIVER_VERSION="570.124.06"} 12
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H200",Hostname="node-1"} 4000
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA H200",Hostname="node-1"} 140000
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H200",Hostname="node-1"} 139000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA H200",Hostname="node-1"} 3000
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H200",Hostname="node-1"} 1980
"""


def test_dcgm_text_to_samples():
    gpus = gpu_samples_from_dcgm(parse_exposition(DCGM_TEXT).samples, t_wall=123.0)
    assert gpus == [
        GpuSample(t_wall=123.0, host="node-1", gpu=0, uuid="GPU-aaaa", name="NVIDIA H200",
                  fb_used_bytes=139000 * MIB, fb_total_bytes=143000 * MIB, util_pct=87.0),
        GpuSample(t_wall=123.0, host="node-1", gpu=1, uuid="GPU-bbbb", name="NVIDIA H200",
                  fb_used_bytes=3000 * MIB, fb_total_bytes=143000 * MIB, util_pct=12.0),
    ]
    assert gpus[0].fb_used_frac == pytest.approx(139000 / 143000)


def test_dcgm_reserved_counts_in_total_and_missing_free_gives_none():
    text = ('DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n"} 10\nDCGM_FI_DEV_FB_FREE{gpu="0",Hostname="n"} 80\n'
            'DCGM_FI_DEV_FB_RESERVED{gpu="0",Hostname="n"} 10\nDCGM_FI_DEV_FB_USED{gpu="1",Hostname="n"} 5\n')
    g0, g1 = gpu_samples_from_dcgm(parse_exposition(text).samples)
    assert g0.fb_total_bytes == 100 * MIB
    assert (g1.fb_used_bytes, g1.fb_total_bytes, g1.util_pct) == (5 * MIB, None, None)


def test_dcgm_exporter_source_over_mock_transport():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "node-1":
            return httpx.Response(200, text=DCGM_TEXT)
        return httpx.Response(200, text="python_info 1\n")

    client = httpx.Client(transport=httpx.MockTransport(handler))
    source: GpuSource = DcgmExporterSource(["http://node-1:9400/metrics"], client)
    assert [g.gpu for g in source.sample()] == [0, 1]
    info = source.describe()
    assert (info.source, info.available, info.driver_version) == ("dcgm", True, "570.124.06")
    with pytest.raises(ProtocolError, match="is this a dcgm-exporter"):
        DcgmExporterSource("http://other:9400/metrics", client).sample()


def test_dcgm_exporter_unreachable_is_a_target_error():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(refuse))
    with pytest.raises(TargetUnreachable, match="node-9"):
        DcgmExporterSource("http://node-9:9400/metrics", client).sample()


class FakePrometheus:
    """PrometheusConnect's `custom_query` over the canned DCGM text, as instant-vector results."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def custom_query(self, query: str):
        self.queries.append(query)
        name = query.split("{")[0]
        return [{"metric": {"__name__": s.name, **s.labels, "instance": "10.0.0.1:9400"},
                 "value": [1750000000.0, repr(s.value)]}
                for s in parse_exposition(DCGM_TEXT).samples if s.name == name]


def test_prometheus_source_with_fake_connect():
    fake = FakePrometheus()
    source = PrometheusGpuSource("http://prom:9090", selector='Hostname="node-1"', connect=fake)
    gpus = source.sample()
    assert [(g.host, g.gpu, g.fb_used_bytes, g.util_pct) for g in gpus] == [
        ("node-1", 0, 139000 * MIB, 87.0), ("node-1", 1, 3000 * MIB, 12.0)]
    assert 'DCGM_FI_DEV_FB_USED{Hostname="node-1"}' in fake.queries
    assert source.describe().source == "prometheus"


def test_prometheus_source_translates_failures():
    class Down:
        def custom_query(self, query):
            raise ConnectionError("connection refused")

    with pytest.raises(TargetUnreachable, match="prom:9090"):
        PrometheusGpuSource("http://prom:9090", connect=Down()).sample()

    class Garbled:
        def custom_query(self, query):
            return [{"metric": {}, "value": "nope"}]

    with pytest.raises(ProtocolError):
        PrometheusGpuSource("http://prom:9090", connect=Garbled()).sample()


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_nvml_works(), reason="this machine has NVML; the unavailable path is covered by fakes below")
def test_real_nvml_on_a_gpu_less_machine_is_unavailable_not_an_error():
    source = NvmlSource()
    assert source.sample() == []
    info = source.describe()
    assert info.available is False and info.source == "nvml"
    assert "NVML" in info.reason


def test_nvml_missing_package_is_described(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    source = NvmlSource(host="h")
    assert source.sample() == []
    assert "pip install nvidia-ml-py" in source.describe().reason


def fake_pynvml(fail_init: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    def utilization(handle):
        if handle == 1:
            raise NVMLError("Not Supported")  # e.g. a MIG-enabled parent
        return types.SimpleNamespace(gpu=55, memory=20)

    m.NVMLError = NVMLError
    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "590.48.01"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13010
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) * 1000, total=8000, free=0)
    m.nvmlDeviceGetUtilizationRates = utilization
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200" if h == 0 else "NVIDIA H200"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    return m


def test_nvml_happy_path_with_fake_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    source = NvmlSource(host="gpu-node")
    g0, g1 = source.sample()
    assert (g0.host, g0.gpu, g0.uuid, g0.name, g0.fb_used_bytes, g0.fb_total_bytes, g0.util_pct) == (
        "gpu-node", 0, "GPU-0", "NVIDIA H200", 1000, 8000, 55.0)
    assert (g1.name, g1.util_pct, g1.fb_used_bytes) == ("NVIDIA H200", None, 2000)
    info = source.describe()
    assert (info.available, info.driver_version, info.cuda_driver_version, info.gpu_count) == (
        True, "590.48.01", "13.1", 2)


def test_nvml_init_failure_is_described(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    source = NvmlSource()
    assert source.sample() == []
    assert source.describe().reason == "NVML unavailable: Driver Not Loaded"


def test_nvml_misspelt_function_raises_rather_than_reading_zero_gpus(monkeypatch):
    """Only NVML's own errors become 'field unknown'; a bug in a call (here a function NVML does not have) must
    not turn into "0 GPUs"."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    source = NvmlSource(host="h")
    assert source._init() is not None
    with pytest.raises(AttributeError):
        source._call("nvmlDeviceGetCout")
    module = sys.modules["pynvml"]
    monkeypatch.setattr(module, "nvmlDeviceGetCount", lambda: 1 / 0)  # a non-NVML failure inside a call
    with pytest.raises(ZeroDivisionError):
        source.sample()


def test_nvml_unsupported_field_is_logged_and_left_unknown(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    with caplog.at_level("DEBUG", logger="k3lib.io.gpu"):
        _, g1 = NvmlSource(host="h").sample()
    assert g1.util_pct is None
    assert any("nvmlDeviceGetUtilizationRates" in r.getMessage() and "Not Supported" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("encoded, text", [pytest.param(12040, "12.4", id="12.4"),
                                           pytest.param(13010, "13.1", id="13.1"),
                                           pytest.param(11080, "11.8", id="11.8")])
def test_cuda_version_text(encoded, text):
    assert cuda_version_text(encoded) == text


def test_gpu_sampler_rows_per_gpu_and_stops_by_itself(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    sampler = gpu_sampler(NvmlSource(host="h"), interval_s=0.05, max_duration_s=0.3).start()
    sampler.join(timeout_s=5)
    assert not sampler.running
    frame = sampler.frame()
    assert {"t_wall", "t_rel_s", "gpu", "fb_used_bytes", "fb_total_bytes", "util_pct", "uuid"} <= set(frame.columns)
    assert len(frame) >= 4 and len(frame) % 2 == 0
    assert set(frame["gpu"]) == {0, 1}


def test_gpu_sampler_records_source_errors_and_stops_on_event():
    class Flaky:
        def sample(self):
            raise TargetUnreachable("node-2 down")

        def describe(self):
            raise NotImplementedError

    stop = threading.Event()
    sampler = gpu_sampler(Flaky(), interval_s=0.02, max_duration_s=30, stop_event=stop).start()
    time.sleep(0.1)
    stop.set()
    sampler.join(timeout_s=5)
    assert not sampler.running
    assert sampler.errors and "node-2 down" in sampler.errors[0].error
    assert sampler.frame().empty


def test_unavailable_nvml_sampler_yields_empty_frame(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = gpu_sampler(NvmlSource(), interval_s=0.05, max_duration_s=0.15).start()
    sampler.join(timeout_s=5)
    assert list(sampler.frame().columns) == ["t_wall", "t_rel_s"] and not sampler.errors


def test_prometheus_range_query_gives_samples_per_step():
    from datetime import datetime, timezone

    class RangeFake:
        def custom_query_range(self, query, start_time, end_time, step):
            name = query.split("{")[0]
            return [{"metric": {"__name__": name, "gpu": "0", "Hostname": "node-1", "UUID": "GPU-aaaa"},
                     "values": [[100.0, "10"], [105.0, "20"]]}]

    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    gpus = PrometheusGpuSource(connect=RangeFake()).sample_range(start, start, "5s")
    assert [(g.t_wall, g.fb_used_bytes, g.fb_total_bytes, g.util_pct) for g in gpus] == [
        (100.0, 10 * MIB, 30 * MIB, 10.0), (105.0, 20 * MIB, 60 * MIB, 20.0)]
