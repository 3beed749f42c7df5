"""The emulator's vLLM-visible HTTP contract: endpoints, shapes, exact error texts, metric names."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from k3lib.emulator import FAULTS, PROFILES, EmulatorConfig, start_emulator

API_KEY = "sk-test-emulator"


@pytest.fixture(scope="module")
def server():
    cfg = EmulatorConfig.from_profile("demo", time_scale=0.02, api_key=API_KEY)
    with start_emulator(cfg, host="127.0.0.1", port=0) as handle:
        yield handle


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=20, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_public_names_are_exported():
    import k3lib.emulator as emu

    assert emu.__all__ == sorted(emu.__all__)
    assert {"demo", "kimi-k3-h200x16"} <= set(PROFILES)
    assert {"kv-starved", "oom-startup", "crash", "tool-markup-leak"} <= set(FAULTS)


def test_handle_urls(server):
    assert server.url == f"http://127.0.0.1:{server.port}"
    assert server.metrics_url.endswith("/metrics") and server.dcgm_url.endswith("/_emulator/dcgm/metrics")


def test_health_is_empty_200(client):
    r = client.get("/health")
    assert r.status_code == 200 and r.content == b""


def test_version_and_models_card(client):
    # vLLM's /version, and the emulator naming itself (a run against it is a demo, issue 43)
    assert client.get("/version").json() == {"version": "0.33.0", "emulator": "k3kit-emulator"}
    card = client.get("/v1/models").json()["data"][0]
    assert card["id"] == "kimi-k3" and card["root"] == "moonshotai/Kimi-K3"
    assert card["owned_by"] == "vllm" and card["max_model_len"] == 4096 and card["object"] == "model"
    assert card["permission"][0]["object"] == "model_permission"


@pytest.mark.parametrize("path, needs_key", [
    pytest.param("/v1/models", True, id="v1-needs-key"),
    pytest.param("/metrics", False, id="metrics-open"),
    pytest.param("/health", False, id="health-open"),
    pytest.param("/version", False, id="version-open"),
])
def test_api_key_guards_only_v1(server, path, needs_key):
    r = httpx.get(server.url + path)
    if needs_key:
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
    else:
        assert r.status_code == 200


def test_tokenize_roundtrip_prompt_and_chat(client):
    text = "Hello, world!  Tokens are   stable."
    r = client.post("/tokenize", json={"prompt": text, "return_token_strs": True}).json()
    assert r["count"] == len(r["tokens"]) and r["max_model_len"] == 4096
    assert "".join(r["token_strs"]) == text
    assert client.post("/tokenize", json={"prompt": text}).json()["tokens"] == r["tokens"]
    assert client.post("/detokenize", json={"tokens": r["tokens"]}).json() == {"prompt": text}
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    a = client.post("/tokenize", json={"messages": msgs}).json()["tokens"]
    b = client.post("/tokenize", json={"messages": msgs + [{"role": "assistant", "content": "Yo"},
                                                              {"role": "user", "content": "More"}]}).json()["tokens"]
    head = client.post("/tokenize", json={"messages": msgs, "add_generation_prompt": False}).json()["tokens"]
    assert b[:len(head)] == head and len(a) > len(head)


def test_chat_non_stream_shape(client):
    r = client.post("/v1/chat/completions", json={"model": "kimi-k3", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["system_fingerprint"].startswith("vllm-0.33.0-")
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] and choice["message"]["reasoning"]
    assert "reasoning_content" not in choice["message"]
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # vLLM counts the prompt's tokens served from the prefix cache: a whole number, at most the prompt itself
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert type(cached) is int and 0 <= cached <= usage["prompt_tokens"], usage


def _events(resp) -> list:
    out = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            out.append(line[6:])
    return out


def _without_nulls(usage: dict) -> dict:
    return {k: ({dk: dv for dk, dv in v.items() if dv is not None} if isinstance(v, dict) else v)
            for k, v in usage.items() if v is not None}


def test_chat_stream_matches_non_stream(client):
    body = {"messages": [{"role": "user", "content": "Tell me about streams"}], "seed": 1}
    full = client.post("/v1/chat/completions", json=body).json()
    with client.stream("POST", "/v1/chat/completions",
                       json={**body, "stream": True, "stream_options": {"include_usage": True}}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = _events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    # the same figures; a streamed usage chunk leaves out the fields that are null (as vLLM 0.32 does)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == _without_nulls(full["usage"])
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning") or "" for c in chunks if c["choices"])
    assert content == full["choices"][0]["message"]["content"]
    assert reasoning == full["choices"][0]["message"]["reasoning"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_completions_exact_max_tokens(client):
    r = client.post("/v1/completions", json={"prompt": "once upon a time", "max_tokens": 10}).json()
    assert r["object"] == "text_completion" and r["usage"]["completion_tokens"] == 10
    assert r["choices"][0]["finish_reason"] == "length"
    with client.stream("POST", "/v1/completions", json={"prompt": "once upon a time", "max_tokens": 10,
                                                         "stream": True}) as resp:
        events = _events(resp)
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert text == r["choices"][0]["text"]


def test_error_over_max_model_len(client):
    prompt = " ".join(f"w{i}" for i in range(4100))
    r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 5})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert err["message"] == ("This model's maximum context length is 4096 tokens. However, your prompt contains "
                              "4100 input tokens, which exceeds this limit even without any output tokens. Please "
                              "reduce the length of the input prompt.")


def test_max_tokens_is_clamped_not_rejected(client):
    prompt = " ".join(f"c{i}" for i in range(4090))
    r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 100})
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 6 and r.json()["choices"][0]["finish_reason"] == "length"


def test_unknown_model_404(client):
    r = client.post("/v1/chat/completions", json={"model": "gpt-x", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "The model `gpt-x` does not exist."
    assert r.json()["error"]["type"] == "NotFoundError"


def test_metrics_names_types_and_labels(client):
    client.post("/v1/completions", json={"prompt": "metrics please", "max_tokens": 3})
    r = client.get("/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = families(r.text)
    # prometheus_client names a counter family without `_total`; its samples keep it.
    for counter in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions",
                    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
                    "vllm:prompt_tokens_cached", "vllm:prompt_tokens_by_source"):
        assert fams[counter].type == "counter", counter
        assert all(s.name in (counter + "_total", counter + "_created") for s in fams[counter].samples)
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                  "vllm:cache_config_info", "vllm:num_requests_waiting_by_reason"):
        assert fams[gauge].type == "gauge", gauge
    for hist in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                 "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                 "vllm:request_inference_time_seconds", "vllm:request_prompt_tokens",
                 "vllm:request_generation_tokens", "vllm:iteration_tokens_total", "vllm:request_num_preemptions"):
        assert fams[hist].type == "histogram", hist
    run = fams["vllm:num_requests_running"].samples[0]
    assert run.labels == {"model_name": "kimi-k3", "engine": "0"}
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples if s.name.endswith("_total")}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    info = fams["vllm:cache_config_info"].samples[0].labels
    assert info["block_size"] == "16" and info["enable_prefix_caching"] == "True"
    assert info["gpu_memory_utilization"] == "0.9" and int(info["num_gpu_blocks"]) > 0
    assert int(info["kv_cache_size_tokens"]) == int(info["num_gpu_blocks"]) * 16
    for gone in ("vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries", "vllm:time_per_output_token_seconds"):
        assert gone not in fams


def test_metric_counts_follow_vllm_test(server, client):
    """vLLM's own test: 10 completions of max_tokens=10 → exact counts (on a fresh engine)."""
    client.post("/_emulator/restart", json={})
    prompt = " ".join(f"m{i}" for i in range(20))
    for i in range(10):
        client.post("/v1/completions", json={"prompt": prompt + f" r{i}", "max_tokens": 10})
    s = {}
    for fam in families(client.get("/metrics").text).values():
        for sample in fam.samples:
            s[sample.name] = s.get(sample.name, 0) + sample.value
    assert s["vllm:time_to_first_token_seconds_count"] == 10
    assert s["vllm:inter_token_latency_seconds_count"] == 90
    assert s["vllm:generation_tokens_total"] == 100
    assert s["vllm:prompt_tokens_total"] == 10 * 21
    assert s["vllm:request_success_total"] == 10
    assert s["vllm:iteration_tokens_total_count"] >= 10
    assert s["vllm:request_params_max_tokens_sum"] == 100


def test_dcgm_exposition(client):
    fams = families(client.get("/_emulator/dcgm/metrics").text)
    used = fams["DCGM_FI_DEV_FB_USED"].samples[0]
    free = fams["DCGM_FI_DEV_FB_FREE"].samples[0]
    assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(used.labels)
    assert used.labels["modelName"] == "NVIDIA H200"
    assert used.value + free.value == 143771
    assert used.value == round(143771 * 0.9)
    assert "DCGM_FI_DEV_GPU_UTIL" in fams


def test_startup_log_and_collect_env(client):
    log = client.get("/_emulator/log").text
    for needle in ("vLLM server version 0.33.0, serving model moonshotai/Kimi-K3", "non-default args: {",
                   "Available KV cache memory: ", "Maximum concurrency for 4,096 tokens per request: ",
                   '"auto" tool choice has been enabled.', "Application startup complete."):
        assert needle in log, needle
    assert "(APIServer pid=1) INFO " in log and "GPU KV cache size: " in log
    env = client.get("/_emulator/collect_env").text
    for needle in ("PyTorch version              : 2.9.0+cu130", "CUDA used to build PyTorch   : 13.0",
                   "Nvidia driver version        : 580.", "GPU 0: NVIDIA H200", "vLLM Version                 : 0.33.0"):
        assert needle in env, needle


def test_log_dir_files(tmp_path: Path):
    cfg = EmulatorConfig.from_profile("demo", time_scale=0.02, log_dir=str(tmp_path))
    with start_emulator(cfg) as h:
        httpx.get(h.url + "/health")
    assert "Application startup complete." in (tmp_path / "vllm-server.log").read_text()
    assert "vLLM Version" in (tmp_path / "collect_env.txt").read_text()


def test_kimi_profile_realistic_scale():
    from k3lib.emulator.gpu import plan_memory

    cfg = EmulatorConfig.from_profile("kimi-k3-h200x16").resolved()
    plan = plan_memory(cfg)
    assert cfg.block_size == 64 and cfg.max_num_seqs == 5 and cfg.max_model_len == 32768
    assert cfg.tensor_parallel_size * cfg.data_parallel_size == cfg.gpu_count == 16
    assert 90_000 < plan.weights_mib < 110_000      # 1.68 TB over 16 cards
    assert plan.kv_tokens > 5 * cfg.max_model_len  # the recipe's 5 × 32k fit comfortably


@pytest.mark.slow  # a timing: in the slow layer, so that `make test-fast` holds beside another run
def test_small_replies_are_not_delayed_by_nagle(client):
    """A JSON reply is two writes (head, body); without TCP_NODELAY the body waits ~40 ms for an ACK on every
    request. The fastest of 15 is what the server can do: load delays some requests, never all of them."""
    import time

    times = []
    for _ in range(15):
        t = time.perf_counter()
        client.get("/version")
        times.append(time.perf_counter() - t)
    assert min(times) < 0.03, sorted(times)
