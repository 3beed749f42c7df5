"""The scraper and the background sampler against tiny canned /metrics servers on 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from k3lib.core.errors import APIError, MissingSeriesError, TargetUnreachable
from k3lib.io.metrics import MetricsSampler, delta, metrics_url, require, scrape, scrape_async

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


class CannedServer:
    """Serves `self.bodies[path]` (mutable between requests); unknown paths get 404."""

    def __init__(self, bodies: dict[str, str]) -> None:
        self.bodies = dict(bodies)
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                owner.hits += 1
                body = owner.bodies.get(self.path)
                data = (body or "not found").encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> CannedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    a = CannedServer({"/metrics": (FIXTURES / "vllm-0.33.prom").read_text()})
    b = CannedServer({"/metrics": (FIXTURES / "vllm-0.10.prom").read_text(), "/other": "python_info 1\n"})
    with a, b:
        yield a, b


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


@pytest.mark.parametrize(
    "given, expected",
    [
        pytest.param("http://h:8000", "http://h:8000/metrics", id="bare"),
        pytest.param("http://h:8000/", "http://h:8000/metrics", id="slash"),
        pytest.param("h:9400", "http://h:9400/metrics", id="no-scheme"),
        pytest.param("https://h/prefix/metrics", "https://h/prefix/metrics", id="kept"),
    ],
)
def test_metrics_url(given, expected):
    assert metrics_url(given) == expected


def test_sync_scrape_of_two_endpoints(servers):
    a, b = servers
    snap = scrape([a.base, b.base + "/metrics"])
    assert snap.urls == (a.base + "/metrics", b.base + "/metrics")
    assert snap.value("num_requests_running") == 15.0
    assert snap.value("kv_cache_usage_perc") == 0.61
    assert snap.engines() == 3
    assert all(e.t_wall >= snap.t_wall and e.t_mono_ns >= snap.t_mono_ns for e in snap.endpoints)


def test_async_scrape_with_given_client(servers):
    a, b = servers

    async def go():
        async with httpx.AsyncClient(timeout=5) as client:
            return await scrape_async([a.base, b.base], client)

    snap = asyncio.run(go())
    assert snap.value("prefix_cache_hits_total") == 11600.0


def test_delta_between_live_scrapes(servers):
    a, _ = servers
    before = scrape(a.base)
    a.bodies["/metrics"] = a.bodies["/metrics"].replace(
        'vllm:prompt_tokens_total{engine="1",model_name="moonshotai/Kimi-K3"} 6050.0',
        'vllm:prompt_tokens_total{engine="1",model_name="moonshotai/Kimi-K3"} 6150.0')
    after = scrape(a.base)
    d = delta(before, after, "prompt_tokens_total")
    assert (d.value, d.reset) == (100.0, False)
    assert d.elapsed_s > 0


def test_unreachable_endpoint_strict_raises_and_lenient_records():
    url = closed_port_url()
    with pytest.raises(TargetUnreachable, match="127.0.0.1"):
        scrape(url, timeout_s=2)
    snap = scrape(url, timeout_s=2, strict=False)
    assert snap.endpoints[0].error and snap.value("num_requests_running") is None
    with pytest.raises(MissingSeriesError, match="scrape failed"):
        require(snap, "num_requests_running")


def test_http_error_status_raises_api_error(servers):
    _, b = servers
    with pytest.raises(APIError) as info:
        scrape(b.base + "/nope")
    assert info.value.status == 404


def test_require_on_a_non_vllm_endpoint(servers):
    _, b = servers
    snap = scrape(b.base + "/other")
    with pytest.raises(MissingSeriesError) as info:
        require(snap, "kv_cache_usage_perc", b.base + "/other")
    assert str(info.value) == (
        f"no `vllm:kv_cache_usage_perc` or `vllm:gpu_cache_usage_perc` or `sglang:token_usage` at "
        f"{b.base}/other — is this a vLLM server?")


def test_sampler_stops_by_itself_at_max_duration(servers):
    a, b = servers
    started = time.perf_counter()
    sampler = MetricsSampler([a.base, b.base], interval_s=0.05, max_duration_s=0.4).start()
    sampler.join(timeout_s=5)
    assert not sampler.running
    assert time.perf_counter() - started < 3
    frame = sampler.frame()
    assert len(frame) >= 3
    assert list(frame.columns[:3]) == ["t_wall", "t_rel_s", "endpoints_ok"]
    assert (frame["num_requests_running"] == 15.0).all()
    assert (frame["endpoints_ok"] == 2).all()
    assert frame["t_rel_s"].is_monotonic_increasing and frame["t_rel_s"].max() < 0.4
    assert sampler.first is not None and sampler.last is not None and sampler.last.t_mono_ns > sampler.first.t_mono_ns


def test_sampler_stops_on_stop_event_and_records_unreachable_endpoint():
    stop = threading.Event()
    sampler = MetricsSampler(closed_port_url(), interval_s=0.05, max_duration_s=30, stop_event=stop).start()
    time.sleep(0.2)
    stop.set()
    sampler.join(timeout_s=5)
    assert not sampler.running
    frame = sampler.frame()
    assert len(frame) >= 1
    assert (frame["endpoints_ok"] == 0).all() and frame["kv_cache_usage_perc"].isna().all()


def test_sampler_context_manager_stops(servers):
    a, _ = servers
    with MetricsSampler(a.base, interval_s=0.05, max_duration_s=30) as sampler:
        time.sleep(0.15)
    sampler.join(timeout_s=5)
    assert not sampler.running
    assert a.hits >= 2
