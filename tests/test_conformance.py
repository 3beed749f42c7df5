"""The emulator held to real vLLM: the same probes sent to vLLM 0.32.0 (CPU build, scripts/realvllm.sh) and to the
emulator configured as 0.32.0, compared automatically.

Compared: status codes and JSON shapes (keys and value types, recursively) of /health, /version, /v1/models,
/tokenize, chat and completions (whole and streamed, with usage) and the error bodies; /metrics families, types,
label names and histogram bucket edges; the prefix-cache counter arithmetic for one prompt sent twice at the same
block size; what the kit's log reader gets from each startup log; the headline fields the kit's collect_env reader
gets. Every difference must be fixed in the emulator (vLLM is right) or listed, with its reason, in
tests/data/conformance-allowlist.yaml. An allow-list entry that no longer matches any difference fails too, so
the list only ever holds differences that exist.
"""

from __future__ import annotations

import fnmatch
import json
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from k3lib.io.readers.collect_env import parse_collect_env
from k3lib.io.readers.vllm_log import parse_vllm_log
from realvllm import SERVED_NAME, VLLM_VERSION, RealVllm


ALLOWLIST = Path(__file__).parent / "data" / "conformance-allowlist.yaml"
BLOCK_SIZE = 128  # vLLM's CPU backend block size (cache_config_info), given to the emulator too
MAX_MODEL_LEN = 2048
TIMEOUT = httpx.Timeout(120.0, connect=5.0)


# ---------------------------------------------------------------------------------------------------------------
# Shapes and differences (pure functions: also tested on their own below)


def shape(value: Any) -> Any:
    """Keys and value types, recursively; a list is the shape of its first element (or [] when empty).
    Integers and floats are both "number" (JSON does not tell them apart); null is "null"."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def shape_diff(real: Any, emu: Any, path: str = "$") -> list[str]:
    """Differences as `path: what`, where vLLM's side is `real`. A null on either side matches any type (a field
    that is sometimes null is not a shape difference); a key on one side only is."""
    if real == "null" or emu == "null":
        return []
    if isinstance(real, dict) and isinstance(emu, dict):
        out = []
        for key in sorted(set(real) | set(emu)):
            if key not in emu:
                out.append(f"{path}.{key}: missing in the emulator")
            elif key not in real:
                out.append(f"{path}.{key}: only in the emulator")
            else:
                out.extend(shape_diff(real[key], emu[key], f"{path}.{key}"))
        return out
    if isinstance(real, list) and isinstance(emu, list):
        if real and emu:
            return shape_diff(real[0], emu[0], f"{path}[]")
        return []
    if real != emu:
        return [f"{path}: {_kind(real)} in vLLM, {_kind(emu)} in the emulator"]
    return []


def _kind(s: Any) -> str:
    return "object" if isinstance(s, dict) else "array" if isinstance(s, list) else str(s)


def load_allowlist() -> list[dict[str, str]]:
    entries = yaml.safe_load(ALLOWLIST.read_text(encoding="utf-8")) or []
    for e in entries:
        assert set(e) == {"difference", "reason"} and e["reason"].strip(), f"allow-list entry needs a reason: {e}"
    return entries


def unexplained(differences: list[str], allow: list[dict[str, str]]) -> tuple[list[str], list[str]]:
    """(differences no entry allows, entries that match no difference); entries are fnmatch patterns."""
    left = [d for d in differences if not any(fnmatch.fnmatchcase(d, e["difference"]) for e in allow)]
    stale = [e["difference"] for e in allow if not any(fnmatch.fnmatchcase(d, e["difference"]) for d in differences)]
    return left, stale


def test_shape_diff_names_missing_extra_and_retyped_fields():
    real = shape({"id": "x", "usage": {"prompt_tokens": 3, "details": None}, "choices": [{"index": 0}]})
    emu = shape({"id": 7, "usage": {"prompt_tokens": 3.0, "extra": 1}, "choices": [{"index": 0, "logprobs": None}]})
    assert shape_diff(real, emu) == [
        "$.choices[].logprobs: only in the emulator",
        "$.id: str in vLLM, number in the emulator",
        "$.usage.details: missing in the emulator",
        "$.usage.extra: only in the emulator",
    ]
    assert shape_diff(real, real) == []


def test_allowlist_matching_reports_both_unexplained_and_stale_entries():
    allow = [{"difference": "chat: $.a*", "reason": "r"}, {"difference": "never", "reason": "r"}]
    assert unexplained(["chat: $.ab: x", "chat: $.b: y"], allow) == (["chat: $.b: y"], ["never"])


# ---------------------------------------------------------------------------------------------------------------
# Probes


def _probes(model: str) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    chat = {"model": model, "messages": [{"role": "user", "content": "Say hello to the cluster."}],
            "max_tokens": 8, "temperature": 0}
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                             "parameters": {"type": "object",
                                                            "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}
    return [
        ("health", "GET", "/health", None),
        ("version", "GET", "/version", None),
        ("models", "GET", "/v1/models", None),
        ("tokenize", "POST", "/tokenize", {"model": model, "prompt": "hello cluster"}),
        ("tokenize-chat", "POST", "/tokenize", {"model": model, "messages": chat["messages"]}),
        ("chat", "POST", "/v1/chat/completions", chat),
        ("chat-tools", "POST", "/v1/chat/completions",
         {**chat, "tools": [tool], "tool_choice": "auto"}),
        ("completions", "POST", "/v1/completions",
         {"model": model, "prompt": "Hello cluster", "max_tokens": 8, "temperature": 0}),
        ("error-context", "POST", "/v1/chat/completions",
         {**chat, "messages": [{"role": "user", "content": "tokens " * 3000}]}),
        ("error-malformed", "POST", "/v1/chat/completions", {"model": model, "messages": "not a list"}),
        ("error-unknown-model", "POST", "/v1/chat/completions", {**chat, "model": "no-such-model"}),
    ]


def _streams(model: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("chat-stream", "/v1/chat/completions",
         {"model": model, "messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 6,
          "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}),
        ("completions-stream", "/v1/completions",
         {"model": model, "prompt": "Count to three.", "max_tokens": 6, "temperature": 0, "stream": True,
          "stream_options": {"include_usage": True}}),
    ]


def observe(base_url: str, model: str) -> dict[str, Any]:
    """Status and JSON shape of every probe, the first/middle/usage chunk shapes of every stream."""
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        for name, method, path, body in _probes(model):
            resp = client.request(method, path, json=body)
            try:
                got = shape(resp.json()) if resp.content else "empty"
            except ValueError:
                got = "not JSON"
            out[name] = {"status": resp.status_code, "body": got}
        for name, path, body in _streams(model):
            chunks, done = [], False
            with client.stream("POST", path, json=body) as resp:
                status = resp.status_code
                for line in resp.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: "):]
                    if data == "[DONE]":
                        done = True
                        continue
                    chunks.append(json.loads(data))
            content = [c for c in chunks if c.get("choices")]
            usage = [c for c in chunks if c.get("usage") and not c.get("choices")]
            out[name] = {"status": status, "done": done, "first": shape(content[0]) if content else None,
                         "last": shape(content[-1]) if content else None,
                         "usage": shape(usage[-1]) if usage else None}
    return out


def metric_families(text: str) -> dict[str, dict[str, Any]]:
    """vllm: families as prometheus_client parses them: type, label names, histogram bucket edges."""
    out: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        labels = sorted({k for s in fam.samples for k in s.labels if k != "le"})
        edges = sorted({s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")},
                       key=lambda v: float(v)) if fam.type == "histogram" else None
        out[fam.name] = {"type": fam.type, "labels": labels, "edges": edges}
    return out


def counter(text: str, name: str) -> float:
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)


def prefix_arithmetic(base_url: str, model: str) -> dict[str, Any]:
    """One ~1,700-token prompt sent twice: its token count (vLLM's /tokenize) and how the local prefix-cache
    counters moved on each send, put as the relation to the block size that the kit's designed-hits use."""
    # a head never sent before: the cold send finds nothing cached, whatever ran on the server earlier
    text = f"Block arithmetic check {uuid.uuid4().hex} for the cluster " + " ".join(f"item{i}" for i in range(480))
    body = {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0}
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        n = client.post("/tokenize", json={"model": model, "prompt": text}).json()["count"]
        moves = []
        for _ in range(2):
            before = client.get("/metrics").text
            assert client.post("/v1/completions", json=body).status_code == 200
            after = client.get("/metrics").text
            moves.append({k: counter(after, f"vllm:prefix_cache_{k}_total") - counter(before, f"vllm:prefix_cache_{k}_total")
                          for k in ("queries", "hits")})
    full_blocks = (n - 1) // BLOCK_SIZE  # the last prompt token is always computed, so at most n-1 hit
    return {"tokens": n, "warm_hit_tokens": moves[1]["hits"],  # figures: the two tokenizers differ
            "cold_queries_equal_prompt": moves[0]["queries"] == n, "cold_hits": moves[0]["hits"],
            "warm_queries_equal_prompt": moves[1]["queries"] == n,
            "warm_hits_are_full_blocks_before_last_token": moves[1]["hits"] == full_blocks * BLOCK_SIZE}


def log_reading(text: str | bytes) -> dict[str, Any]:
    """Which startup facts the kit's log reader finds (found or not: the values differ by design)."""
    rep = parse_vllm_log(text)
    found = {k: getattr(rep, k) is not None for k in ("vllm_version", "model", "non_default_args",
                                                      "kv_cache_tokens", "max_concurrency", "ready_line")}
    return found | {"ready": rep.ready, "engine_dead": rep.engine_dead, "errors": len(rep.errors)}


def collect_env_headlines(text: str) -> dict[str, Any]:
    rep = parse_collect_env(text)
    return {"vllm_version": rep.vllm_version, "torch_version present": rep.torch_version is not None,
            "platform": rep.platform, "cuda_available": rep.cuda_available}


# ---------------------------------------------------------------------------------------------------------------
# The two servers


@pytest.fixture(scope="module")
def emulated() -> Iterator[str]:
    """The emulator as vLLM 0.32.0 serving what scripts/realvllm.sh serves (same name, context, block, flags)."""
    from k3lib.emulator import EmulatorConfig, start_emulator

    cfg = EmulatorConfig.from_profile("demo", vllm_version=VLLM_VERSION, served_model_name=SERVED_NAME,
                                      model="models/vllm-tiny-llama", block_size=BLOCK_SIZE,
                                      max_model_len=MAX_MODEL_LEN, tool_call_parser="hermes",
                                      reasoning_parser=None, time_scale=0.02)
    with start_emulator(cfg, host="127.0.0.1", port=0) as handle:
        yield handle.url


@pytest.fixture(scope="module")
def both(real_vllm: RealVllm, emulated: str) -> dict[str, Any]:
    """Everything observed from both sides, once per module."""
    sides: dict[str, Any] = {}
    for side, url in (("vllm", real_vllm.base_url), ("emulator", emulated)):
        with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
            sides[side] = {"probes": observe(url, SERVED_NAME),
                           "metrics": metric_families(client.get("/metrics").text),
                           "prefix": prefix_arithmetic(url, SERVED_NAME)}
            if side == "emulator":
                sides[side]["log"] = client.get("/_emulator/log").text
                sides[side]["collect_env"] = client.get("/_emulator/collect_env").text
    sides["vllm"]["log"] = real_vllm.log_path.read_bytes()
    sides["vllm"]["collect_env"] = real_vllm.collect_env_path.read_text(encoding="utf-8", errors="replace")
    return sides


def differences(both: dict[str, Any]) -> Iterator[str]:
    real, emu = both["vllm"], both["emulator"]
    for name, got in real["probes"].items():
        other = emu["probes"][name]
        for key in sorted(set(got) | set(other)):
            if key == "status" or key == "done":
                if got.get(key) != other.get(key):
                    yield f"{name}: {key} {got.get(key)} in vLLM, {other.get(key)} in the emulator"
            else:
                for d in shape_diff(got.get(key), other.get(key), "$"):
                    yield f"{name} {key}: {d}" if key != "body" else f"{name}: {d}"
    rm, em = real["metrics"], emu["metrics"]
    for fam in sorted(set(rm) | set(em)):
        if fam not in em:
            yield f"metrics {fam}: missing in the emulator"
        elif fam not in rm:
            yield f"metrics {fam}: only in the emulator"
        else:
            for key in ("type", "labels", "edges"):
                if rm[fam][key] != em[fam][key]:
                    yield f"metrics {fam} {key}: {rm[fam][key]} in vLLM, {em[fam][key]} in the emulator"
    for key, value in real["prefix"].items():
        if key not in ("tokens", "warm_hit_tokens") and value != emu["prefix"][key]:
            yield f"prefix {key}: {value} in vLLM, {emu['prefix'][key]} in the emulator"
    rl, el = log_reading(real["log"]), log_reading(emu["log"])
    for key in sorted(set(rl) | set(el)):
        if rl.get(key) != el.get(key):
            yield f"log {key}: {rl.get(key)} in vLLM, {el.get(key)} in the emulator"
    rc, ec = collect_env_headlines(real["collect_env"]), collect_env_headlines(emu["collect_env"])
    for key in sorted(rc):
        if rc[key] != ec[key]:
            yield f"collect_env {key}: {rc[key]} in vLLM, {ec[key]} in the emulator"


@pytest.mark.realvllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_vllm_is_what_the_suite_assumes(both):
    """The real side is the server the allow-list was written against: 0.32.0, block 128, reuse by full blocks."""
    real = both["vllm"]
    assert real["probes"]["version"]["status"] == 200
    assert collect_env_headlines(real["collect_env"])["vllm_version"] == VLLM_VERSION
    assert real["prefix"]["warm_hits_are_full_blocks_before_last_token"], real["prefix"]
    assert "vllm:prefix_cache_hits_total" in real["metrics"] or "vllm:prefix_cache_hits" in real["metrics"]


@pytest.mark.realvllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_emulator_conforms_to_vllm_or_the_difference_is_allowed(both):
    found = sorted(set(differences(both)))
    left, stale = unexplained(found, load_allowlist())
    assert not left, "differences between vLLM 0.32.0 and the emulator, neither fixed nor allowed:\n" + "\n".join(left)
    assert not stale, "allow-list entries that match no difference any more (remove them):\n" + "\n".join(stale)
