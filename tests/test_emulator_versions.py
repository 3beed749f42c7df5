"""The emulator follows the vLLM version it reports: names, shapes and log lines that changed over releases."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from k3lib.emulator import EmulatorConfig, start_emulator


@pytest.fixture(scope="module")
def server():
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02)) as h:
        yield h


@pytest.fixture()
def c(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
        client.post("/_emulator/restart", json={"vllm_version": "0.33.0", "faults": []})


def at(c, version: str, *faults: str) -> None:
    assert c.post("/_emulator/restart", json={"vllm_version": version, "faults": list(faults)}).status_code == 200


def metric_names(c) -> set[str]:
    c.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 3})
    return {f.name for f in text_string_to_metric_families(c.get("/metrics").text)}


@pytest.mark.parametrize("version, present, absent", [
    pytest.param("0.10.0", {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits",
                            "vllm:time_per_output_token_seconds", "vllm:kv_cache_usage_perc"},
                 {"vllm:inter_token_latency_seconds", "vllm:prompt_tokens_cached", "vllm:request_prefill_kv_computed_tokens"},
                 id="0.10.0"),
    pytest.param("0.11.0", {"vllm:gpu_cache_usage_perc", "vllm:inter_token_latency_seconds",
                            "vllm:time_per_output_token_seconds", "vllm:request_time_per_output_token_seconds"},
                 {"vllm:prompt_tokens_by_source"}, id="0.11.0"),
    pytest.param("0.14.1", {"vllm:kv_cache_usage_perc", "vllm:request_prefill_kv_computed_tokens"},
                 {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds", "vllm:prompt_tokens_cached"},
                 id="0.14.1"),
    pytest.param("0.24.0", {"vllm:num_requests_waiting_by_reason", "vllm:prompt_tokens_cached"},
                 {"vllm:request_num_preemptions", "vllm:admission_rejections"}, id="0.24.0"),
])
def test_metric_names_by_version(c, version, present, absent):
    at(c, version)
    names = metric_names(c)
    assert present <= names
    assert not (absent & names)


def test_old_error_body_is_flat(c):
    at(c, "0.10.0")
    r = c.post("/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    assert r.json()["object"] == "error" and r.json()["message"] == "The model `nope` does not exist."


@pytest.mark.parametrize("version, message", [
    pytest.param("0.10.0", "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                           "(4990 in the messages, 10 in the completion). Please reduce the length of the messages "
                           "or completion.", id="0.10.0"),
    pytest.param("0.14.1", "'max_tokens' or 'max_completion_tokens' is too large: 10. This model's maximum context "
                           "length is 4096 tokens and your request has 4090 input tokens (10 > 4096 - 4090).",
                 id="0.14.1-max-tokens"),
    pytest.param("0.24.0", "This model's maximum context length is 4096 tokens. However, you requested 10 output "
                           "tokens and your prompt contains 4090 input tokens, for a total of 4100 tokens. Please "
                           "reduce the length of the input prompt or the number of requested output tokens.",
                 id="0.24.0"),
])
def test_context_length_text_by_version(c, version, message):
    at(c, version)
    n = 4990 if version == "0.10.0" else 4090
    r = c.post("/v1/completions", json={"prompt": " ".join(f"t{i}" for i in range(n)), "max_tokens": 10})
    assert r.status_code == 400
    body = r.json()
    assert (body.get("error") or body)["message"] == message


@pytest.mark.parametrize("version, fields", [
    pytest.param("0.11.0", {"reasoning_content"}, id="0.11-reasoning_content"),
    pytest.param("0.13.0", {"reasoning", "reasoning_content"}, id="0.13-both"),
    pytest.param("0.16.0", {"reasoning"}, id="0.16-reasoning"),
])
def test_reasoning_field_by_version(c, version, fields):
    at(c, version)
    msg = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}).json()[
        "choices"][0]["message"]
    assert {k for k in ("reasoning", "reasoning_content") if k in msg} == fields
    assert all(msg[f] for f in fields)


@pytest.mark.parametrize("version, details, fingerprint", [
    pytest.param("0.22.0", None, None, id="0.22-null"),
    pytest.param("0.24.0", {"cached_tokens": 0}, "vllm-0.24.0-", id="0.24-zero"),
])
def test_cached_tokens_zero_and_fingerprint(c, version, details, fingerprint):
    at(c, version)
    r = c.post("/v1/completions", json={"prompt": "fresh prompt never seen", "max_tokens": 2}).json()
    assert r["usage"]["prompt_tokens_details"] == details
    assert (r["system_fingerprint"] or "").startswith(fingerprint or "") and \
        (r["system_fingerprint"] is None) == (fingerprint is None)


@pytest.mark.parametrize("version, lines, not_lines", [
    pytest.param("0.10.0", ["INFO ", "vLLM API server version 0.10.0", "GPU KV cache size: ",
                            "\"auto\" tool choice has been enabled please note"], ["(APIServer pid="], id="0.10.0"),
    pytest.param("0.14.1", ["(APIServer pid=1) INFO", "vLLM API server version 0.14.1",
                            "(EngineCore_DP0 pid="], ["serving model"], id="0.14.1"),
    pytest.param("0.28.0", ["vLLM server version 0.28.0, serving model moonshotai/Kimi-K3",
                            "tokens, Maximum concurrency for 4,096 tokens per request: "], [], id="0.28.0"),
])
def test_startup_log_by_version(c, version, lines, not_lines):
    at(c, version)
    log = c.get("/_emulator/log").text
    for line in lines:
        assert line in log, line
    for line in not_lines:
        assert line not in log, line
    if version == "0.10.0":
        assert log.startswith("INFO ")


@pytest.mark.parametrize("version, status", [pytest.param("0.10.0", 500, id="0.10-500"),
                                             pytest.param("0.11.0", 503, id="0.11-503")])
def test_dead_engine_health_status(c, version, status):
    at(c, version, "crash=1")
    c.post("/v1/completions", json={"prompt": "a", "max_tokens": 1})
    c.post("/v1/completions", json={"prompt": "b", "max_tokens": 1})
    r = c.get("/health")
    assert r.status_code == status and r.content == b""


def test_the_emulator_reads_its_version_with_the_kits_one_parser():
    """No second parser: the emulator's release numbers come from k3lib.core.versions (PEP 440), a local tag and a
    candidate read as their release, anything else refused; only core/versions.py imports packaging's."""
    import ast
    import pathlib

    from k3lib.core.errors import BadInputError

    cfg = EmulatorConfig.from_profile("demo", vllm_version="0.27.0rc9+cu130")
    assert cfg.version() == (0, 27, 0) and cfg.at_least("0.27") and not cfg.at_least("0.27.1")
    with pytest.raises(BadInputError, match="not a vLLM version"):
        EmulatorConfig.from_profile("demo", vllm_version="latest")
    root = pathlib.Path(__file__).resolve().parents[1] / "k3lib"
    parsers = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("packaging"):
                parsers.append(str(path.relative_to(root)))
            if isinstance(node, ast.FunctionDef) and node.name == "parse_version":
                parsers.append(f"{path.relative_to(root)} def parse_version")
    assert sorted(parsers) == ["core/versions.py", "core/versions.py def parse_version"]
