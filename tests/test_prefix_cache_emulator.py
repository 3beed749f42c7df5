"""The protocol against the real emulator over a socket: reuse proven, cache off, an early prefix change,
concurrent load; and the notebook under papermill."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

import k3lib
import k3lib.axes.prefix_cache as prefix_cache
from k3lib.verdict.decision import decide
from k3lib.emulator import EmulatorConfig, start_emulator
from k3lib.core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
PARAMS = str(ROOT / "parameters" / "emulator.yaml")
# small and quick, yet long enough that a cold prefill is well above loopback noise
SMALL = ["axes.prefix_cache.sessions=2", "axes.prefix_cache.prefix_tokens=[400, 1200]",
         "axes.prefix_cache.max_tokens=4", "axes.prefix_cache.max_duration_s=30"]


def _emulator(*faults: str, time_scale: float = 0.2):
    return start_emulator(EmulatorConfig.from_profile("demo", faults=faults, time_scale=time_scale),
                          host="127.0.0.1", port=0)


@pytest.fixture(scope="module")
def healthy():
    h = _emulator()
    yield h
    h.stop()


def _run(h, tmp_path, *extra: str):
    ctx = k3lib.open_axis("prefix_cache", PARAMS, [f"target.base_url={h.url}", *SMALL, *extra], str(tmp_path / "run"))
    result = prefix_cache.run_prefix_cache(ctx)
    return ctx, result, ctx.record(prefix_cache.prefix_cache_record(result, ctx))


def _why(record):
    return [(f.rule, f.status, f.message) for f in record.findings]


def test_healthy_server_reuse_is_proven_with_observed_hits_equal_to_designed(healthy, tmp_path):
    ctx, result, record = _run(healthy, tmp_path)
    assert record.status == "pass", _why(record)
    pairs = prefix_cache.reconcile(result)
    # 2 planned sessions per length, then more at the longest prefix until the gain's interval is decided
    assert len(pairs) >= 5 and all(p.cause == "match" for p in pairs)
    assert {p.prefix_target for p in pairs[4:]} == {1200}
    for p in pairs:
        assert p.observed_hits == p.designed_hits == p.cached_tokens > 0
        assert p.designed_hits % 16 == 0 and p.designed_hits <= p.warm_prompt_tokens - 1
        assert p.cold_observed_hits == 0  # the salt and the nonce made every cold request cold
    cold = [s for s in result.samples if s.kind == "cold"]
    assert [s.prompt_tokens for s in cold][:4] == [400, 400, 1200, 1200]  # sized exactly with /tokenize
    assert all(s.queries_delta == s.prompt_tokens for s in result.samples)
    assert len({s.salt for s in result.samples}) == len(pairs)
    assert record.data["gain_counted"] is True
    # evidence kept, hashed, and enough to re-render without the target
    assert RunStore(ctx.store.root).verify() == []
    again = prefix_cache.PrefixCacheResult.load(ctx.store)
    assert prefix_cache.hits_table(again).equals(prefix_cache.hits_table(result))
    lines = ctx.store.path("evidence/prefix_cache/requests.jsonl").read_text().splitlines()
    # cold, warm and the third sighting per session
    assert len(lines) == 3 * len(pairs) and json.loads(lines[0])["request_id"].endswith("cold")


def test_an_early_one_token_change_is_explained_not_blamed_on_the_cache(healthy, tmp_path):
    _, result, record = _run(healthy, tmp_path, "axes.prefix_cache.warm_change=early-token")
    pairs = prefix_cache.reconcile(result)
    assert {p.cause for p in pairs} == {"prefix-changed"}
    for p in pairs:
        assert p.observed_hits == p.designed_hits < p.intended_hits
        assert f"token {p.divergence_at}" in p.explanation
    reuse = record.by_rule("prefix_cache.reuse")
    assert reuse.status == "warn" and "not identical" in reuse.message
    assert record.data["gain_counted"] is False


@pytest.mark.slow
def test_no_prefix_caching_fails_with_no_reuse_and_the_gain_is_not_counted(tmp_path):
    h = _emulator("no-prefix-caching")
    try:
        _, result, record = _run(h, tmp_path)
    finally:
        h.stop()
    assert record.status == "fail"
    reuse = record.by_rule("prefix_cache.reuse")
    assert reuse.status == "fail" and reuse.message.startswith(prefix_cache.NO_REUSE)
    assert record.by_rule("prefix_cache.flag").status == "fail"
    assert {p.cause for p in prefix_cache.reconcile(result)} == {"cache-disabled"}
    assert record.data["gain_counted"] is False
    assert decide({"prefix_cache": record}, ["prefix_cache"]).decision == "limited-observation"


@pytest.mark.slow
def test_concurrent_load_on_the_target_is_detected(tmp_path):
    h = _emulator(time_scale=0.05)
    stop = threading.Event()

    def background() -> None:  # bounded: 400 requests or 20 s, whichever first
        body = {"model": "kimi-k3", "messages": [{"role": "user", "content": "noise " * 200}], "max_tokens": 2}
        deadline = time.monotonic() + 20
        with httpx.Client(timeout=5) as c:
            for _ in range(400):
                if stop.is_set() or time.monotonic() > deadline:
                    return
                c.post(f"{h.url}/v1/chat/completions", json=body)

    workers = [threading.Thread(target=background, daemon=True) for _ in range(2)]
    try:
        for w in workers:
            w.start()
        time.sleep(0.2)
        _, result, record = _run(h, tmp_path)
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=10)
        h.stop()
    assert any(s.contaminated for s in result.samples)
    counters = record.by_rule("prefix_cache.counters")
    assert counters.status == "warn" and "concurrent load" in counters.message


@pytest.mark.slow
def test_notebook_runs_under_papermill_and_writes_its_record(healthy, tmp_path):
    import papermill as pm

    run = tmp_path / "run"
    pm.execute_notebook(
        str(ROOT / "notebooks/04_prefix_cache.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
        progress_bar=False, cwd=str(ROOT),
        parameters={"params_file": "parameters/emulator.yaml", "run_dir": str(run),
                    "overrides": [f"target.base_url={healthy.url}", *SMALL]})
    record = json.loads((run / "evidence/prefix_cache.json").read_text())
    assert record["axis"] == "prefix_cache" and record["status"] == "pass", record["findings"]
    assert (run / "evidence/prefix_cache/result.json").exists()
    assert RunStore(run).verify() == []


def test_without_a_salt_the_shared_tool_block_is_designed_into_later_cold_requests(healthy, tmp_path):
    """Fresh-prefix isolation only: the tool definitions (rendered before the nonce) are shared across
    sessions, and the designed hits of a cold request account for what this run sent before it."""
    _, result, record = _run(healthy, tmp_path, "axes.prefix_cache.isolation=fresh-prefix")
    pairs = prefix_cache.reconcile(result)
    assert all(p.cold_observed_hits == p.cold_designed_hits for p in pairs)
    assert pairs[0].cold_designed_hits == 0 and pairs[1].cold_designed_hits > 0
    assert all(s.salt is None for s in result.samples)
    assert record.by_rule("prefix_cache.isolation").status == "info"
    assert record.status == "pass", _why(record)
