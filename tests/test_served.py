"""Asked vs served (issue 43): a class of requests is judged only on replies shaped as it asked. Each attack is
shown by the smallest thing that shows it: the judge (k3lib.axes.served) over crafted records, one axis in-process
against an emulator with a fault in front of its engine (k3lib.emulator.front), and the emulator itself, which must
serve what is asked as vLLM does (ignore_eos exactly, sampled replies that differ)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import k3lib
import k3lib.axes.agent as agent
import k3lib.axes.capacity as capacity
from k3lib.axes.agent.result import AgentResult
from k3lib.axes.agent.serving import spec_decode_finding
from k3lib.axes.served import open_findings, served_finding, served_verdict
from k3lib.core.evidence import Finding
from k3lib.emulator import EmulatorConfig, start_emulator
from k3lib.io.client import ChatClient, run_sync
from k3lib.io.client.records import asked_of
from k3lib.verdict.decision import decide

ROOT = Path(__file__).resolve().parents[1]
PARAMS = str(ROOT / "parameters" / "emulator.yaml")


def reply(i: int, *, completion: int = 1024, finish: str = "length", text: str | None = None, **asked) -> dict:
    body = {"messages": [{"role": "user", "content": "q"}], **asked}
    return {"request_id": f"r{i}", "ok": True, "completion_tokens": completion, "finish_reason": finish,
            "response_id": f"chatcmpl-{i}", "reasoning": text if text is not None else f"sampled thought {i} " * 8,
            "content": None, "tool_calls": [{"name": "lookup", "arguments": '{"id": 1}'}], "asked": asked_of(body)}


COUNTS_AGREE = {"items": [{"quantity": "requests finished", "unit": "requests", "client": 4.0, "server": 4.0,
                           "agrees": True}], "disagreements": []}


# -- the judge over crafted records -----------------------------------------------------------------------------


def test_replies_of_the_length_asked_under_ignore_eos_are_served_as_asked():
    got = served_verdict([reply(i, max_tokens=1024, ignore_eos=True, temperature=0) for i in range(4)], COUNTS_AGREE)
    assert got["status"] == "as-asked" and got["length"]["checked"] == 4
    assert served_finding("capacity", got).status == "pass"


@pytest.mark.parametrize("completion, finish", [
    pytest.param(58, "stop", id="gateway-strips-ignore_eos"),
    pytest.param(64, "length", id="gateway-caps-max_tokens"),
    pytest.param(1024, "stop", id="stopped-at-the-asked-length"),
])
def test_a_reply_shorter_than_asked_under_ignore_eos_is_not_served_as_asked(completion, finish):
    """Attack 1: a gateway that strips ignore_eos (56-60 tokens of 1,024) or caps max_tokens; the load measured is
    not the load planned. A reply that ended by `stop` under ignore_eos is a deviation even at the asked length."""
    rows = [reply(0, max_tokens=1024, ignore_eos=True, temperature=0),
            reply(1, completion=completion, finish=finish, max_tokens=1024, ignore_eos=True, temperature=0)]
    got = served_verdict(rows, COUNTS_AGREE)
    assert got["status"] == "deviates" and got["length"]["deviations"] == 1
    assert got["reason"].startswith("the target did not serve what was asked: max_tokens/ignore_eos")


def test_byte_identical_sampled_replies_are_a_cache_not_sampling():
    """Attack 2: a response cache replays one reply to the tool-turn series' byte-identical bodies."""
    same = [{**reply(i, text="the one cached thought " * 4, temperature=1.0), "response_id": f"x{i}"}
            for i in range(6)]
    got = served_verdict(same, COUNTS_AGREE)
    assert got["status"] == "deviates" and got["sampling"]["byte_identical"] == 5
    assert "sampling (5 of 5 repeated sampled replies came back byte-identical" in got["reason"]
    cached_ids = [{**r, "response_id": "chatcmpl-0"} for r in (reply(i, temperature=1.0) for i in range(3))]
    assert served_verdict(cached_ids, COUNTS_AGREE)["sampling"]["same_response_id"] == 2


@pytest.mark.parametrize("rows", [
    pytest.param([reply(i, temperature=1.0) for i in range(6)], id="sampled-replies-differ"),
    pytest.param([reply(i, text="short", temperature=1.0) for i in range(6)], id="too-little-free-text-to-tell"),
    pytest.param([reply(i, text="fixed " * 20, temperature=1.0, seed=7) for i in range(6)], id="a-seed-fixes-them"),
    pytest.param([reply(i, text="greedy " * 20, temperature=0) for i in range(6)], id="greedy-decoding"),
])
def test_identical_replies_are_judged_only_where_sampling_must_vary_them(rows):
    assert served_verdict(rows, COUNTS_AGREE)["status"] == "as-asked"


def test_server_counters_short_of_the_client_name_a_front_cache():
    short = {"items": [{"quantity": "requests finished", "unit": "requests", "client": 92.0, "server": 59.0,
                        "agrees": False}], "disagreements": ["requests finished"]}
    got = served_verdict([reply(0, temperature=1.0)], short)
    assert got["status"] == "deviates" and "a cache or gateway answered in front of the engine" in got["reason"]
    unread = served_verdict([reply(0, temperature=1.0)], None, counters_error="/metrics could not be read: 503")
    assert unread["status"] == "not-observable" and "503" in served_finding("agent", unread).message


def test_a_deviation_opens_every_pass_and_keeps_a_failure():
    verdict = served_verdict([reply(0, completion=58, finish="stop", max_tokens=1024, ignore_eos=True)],
                             counters=False)
    found = [Finding(rule="capacity.saturation", status="pass", message="held"),
             Finding(rule="capacity.oom", status="fail", message="oom"),
             Finding(rule="capacity.queue_time", status="info", message="no objective")]
    opened = {f.rule: f for f in open_findings(found, verdict)}
    assert opened["capacity.saturation"].status == "not-observable"
    assert opened["capacity.saturation"].message.startswith("the target did not serve what was asked: max_tokens")
    assert opened["capacity.oom"].status == "fail" and opened["capacity.queue_time"].status == "info"


def test_a_spec_decode_floor_on_unreadable_metrics_is_not_observable_never_dropped():
    """Item 4: a /metrics read error dropped the spec-decode finding while the recipe set a floor."""
    result = AgentResult({"spec_decode_min_acceptance_length": 2.0}, {"cases": []}, [], [], [],
                         spec_decode={"error": "/metrics could not be read: http://x/metrics: HTTP 503"})
    f = spec_decode_finding(result)
    assert f is not None and f.status == "not-observable" and "HTTP 503" in f.message
    assert spec_decode_finding(AgentResult({}, {"cases": []}, [], [], [], spec_decode={"error": "x"})) is None


# -- the emulator serves what is asked, as vLLM does --------------------------------------------------------------


def _chat(url: str, body: dict) -> dict:
    r = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Tell me about the "
                                                                                                  "cache"}], **body},
                   timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_emulator_honours_ignore_eos_exactly_and_ends_by_length(emulator):
    for stream in (False, True):
        client = ChatClient(emulator.url)
        rec = run_sync(client.chat([{"role": "user", "content": "hi"}], stream=stream, max_tokens=200,
                                   ignore_eos=True, temperature=0))
        assert (rec.completion_tokens, rec.finish_reason) == (200, "length")
        assert rec.asked is not None and rec.asked["ignore_eos"] is True and rec.asked["max_tokens"] == 200
        assert served_verdict([rec.model_dump()], counters=False)["status"] == "as-asked"


def test_the_emulator_samples_at_temperature_and_decodes_greedily_at_zero(emulator):
    sampled = {(_chat(emulator.url, {"temperature": 1.0, "max_tokens": 300})["choices"][0]["message"]["reasoning"])
               for _ in range(3)}
    greedy = {_chat(emulator.url, {"temperature": 0, "max_tokens": 300})["choices"][0]["message"]["reasoning"]
              for _ in range(2)}
    seeded = {_chat(emulator.url, {"temperature": 1.0, "seed": 3, "max_tokens": 300})["choices"][0]["message"]
              ["reasoning"] for _ in range(2)}
    assert len(sampled) == 3 and len(greedy) == 1 and len(seeded) == 1


# -- one axis against a fault in front of the engine --------------------------------------------------------------

CAPACITY_FAST = ["axes.capacity.step_duration_s=1.0", "axes.capacity.soak_duration_s=1.5",
                 "axes.capacity.context_lengths_tokens=[1000]", "axes.capacity.sample_interval_s=0.1",
                 "axes.environment.timeout_s=3"]


@pytest.mark.slow
def test_capacity_behind_a_gateway_that_strips_ignore_eos_is_not_production(tmp_path):
    """Attack 1: an allow-list gateway drops ignore_eos; the load steps measured short replies."""
    with start_emulator(EmulatorConfig.from_profile("demo", faults=("strip-ignore-eos",), time_scale=0.02),
                        host="127.0.0.1", port=0) as h:
        gpu = ["target.gpu_metrics.source=dcgm", f"target.gpu_metrics.url={h.dcgm_url}"]  # all else is observed
        ctx = k3lib.open_axis("capacity", PARAMS, [f"target.base_url={h.url}", *gpu, *CAPACITY_FAST],
                              str(tmp_path / "run"))
        result = capacity.run_capacity(ctx)
        record = ctx.record(capacity.capacity_record(result, ctx))
    served = record.by_rule("capacity.served_as_asked")
    assert served.status == "not-observable" and "max_tokens/ignore_eos" in served.message
    assert record.by_rule("capacity.saturation").status != "pass"
    # what is not shown is the served shape alone: every other finding passed, or says nothing
    assert {f.rule for f in record.findings if f.status not in ("pass", "info")} <= {
        f.rule for f in record.findings if f.message.startswith("the target did not serve what was asked")}
    assert record.data["implied_decision"] != "production"


@pytest.mark.slow
def test_agents_behind_a_response_cache_are_not_production(tmp_path):
    """Attack 2: a cache answers the requests that carry tools; the engine never sees them."""
    with start_emulator(EmulatorConfig.from_profile("demo", faults=("response-cache",), time_scale=0.02),
                        host="127.0.0.1", port=0) as h:
        ctx = k3lib.open_axis("agent", PARAMS, [f"target.base_url={h.url}", "axes.agent.repetitions=2",
                                                "axes.agent.concurrency_levels=[2]", "axes.agent.tool_turns=35",
                                                "contract.max_tool_call_failure_rate=0.1"], str(tmp_path / "run"))
        result = agent.run_agent(ctx)
        record = ctx.record(agent.agent_record(result, ctx))
    served = record.by_rule("agent.served_as_asked")
    assert served.status == "not-observable"
    assert "byte-identical" in served.message and "a cache or gateway answered in front of the engine" in \
        served.message
    assert record.by_rule("agent.tool_call_failure_rate").status == "not-observable"
    assert decide({"agent": record}, ["agent"]).decision != "production"


def test_a_capacity_run_whose_replies_cannot_be_held_to_their_length_shows_nothing():
    """A run folder from before the records kept what they asked, or replies without usage: not a pass."""
    bare = [{**reply(i), "asked": None} for i in range(3)]
    got = served_verdict(bare, counters=False, length_required=True)
    assert got["status"] == "not-observable" and "no completed reply carries what it asked" in got["reason"]
