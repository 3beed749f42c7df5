"""Every fault changes what the server says, the way the real defect would."""

from __future__ import annotations

import json
import time

import httpx
import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from k3lib.emulator import FAULTS, EmulatorConfig, start_emulator
from k3lib.core.errors import BadInputError

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
TOOL_BODY = {"messages": [{"role": "user", "content": "What is the weather in Oslo?"}], "tools": [WEATHER],
             "tool_choice": "auto"}


@pytest.fixture(scope="module")
def server():
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02)) as h:
        yield h


@pytest.fixture()
def c(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
        client.post("/_emulator/restart", json={"faults": [], "time_scale": 0.02})


def restart(c, *faults: str, time_scale: float = 0.02, profile: str = "demo") -> None:
    r = c.post("/_emulator/restart", json={"faults": list(faults), "time_scale": time_scale, "profile": profile})
    assert r.status_code == 200, r.text


def scrape(c, path="/metrics") -> dict:
    out: dict = {}
    for fam in text_string_to_metric_families(c.get(path).text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def sample_labels(c, family: str) -> dict:
    fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    return fams[family].samples[0].labels


# -- one probe per fault: what it says with the fault minus what it says without ------------------------
def probe_cuda12(c):
    env = c.get("/_emulator/collect_env").text
    return ("12.9" if "CUDA used to build PyTorch   : 12.9" in env and "+cu129" in env else "13.0",
            c.get("/_emulator/state").json()["image"])


def probe_driver(c):
    env = c.get("/_emulator/collect_env").text
    return env.split("Nvidia driver version        : ")[1].split(".")[0], \
        "570." in c.get("/_emulator/dcgm/metrics").text


def probe_version(c):
    return c.get("/version").json()["version"], "vLLM server version 0.27.0" in c.get("/_emulator/log").text


def probe_tool_parser(c):
    r = c.post("/v1/chat/completions", json=TOOL_BODY)
    return r.status_code, r.json().get("error", {}).get("message"), \
        '"auto" tool choice has been enabled.' in c.get("/_emulator/log").text


def probe_markup_leak(c):
    out = []
    for _ in range(3):
        msg = c.post("/v1/chat/completions", json=TOOL_BODY).json()["choices"][0]["message"]
        out.append((bool(msg.get("tool_calls")), "<|open|>tools" in (msg["content"] or "")))
    return out


def probe_bad_args(c):
    out = []
    for _ in range(4):
        call = c.post("/v1/chat/completions", json=TOOL_BODY).json()["choices"][0]["message"]["tool_calls"][0]
        try:
            jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"])
            out.append("valid")
        except (json.JSONDecodeError, jsonschema.ValidationError):
            out.append("invalid")
    return out


def probe_prefix(c):
    prompt = " ".join(f"pc{i}" for i in range(100))
    for _ in range(2):
        r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1}).json()
    return r["usage"]["prompt_tokens_details"]["cached_tokens"], \
        sample_labels(c, "vllm:cache_config_info")["enable_prefix_caching"]


def probe_starved(c):
    labels = sample_labels(c, "vllm:cache_config_info")
    return int(labels["num_gpu_blocks"]) * 16 < 2 * 4096, labels["gpu_memory_utilization"]


def probe_pool_tokens(c):
    return int(sample_labels(c, "vllm:cache_config_info")["num_gpu_blocks"]) * 16


def probe_oom_long(c):
    short = c.post("/v1/completions", json={"prompt": "short one", "max_tokens": 2}).status_code
    long_ = c.post("/v1/completions", json={"prompt": " ".join(f"l{i}" for i in range(3000)), "max_tokens": 2})
    log = c.get("/_emulator/log").text
    return (short, long_.status_code, c.get("/health").status_code,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in log and "EngineDeadError" in log)


def probe_oom_startup(c):
    log = c.get("/_emulator/log").text
    return (c.get("/health").status_code, c.get("/v1/models").status_code,
            "Application startup complete." in log, "CUDA out of memory" in log)


def probe_slow(c):
    t = time.perf_counter()
    c.post("/v1/completions", json={"prompt": "slow?", "max_tokens": 60, "ignore_eos": True})
    return time.perf_counter() - t


def probe_flaky(c):
    return [c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code for _ in range(12)]


def probe_leak(c):
    before = scrape(c, "/_emulator/dcgm/metrics")["DCGM_FI_DEV_FB_USED"]
    for i in range(5):
        c.post("/v1/completions", json={"prompt": f"leak {i}", "max_tokens": 2})
    return scrape(c, "/_emulator/dcgm/metrics")["DCGM_FI_DEV_FB_USED"] - before


def probe_crash(c):
    codes = [c.post("/v1/completions", json={"prompt": f"n{i}", "max_tokens": 2}).status_code for i in range(4)]
    return codes, c.get("/health").status_code, "EngineDeadError" in c.get("/_emulator/log").text


# -- Kimi K3 on vLLM as reported in 2026: each probe reads the reply the way the defect shows ---------------
def _chat(c, body):
    return c.post("/v1/chat/completions", json=body).json()


def _stream(c, body):
    """(content, reasoning, tool-call deltas, longest gap between events in s) of a streamed reply."""
    content, reasoning, calls, marks = "", "", 0, [time.perf_counter()]
    with c.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                marks.append(time.perf_counter())
                for ch in json.loads(line[6:]).get("choices") or ():
                    d = ch.get("delta") or {}
                    content += d.get("content") or ""
                    reasoning += d.get("reasoning") or ""
                    calls += len(d.get("tool_calls") or ())
    return content, reasoning, calls, max(b - a for a, b in zip(marks, marks[1:]))


def probe_call_in_reasoning(c):
    msgs = [_chat(c, TOOL_BODY)["choices"][0] for _ in range(4)]
    return [(bool(m["message"].get("tool_calls")), "<|open|>tools" in (m["message"].get("reasoning") or ""))
            for m in msgs]


def probe_channel_leak(c):
    content, _, _, _ = _stream(c, {"messages": [{"role": "user", "content": "Say hello."}]})
    whole = _chat(c, {"messages": [{"role": "user", "content": "Say hello."}]})["choices"][0]["message"]["content"]
    return content.endswith("<|close|>message<|sep|>"), "<|close|>" in whole


def probe_reasoning_as_content(c):
    m = _chat(c, {"messages": [{"role": "user", "content": "Think hard."}], "max_tokens": 12})["choices"][0]
    return m["finish_reason"], m["message"].get("content") is not None, m["message"].get("reasoning") is not None


def probe_required_as_text(c):
    m = _chat(c, {**TOOL_BODY, "tool_choice": "required"})["choices"][0]
    return bool(m["message"].get("tool_calls")), "<|open|>tools" in (m["message"]["content"] or ""), m["finish_reason"]


def probe_args_stall(c):
    _, _, calls, gap = _stream(c, TOOL_BODY)
    return calls, gap


HISTORY = [{"role": "user", "content": "What is the weather in Oslo?"},
           {"role": "assistant", "content": "", "reasoning": "I need the weather tool for Oslo, so I call it now.",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
           {"role": "tool", "tool_call_id": "c1", "content": '{"conditions": "light rain"}'}]


def probe_history_dropped(c):
    with_it = _chat(c, {"messages": HISTORY, "max_tokens": 1})["usage"]["prompt_tokens"]
    bare = [{k: v for k, v in m.items() if k != "reasoning"} for m in HISTORY]
    return with_it > _chat(c, {"messages": bare, "max_tokens": 1})["usage"]["prompt_tokens"]


def probe_strip_reasoning(c):
    whole = _chat(c, {"messages": [{"role": "user", "content": "Hi."}]})["choices"][0]["message"].get("reasoning")
    return whole is not None, bool(_stream(c, {"messages": [{"role": "user", "content": "Hi."}]})[1])


def probe_loose_args(c):
    call = _chat(c, {**TOOL_BODY, "tool_choice": "required"})["choices"][0]["message"]["tool_calls"][0]
    try:
        jsonschema.validate(json.loads(call["function"]["arguments"]),
                            {**WEATHER["function"]["parameters"], "additionalProperties": False})
        return "valid"
    except jsonschema.ValidationError:
        return "invalid"


def probe_stream_history(c):
    content, reasoning, _, _ = _stream(c, {"messages": HISTORY})
    return "<|open|>think<|sep|>" in content, bool(reasoning)


def probe_sparse_retention(c):
    restart(c, *[f for f in c.get("/_emulator/faults").json()["faults"]], profile="demo-hybrid")
    msgs = [[{"role": "system", "content": "runbook " * 200}, {"role": "user", "content": f"question {i}"}]
            for i in range(3)]
    hits = [_chat(c, {"messages": m, "max_tokens": 1})["usage"]["prompt_tokens_details"]["cached_tokens"]
            for m in msgs]
    return hits, scrape(c).get("vllm:prefix_cache_sparse_retention_misses_total")


def probe_session_evict(c):
    """A session's second turn resends its first turn's history: cached with a healthy cache, evicted with the fault."""
    history = [{"role": "system", "content": "runbook " * 200}, {"role": "user", "content": "first question"}]
    first = _chat(c, {"messages": history, "max_tokens": 4})
    history += [{"role": "assistant", "content": first["choices"][0]["message"]["content"] or ""},
                {"role": "user", "content": "second question"}]
    return _chat(c, {"messages": history, "max_tokens": 4})["usage"]["prompt_tokens_details"]["cached_tokens"]


def probe_slow_load(c):
    """/health through the load: 503 while the weights load (slow-load=60 at time scale 0.02: 1.2 s), then 200."""
    seen, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < 5:
        seen.append(c.get("/health").status_code)
        if seen[-1] == 200:
            break
        time.sleep(0.1)
    return seen[0], seen[-1], round(time.perf_counter() - t0, 1)


def probe_dspark(c):
    restart(c, *[f for f in c.get("/_emulator/faults").json()["faults"]], profile="demo-dspark")
    _chat(c, {"messages": [{"role": "user", "content": "Write a line."}], "max_tokens": 16})
    m = scrape(c)
    return round(m["vllm:spec_decode_num_accepted_tokens_total"] / m["vllm:spec_decode_num_draft_tokens_total"], 2)


def probe_length(c):
    r = _chat(c, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "ignore_eos": True,
                  "temperature": 0})
    return r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]


def _served_count(c) -> float:
    return sum(v for k, v in scrape(c).items() if k.startswith("vllm:request_success_total"))


def probe_cache(c, tools: bool = True):
    """(distinct reply ids of two byte-identical bodies, whole and streamed, requests the engine counted for them)."""
    body = {"messages": [{"role": "user", "content": "Look up order 42."}], "temperature": 1.0, "max_tokens": 64}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
            "type": "object", "properties": {"id": {"type": "integer"}}}}}]
    before = _served_count(c)
    ids = {_chat(c, body)["id"] for _ in range(2)}
    streamed = {json.loads(next(line for line in c.post("/v1/chat/completions", json={**body, "stream": True})
                                .text.splitlines() if line.startswith("data: {"))[6:])["id"] for _ in range(2)}
    return len(ids), len(streamed), _served_count(c) - before


CASES = [
    pytest.param("strip-ignore-eos", probe_length, lambda base, f: base == (200, "length") and f[0] < 200
                 and f[1] == "stop", id="strip-ignore-eos"),
    pytest.param("cap-max-tokens=60", probe_length, lambda base, f: base == (200, "length") and f == (60, "length"),
                 id="cap-max-tokens"),
    pytest.param("response-cache", probe_cache, lambda base, f: base == (2, 2, 4) and f == (1, 1, 2),
                 id="response-cache"),
    pytest.param("response-cache-all", lambda c: probe_cache(c, tools=False),
                 lambda base, f: base == (2, 2, 4) and f == (1, 1, 2), id="response-cache-all"),
    pytest.param("cuda12-image", probe_cuda12, lambda base, f: f[0] == "12.9" and f[1].endswith("-cu129")
                 and base[0] == "13.0", id="cuda12-image"),
    pytest.param("old-driver", probe_driver, lambda base, f: f == ("570", True) and base[0] == "580", id="old-driver"),
    pytest.param("old-vllm", probe_version, lambda base, f: f == ("0.27.0", True) and base[0] == "0.33.0",
                 id="old-vllm"),
    pytest.param("no-tool-parser", probe_tool_parser, lambda base, f: base[0] == 200 and f == (
        400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set', False),
                 id="no-tool-parser"),
    pytest.param("tool-markup-leak=1", probe_markup_leak, lambda base, f: base == [(True, False)] * 3
                 and f == [(False, True)] * 3, id="tool-markup-leak"),
    pytest.param("bad-tool-args=1", probe_bad_args, lambda base, f: base == ["valid"] * 4 and f == ["invalid"] * 4,
                 id="bad-tool-args"),
    pytest.param("no-prefix-caching", probe_prefix, lambda base, f: base == (96, "True") and f == (0, "False"),
                 id="no-prefix-caching"),
    pytest.param("kv-starved", probe_starved, lambda base, f: f[0] and not base[0] and float(f[1]) < float(base[1]),
                 id="kv-starved"),
    pytest.param("kv-pool=8192", probe_pool_tokens, lambda base, f: base > 16_000 and 8192 <= f < 1.15 * 8192,
                 id="kv-pool"),
    pytest.param("oom-long-context", probe_oom_long, lambda base, f: base == (200, 200, 200, False)
                 and f == (200, 500, 503, True), id="oom-long-context"),
    pytest.param("oom-startup", probe_oom_startup, lambda base, f: base == (200, 200, True, False)
                 and f == (503, 503, False, True), id="oom-startup"),
    # timing: a ratio measured in one run, in the slow layer (`make test-fast` holds beside another run)
    pytest.param("slow", probe_slow, lambda base, f: f > 2.5 * base, id="slow", marks=pytest.mark.slow),
    pytest.param("flaky-5xx=0.5", probe_flaky, lambda base, f: set(base) == {200} and {500, 503} & set(f)
                 and 200 in f, id="flaky-5xx"),
    pytest.param("memory-leak", probe_leak, lambda base, f: base == 0 and f >= 5 * 48, id="memory-leak"),
    pytest.param("call-in-reasoning=1", probe_call_in_reasoning, lambda base, f: base == [(True, False)] * 4
                 and f == [(False, True)] * 4, id="call-in-reasoning"),
    pytest.param("channel-leak", probe_channel_leak, lambda base, f: base == (False, False) and f == (True, False),
                 id="channel-leak"),
    pytest.param("reasoning-as-content", probe_reasoning_as_content,
                 lambda base, f: base == ("length", False, True) and f == ("length", True, False),
                 id="reasoning-as-content"),
    pytest.param("required-as-text", probe_required_as_text,
                 lambda base, f: base == (True, False, "tool_calls") and f == (False, True, "stop"),
                 id="required-as-text"),
    pytest.param("args-stall=50", probe_args_stall, lambda base, f: base[0] == f[0] == 1 and f[1] > 0.8
                 and f[1] > 4 * base[1], id="args-stall", marks=pytest.mark.slow),
    pytest.param("history-reasoning-dropped", probe_history_dropped, lambda base, f: base is True and f is False,
                 id="history-reasoning-dropped"),
    pytest.param("strip-reasoning", probe_strip_reasoning, lambda base, f: base == (True, True)
                 and f == (False, False), id="strip-reasoning"),
    pytest.param("loose-strict-args", probe_loose_args, lambda base, f: base == "valid" and f == "invalid",
                 id="loose-strict-args"),
    pytest.param("stream-history-leak", probe_stream_history, lambda base, f: base == (False, True)
                 and f == (True, False), id="stream-history-leak"),
    pytest.param("sparse-retention-miss", probe_sparse_retention,
                 lambda base, f: base[0][0] == base[0][1] == 0 and base[0][2] > 0 and f[0] == [0, 0, 0]
                 and f[1] > base[1] > 0, id="sparse-retention-miss"),
    pytest.param("session-evict", probe_session_evict, lambda base, f: base > 0 and f == 0, id="session-evict"),
    pytest.param("slow-load=60", probe_slow_load, lambda base, f: base[:2] == (200, 200) and f[:2] == (503, 200)
                 and f[2] >= 0.8, id="slow-load", marks=pytest.mark.slow),
    pytest.param("dspark-low-accept", probe_dspark, lambda base, f: base == 0.5 and f < 0.1, id="dspark-low-accept"),
    pytest.param("crash=2", probe_crash, lambda base, f: base == ([200] * 4, 200, False)
                 and f == ([200, 200, 500, 500], 503, True), id="crash"),
]


@pytest.mark.parametrize("fault, probe, changed", CASES)
def test_fault_changes_what_the_server_says(c, fault, probe, changed):
    ts = 0.1 if fault == "slow" else 0.02   # long enough steps that HTTP overhead does not hide the slowdown
    restart(c, time_scale=ts)
    base = probe(c)
    restart(c, fault, time_scale=ts)
    assert c.get("/_emulator/faults").json()["faults"] == [fault.replace("=1", "")] or "=" in fault
    faulty = probe(c)
    assert changed(base, faulty), (base, faulty)


def test_every_fault_has_a_case():
    assert {p.values[0].split("=")[0] for p in CASES} == set(FAULTS)


def test_shares_are_reproducible(c):
    restart(c, "flaky-5xx=0.5")
    first = probe_flaky(c)
    restart(c, "flaky-5xx=0.5")
    assert probe_flaky(c) == first


def test_runtime_fault_switch_without_restart(c):
    restart(c)
    r = c.post("/_emulator/faults", json={"faults": ["tool-markup-leak=1"]}).json()
    assert r == {"faults": ["tool-markup-leak=1"], "restarted": False}
    assert probe_markup_leak(c)[0] == (False, True)
    r = c.post("/_emulator/faults", json={"faults": ["no-tool-parser"]}).json()
    assert r["restarted"] is True
    assert c.post("/v1/chat/completions", json=TOOL_BODY).status_code == 400
    assert c.post("/_emulator/faults", json={"faults": ["nope"]}).status_code == 400


def test_dead_engine_answers_500_with_vllm_text(c):
    restart(c, "crash=1")
    c.post("/v1/completions", json={"prompt": "a", "max_tokens": 1})
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "The server had an error while processing your request."
    assert scrape(c, "/_emulator/dcgm/metrics")["DCGM_FI_DEV_FB_USED"] == 0   # the engine's memory is released


@pytest.mark.parametrize("text", [pytest.param("nope", id="unknown"), pytest.param("slow=-1", id="negative"),
                                  pytest.param("bad-tool-args=2", id="share-above-1"),
                                  pytest.param("kv-starved=3", id="no-value-expected")])
def test_bad_fault_specs_are_rejected(text):
    with pytest.raises(BadInputError):
        EmulatorConfig.from_profile("demo", faults=(text,))
