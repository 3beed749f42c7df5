"""Canonical names across vLLM 0.10-era, 0.33-era, V0 and SGLang expositions, and their aggregation."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3lib.core.errors import MissingSeriesError
from k3lib.io.metrics import SERIES, Snapshot, inspect_metrics, parse_exposition, require, window_histogram

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


V0_TEXT = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="old/v0"} 0.5
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="old/v0"} 0.75
vllm:num_requests_running{model_name="old/v0"} 2.0
vllm:num_requests_swapped{model_name="old/v0"} 1.0
vllm:prompt_tokens_total{model_name="old/v0"} 100.0
"""


@pytest.mark.parametrize(
    "name, expected",
    [
        pytest.param("vllm-0.10.prom", {
            "engine": "vllm", "model_name": "demo/k3-mini", "engines": 1,
            "values": {"kv_cache_usage_perc": 0.25, "num_requests_running": 3.0, "num_requests_waiting": 1.0,
                       "num_preemptions_total": 0.0, "prefix_cache_queries_total": 4000.0,
                       "prefix_cache_hits_total": 1600.0, "prompt_tokens_total": 4100.0,
                       "generation_tokens_total": 900.0, "request_success_total": 10.0}, "out_of_domain": []}, id="vllm-0.10"),
        pytest.param("vllm-0.33.prom", {
            "engine": "vllm", "model_name": "moonshotai/Kimi-K3", "engines": 2,
            "values": {"kv_cache_usage_perc": 0.61, "num_requests_running": 12.0, "num_requests_waiting": 2.0,
                       "num_preemptions_total": 7.0, "prefix_cache_queries_total": 16000.0,
                       "prefix_cache_hits_total": 10000.0, "prompt_tokens_total": 16150.0,
                       "generation_tokens_total": 3000.0, "request_success_total": 31.0}, "out_of_domain": []}, id="vllm-0.33"),
        pytest.param("sglang.prom", {
            "engine": "sglang", "model_name": "demo/k3-sglang", "engines": 1,
            "values": {"kv_cache_usage_perc": 0.28, "num_requests_running": 12.0, "num_requests_waiting": 4.0,
                       "num_preemptions_total": None, "prefix_cache_queries_total": None,
                       "prefix_cache_hits_total": None, "prompt_tokens_total": 8000.0,
                       "generation_tokens_total": 3000.0, "request_success_total": 40.0}, "out_of_domain": []}, id="sglang"),
    ],
)
def test_inspect_fixture(name, expected):
    assert inspect_metrics(fixture(name)) == expected


def test_v0_hit_rate_gauge_is_not_a_prefix_counter():
    got = inspect_metrics(V0_TEXT)
    assert got["values"]["prefix_cache_hits_total"] is None
    assert got["values"]["prefix_cache_queries_total"] is None
    assert got["values"]["kv_cache_usage_perc"] == 0.5
    snap = Snapshot.from_text(V0_TEXT)
    assert snap.value("prefix_cache_hit_rate") == 0.75
    assert snap.value("num_requests_swapped") == 1.0


def test_deprecated_alias_is_not_double_counted():
    # 0.10 exports both prefix_cache_* and gpu_prefix_cache_*: one value, from the new name.
    snap = Snapshot.from_text(fixture("vllm-0.10.prom"))
    assert snap.value("prefix_cache_hits_total") == 1600.0
    assert {s.name for _, s in snap.samples("prefix_cache_hits_total")} == {"vllm:prefix_cache_hits_total"}


def test_old_alias_alone_is_used():
    text = "\n".join(l for l in fixture("vllm-0.10.prom").splitlines()
                     if "vllm:prefix_cache" not in l and "vllm:kv_cache" not in l)
    snap = Snapshot.from_text(text)
    assert snap.value("prefix_cache_queries_total") == 4000.0
    assert snap.value("kv_cache_usage_perc") == 0.25


@pytest.mark.parametrize(
    "name, canonical, count",
    [
        pytest.param("vllm-0.10.prom", "inter_token_latency_seconds", 890.0, id="0.10-time_per_output_token"),
        pytest.param("vllm-0.33.prom", "inter_token_latency_seconds", 2969.0, id="0.33-inter_token_latency"),
        pytest.param("sglang.prom", "inter_token_latency_seconds", 2960.0, id="sglang-tpot"),
        pytest.param("sglang.prom", "time_to_first_token_seconds", 40.0, id="sglang-ttft"),
        pytest.param("vllm-0.33.prom", "iteration_tokens", 50.0, id="iteration_tokens_total-is-histogram"),
    ],
)
def test_histogram_names_map_to_one_canonical(name, canonical, count):
    window = window_histogram(None, Snapshot.from_text(fixture(name)), canonical)
    assert window is not None
    assert window.count == count
    assert window.buckets[-1] == (float("inf"), count)


def test_iteration_tokens_total_is_not_a_counter():
    assert not any("vllm:iteration_tokens_total" in s.names for s in SERIES if s.kind == "counter")


def test_sglang_extras():
    snap = Snapshot.from_text(fixture("sglang.prom"))
    assert snap.value("prefix_cache_hit_rate") == 0.625  # a gauge, never a counter
    assert snap.value("prompt_tokens_cached_total") == 5000.0


def test_engine_aggregation_max_for_usage_sum_for_counters():
    snap = Snapshot.from_text(fixture("vllm-0.33.prom"))
    assert snap.value("kv_cache_usage_perc") == 0.61
    assert snap.value("kv_cache_usage_perc", "<text>") == 0.61
    assert snap.value("admission_rejections_total") == 2.0  # no engine label: still read
    assert snap.engines() == 2


def test_aggregation_across_endpoints():
    snap = Snapshot.from_expositions({
        "http://node-a:8000/metrics": parse_exposition(fixture("vllm-0.33.prom")),
        "http://node-b:8000/metrics": parse_exposition(fixture("vllm-0.10.prom")),
    })
    assert snap.value("num_requests_running") == 15.0
    assert snap.value("kv_cache_usage_perc") == 0.61
    assert snap.value("prefix_cache_hits_total") == 11600.0
    assert snap.value("num_requests_running", "http://node-b:8000/metrics") == 3.0
    assert snap.engines() == 3


@pytest.mark.parametrize(
    "text, canonical, message",
    [
        pytest.param("python_info 1\n", "kv_cache_usage_perc",
                     "no `vllm:kv_cache_usage_perc` or `vllm:gpu_cache_usage_perc` or `sglang:token_usage` at "
                     "http://10.0.0.9:8000/metrics — is this a vLLM server?", id="not-vllm"),
        pytest.param('vllm:num_requests_running{engine="0"} 1\n', "prefix_cache_hits_total",
                     "no `vllm:prefix_cache_hits_total` or `vllm:gpu_prefix_cache_hits_total` at "
                     "http://10.0.0.9:8000/metrics — the server exposes other vllm: series", id="older-vllm"),
    ],
)
def test_require_names_endpoint_and_every_name_tried(text, canonical, message):
    snap = Snapshot.from_text(text, endpoint="http://10.0.0.9:8000/metrics")
    with pytest.raises(MissingSeriesError) as info:
        require(snap, canonical, "http://10.0.0.9:8000/metrics")
    assert str(info.value).startswith(message)
    with pytest.raises(MissingSeriesError, match="http://10.0.0.9:8000/metrics"):
        require(snap, canonical)


def test_require_returns_the_value():
    assert require(Snapshot.from_text(fixture("vllm-0.33.prom")), "num_requests_waiting") == 2.0


def test_unknown_canonical_is_a_programming_error():
    with pytest.raises(KeyError, match="known"):
        Snapshot.from_text("").value("kv_usage")


@pytest.mark.parametrize(
    "name, engine, expected",
    [
        pytest.param("vllm-0.33.prom", None, {"block_size": "64", "kv_cache_size_tokens": "1048576",
                                              "num_gpu_blocks": "16384", "enable_prefix_caching": "True",
                                              "engine": "0"}, id="0.33-lowest-engine"),
        pytest.param("vllm-0.33.prom", "1", {"num_gpu_blocks": "16380", "engine": "1"}, id="0.33-engine-1"),
        pytest.param("vllm-0.10.prom", None, {"block_size": "16", "num_gpu_blocks": "2048", "swap_space": "4"},
                     id="0.10"),
    ],
)
def test_cache_config_info(name, engine, expected):
    info = Snapshot.from_text(fixture(name)).cache_config_info(engine=engine)
    assert info.items() >= expected.items()


def test_cache_config_info_absent_is_empty():
    assert Snapshot.from_text(fixture("sglang.prom")).cache_config_info() == {}
