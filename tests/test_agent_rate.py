"""The tool-call failure rate (k3lib.axes.agent.rate), the vendor contract's policy (contract_judge) and the serving
findings (serving), judged over crafted raw results: the smallest thing that shows each rule, and the attacks on it."""

from __future__ import annotations

import pytest

from k3lib.axes.agent.contract_judge import ITEMS, contract_findings
from k3lib.axes.agent.judge import iter_findings
from k3lib.axes.agent.result import AgentResult
from k3lib.axes.agent.rate import failure_rate_finding, provable_rate, turns_needed
from k3lib.axes.agent.serving import serving_findings
from k3lib.core.params import load_params
from k3lib.core.thresholds import loosened
from k3lib.core.params import default_tree


def turns(n: int, failures: int = 0, recovered: int = 0, mode_split: bool = True) -> list[dict]:
    out = []
    for i in range(n):
        failed = i < failures
        out.append({"turn": i, "case": "tool-call", "level": 2, "mode": "stream" if mode_split and i % 2 else
                    "non-stream", "failure": "tool_calls_present: no tool_calls; lookup_order was required"
                    if failed else None, "recovered": (i < recovered) if failed else None, "checks": []})
    return out


SETTINGS = {"tool_turns": 381, "tool_turns_needed": 381, "max_tool_call_failure_rate": 0.01}


def test_the_contracts_tolerance_sets_the_number_of_turns():
    assert turns_needed(0.01) == 381 and turns_needed(0.05) == 73
    assert provable_rate(381) <= 0.01 < provable_rate(380)


def test_no_failure_in_enough_turns_passes_with_its_interval():
    f = failure_rate_finding(turns(381), SETTINGS)
    assert f is not None and f.status == "pass"
    assert f.observed["interval"][1] <= 0.01 and "0 of 381 tool turns failed" in f.message
    assert f.observed["by_mode"]["stream"]["turns"] + f.observed["by_mode"]["non-stream"]["turns"] == 381


def test_one_failure_in_381_is_inconclusive_not_a_pass():
    f = failure_rate_finding(turns(381, failures=1, recovered=1), SETTINGS)
    assert f is not None and f.status == "not-observable" and "straddles 1 %" in f.message
    assert f.observed["recovered_by_retry"] == 1 and f.observed["not_recovered"] == 0


def test_a_rate_above_the_tolerance_over_the_whole_interval_fails_and_blocks():
    f = failure_rate_finding(turns(381, failures=20, recovered=15), SETTINGS)
    assert f is not None and f.status == "fail" and f.evidence["blocks"] == "agents"
    assert "15 recovered by one retry, 5 not" in f.message and "no tool_calls" in f.message


def test_a_retry_does_not_excuse_the_failure():
    """Recovered by one retry is counted apart, never out of the rate: every failure recovered still fails."""
    f = failure_rate_finding(turns(381, failures=20, recovered=20), SETTINGS)
    assert f is not None and f.status == "fail" and f.observed["failures"] == 20


def test_a_smaller_series_is_judged_at_the_contracts_rate_and_cannot_pass():
    """Attack (issue 43): plan 24 turns and pass at the 13.8 % they can bound instead of the contract's 1 %. Judged
    at the contract's rate, too few turns without a failure is not observable, never a pass."""
    small = {**SETTINGS, "tool_turns": 24}
    f = failure_rate_finding(turns(24), small)
    assert f is not None and f.status == "not-observable" and f.observed["judged_at"] == 0.01
    assert "13.8 % is the most 24 turns can bound; the contract's 1 % needs 381" in f.message


def test_a_smaller_series_still_fails_a_rate_above_the_contract_over_its_whole_interval():
    f = failure_rate_finding(turns(24, failures=12), {**SETTINGS, "tool_turns": 24})
    assert f is not None and f.status == "fail"


def test_a_series_cut_short_by_its_budget_cannot_pass():
    """Attack: stop the series early (a budget, a kill) and keep the zero failures of what ran."""
    f = failure_rate_finding(turns(100), SETTINGS)
    assert f is not None and f.status == "not-observable" and "100 of 381 planned turns ran" in f.message


def test_shrinking_the_series_or_raising_the_tolerance_is_a_loosened_setting(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("extends: " + str(pytest.importorskip("pathlib").Path(__file__).resolve().parents[1] /
                                   "parameters" / "kimi-k3.yaml") + "\ntarget: {base_url: 'http://127.0.0.1:8000'}\n")
    base = load_params([f])
    assert not [t for t in loosened(base.public_dict(), default_tree()) if "agent" in t.path or "tool" in t.path]
    for sets, path in ((["axes.agent.tool_turns=40"], "axes.agent.tool_turns"),
                       (["contract.max_tool_call_failure_rate=0.05"], "contract.max_tool_call_failure_rate"),
                       (["axes.agent.stream=false"], "axes.agent.stream"),
                       (["axes.agent.contract_check=false"], "axes.agent.contract_check")):
        p = load_params([f], sets)
        assert path in {t.path for t in loosened(p.public_dict(), default_tree())}, path


# -- the vendor contract's policy -------------------------------------------------------------------------------


def row(item: str, passed: bool | None, mode: str = "non-stream", **reply) -> dict:
    return {"id": item, "mode": mode, "passed": passed, "detail": f"{item} {mode}",
            "reply": {"ok": True, **reply} if reply else None}


def test_blocking_items_fail_and_compatibility_items_only_inform():
    rows = [row("tool_choice_required", False), row("sampling_pinned", False),
            row("tool_choice_none", True, reasoning_field="reasoning")]
    got = {f.rule: f for f in contract_findings(rows, {})}
    assert got["agent.contract.tool_choice_required"].status == "fail"
    assert got["agent.contract.tool_choice_required"].evidence["seed_item"] == "C06"
    assert got["agent.compat.sampling_pinned"].status == "info"
    assert got["agent.compat.sampling_pinned"].message.startswith("client compatibility, does not block")
    assert got["agent.compat.reasoning_field"].status == "info"  # vLLM's `reasoning`, no client field declared


@pytest.mark.parametrize("settings, rule", [
    pytest.param({"sampling_pinned": True}, "agent.contract.sampling_pinned", id="pinned-by-contract"),
    pytest.param({"client_reasoning_field": "reasoning_content"}, "agent.contract.reasoning_field",
                 id="clients-read-reasoning_content"),
])
def test_the_contract_makes_a_compatibility_item_block(settings, rule):
    rows = [row("sampling_pinned", False), row("tool_choice_none", True, reasoning_field="reasoning")]
    got = {f.rule: f for f in contract_findings(rows, settings)}
    assert got[rule].status == "fail" and got[rule].evidence["blocks"] == "agents"


def test_every_contract_item_names_its_sheet_item():
    from k3lib.verdict.sheet import ITEMS as SHEET

    ids = {i.id for i in SHEET}
    assert all(item.seed_item in ids for item in ITEMS.values())
    on_sheet = {r for i in SHEET for r in i.rules}
    for item in ITEMS.values():  # a blocking item is on the sheet; a compatibility one never opens an item
        assert (f"agent.contract.{item.id}" in on_sheet) is (item.blocks and item.id not in
                                                              ("sampling_pinned", "reasoning_field"))


# -- the serving findings --------------------------------------------------------------------------------------


def result_with(replies: list[dict], **settings) -> AgentResult:
    steps = [{"level": 1, "repetition": 0, "seq": i, "case": "c", "turn": 0, "round": 0, "checks": [],
              "reply": r, "parsed": {}} for i, r in enumerate(replies)]
    return AgentResult({"min_pass_rate": 1.0, **settings}, {"cases": []}, [], [], steps)


def streamed(gap_s: float, e2e_ms: float = 1000.0) -> dict:
    ns = 1_000_000_000
    return {"ok": True, "stream": True, "sent_ns": 0, "first_byte_ns": ns // 10, "output_chunk_ns": [ns // 10,
            ns // 10 + int(gap_s * ns)], "done_ns": ns // 10 + int(gap_s * ns) + 1, "e2e_ms": e2e_ms}


def test_a_silence_longer_than_the_clients_idle_timeout_fails_and_blocks():
    f = {x.rule: x for x in serving_findings(result_with([streamed(0.2), streamed(200)],
                                                          client_idle_timeout_s=180))}
    assert f["agent.stream_silence"].status == "fail" and "180 s idle timeout" in f["agent.stream_silence"].message
    ok = {x.rule: x for x in serving_findings(result_with([streamed(0.2)], client_idle_timeout_s=180))}
    assert ok["agent.stream_silence"].status == "pass"
    told = {x.rule: x for x in serving_findings(result_with([streamed(0.2)]))}
    assert told["agent.stream_silence"].status == "info"  # no timeout in the contract: said, not judged


def test_a_gateway_timeout_below_the_end_to_end_objective_is_flagged():
    f = {x.rule: x for x in serving_findings(result_with([streamed(0.1, e2e_ms=2000)], gateway_timeout_s=300,
                                                          e2e_p95_ms=600_000))}
    assert f["agent.client_timeouts"].status == "warn" and "end-to-end objective" in f["agent.client_timeouts"].message
    longer = {x.rule: x for x in serving_findings(result_with([streamed(0.1, e2e_ms=400_000)], gateway_timeout_s=300))}
    assert longer["agent.client_timeouts"].status == "warn" and "longest agent request" in \
        longer["agent.client_timeouts"].message


def test_thinking_checks_say_nothing_when_the_recipe_declares_no_thinking():
    rules = {f.rule for f in iter_findings(result_with([]))}
    assert "agent.reasoning_present" not in rules and "agent.no_reasoning_leak" not in rules


@pytest.mark.parametrize("log, said", [
    pytest.param("non-default args: {'model': 'k3', 'tool_strict_level': 'parameter'}", "parameter (log: non-default args)",
                 id="from-the-args"),
    pytest.param("INFO serving with defaults", "states no --tool-strict-level", id="default"),
    pytest.param(None, "not recorded", id="no-log"),
])
def test_the_tool_strict_level_is_recorded_from_the_log(log, said):
    from k3lib.axes.agent.serving import tool_strict_settings

    r = result_with([])
    r = AgentResult(r.settings, r.sample, [], [], [], serving={"tool_strict": tool_strict_settings(log)})
    f = {x.rule: x for x in serving_findings(r)}["agent.tool_strict_level"]
    assert f.status == "info" and said in f.message


def test_the_series_stops_once_a_failure_is_decided_never_once_a_pass_is():
    """A failing target need not be sent the 381 turns: the series stops when the rate is above the contract's at
    99.9 %; a clean series always runs to its end (a pass rests on every turn planned)."""
    from types import SimpleNamespace

    from k3lib.axes.agent.series import ToolTurnSeries

    series = ToolTurnSeries(None, None, SimpleNamespace(max_tool_call_failure_rate=0.01), 4)  # type: ignore[arg-type]
    series.turns = turns(380)
    assert not series.failed_already()
    series.turns = turns(20, failures=6)
    assert not series.failed_already()  # never before 30 turns: looking after each turn would catch a bad start
    series.turns = turns(30, failures=2)
    assert not series.failed_already()  # two failures in 30 is chance at 99.9 %
    series.turns = turns(30, failures=6)
    assert series.failed_already()
    f = failure_rate_finding(series.turns, SETTINGS)
    assert f is not None and f.status == "fail"
