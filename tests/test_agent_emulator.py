"""Axis 2 against the emulator over a real socket: healthy, tool-call faults at a known share, no tool parser,
bounds, streaming, re-rendering from the run folder, and the notebook under papermill."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

import k3lib.axes.agent as agent  # noqa: F401  (until k3lib/__init__.py imports it)
from k3lib.verdict.decision import decide, level_for
from k3lib.emulator import EmulatorConfig, start_emulator
from k3lib.axes.agent.figures import failing_example, rates_table
from k3lib.opening.axis import open_axis

ROOT = Path(__file__).resolve().parents[1]
PARAMS = str(ROOT / "parameters" / "emulator.yaml")
TOOL_CHECKS = ("tool_calls_present", "function_name", "arguments_valid", "executable", "final_answer",
               "tool_error_fallback", "structure_stable", "no_markup_leak", "requests_ok")


@pytest.fixture(scope="module")
def server():
    with start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.01)) as h:
        yield h


def restart(server, *faults: str) -> None:
    r = httpx.post(f"{server.url}/_emulator/restart", json={"faults": list(faults), "time_scale": 0.01}, timeout=30)
    assert r.status_code == 200, r.text


def run(server, tmp_path, *sets: str):
    ctx = open_axis("agent", PARAMS, [f"target.base_url={server.url}", *sets], str(tmp_path / "run"))
    result = agent.run_agent(ctx)
    record = ctx.record(agent.agent_record(result, ctx))
    return ctx, result, record


def rate(record, check: str, level: int) -> float:
    row = record.by_rule(f"agent.{check}").observed[str(level)]
    return row["rate"]


@pytest.mark.slow
def test_healthy_every_check_passes_at_every_level(server, tmp_path):
    restart(server)
    ctx, result, record = run(server, tmp_path, "axes.agent.repetitions=2", "axes.agent.concurrency_levels=[1,3]",
                              "contract.images_served=true")
    assert record.status == "pass", [f.message for f in record.failed()]
    assert decide({"agent": record}, ["agent"]).decision == "production"
    for check in TOOL_CHECKS:
        finding = record.by_rule(f"agent.{check}")
        assert finding.status == "pass", finding.message
        for level in ("1", "3"):
            assert finding.observed[level]["total"] > 0 and finding.observed[level]["rate"] == 1.0, (check, level)
    assert record.by_rule("agent.auto_tool_choice").status == "pass"
    assert [lv["level"] for lv in result.levels] == [1, 3] and result.levels[1]["repetitions_planned"] == 3
    assert not result.skipped and {s["case"] for s in result.steps} >= {"multimodal", "structured", "long-exchange"}

    # every request is kept with what the seed asks for, and history goes back intact
    for step in result.steps:
        assert {"request", "max_tokens", "context_limit", "temperature", "tool_schema", "reply", "parsed",
                "decision"} <= set(step) and step["decision"]
        assert step["max_tokens"] <= 128 and step["context_limit"] == 4096
    follow = next(s for s in result.steps if s["phase"] == "after-tool")
    prior = next(s for s in result.steps if s["repetition"] == follow["repetition"] and s["level"] == follow["level"]
                 and s["seq"] == follow["seq"] - 1)
    sent = [m for m in follow["request"]["messages"] if m["role"] == "assistant"][-1]
    received = prior["reply"]["raw_json"]["choices"][0]["message"]
    assert sent["tool_calls"] == received["tool_calls"] and sent["reasoning"] == received["reasoning"]
    assert record.by_rule("agent.context_growth").observed["max_prompt_tokens"] > 1000

    # the run folder re-renders the same result without a request
    again = agent.load_agent_result(ctx.store)
    assert rates_table(again).equals(rates_table(result))
    assert ctx.store.verify() == []
    assert failing_example(result).step is None


@pytest.mark.slow
@pytest.mark.parametrize("fault, share, failing", [
    pytest.param("tool-markup-leak", 0.3, ("no_markup_leak", "tool_calls_present"), id="markup-leak-default"),
    pytest.param("bad-tool-args", 0.3, ("arguments_valid", "executable"), id="bad-args-default"),
    pytest.param("bad-tool-args=0.5", 0.5, ("arguments_valid", "executable"), id="bad-args-0.5"),
])
def test_tool_faults_fail_the_matching_checks_near_the_injected_share(server, tmp_path, fault, share, failing):
    restart(server, fault)
    # ~100 tool calls under load: the measured share's standard error is ~0.045, the tolerance 0.15
    _ctx, result, record = run(server, tmp_path, "axes.agent.repetitions=24", "axes.agent.concurrency_levels=[8]",
                               "axes.agent.tool_turns=1", "axes.agent.contract_check=false")
    assert record.status == "fail"
    calls = record.by_rule("agent.tool_calls_present").observed["8"]["total"]  # the replies that must carry a call
    for check in failing:
        finding = record.by_rule(f"agent.{check}")
        assert finding.status == "fail" and level_for(finding)[0] == "limited-observation"
        row = finding.observed["8"]
        assert row["total"] >= 60, row
        # every reply is scanned for leaks, and only the ones carrying a call can leak one
        failed_share = row["failed"] / calls if check == "no_markup_leak" else 1 - row["rate"]
        assert abs(failed_share - share) <= 0.15, (check, row)
    verdict = decide({"agent": record}, ["agent"])
    assert verdict.decision == "limited-observation" and verdict.agents_blocked
    untouched = ("function_name", "requests_ok") + (("arguments_valid",) if "leak" in fault else ("no_markup_leak",))
    for check in untouched:
        assert record.by_rule(f"agent.{check}").status == "pass", check
    example = failing_example(result)
    assert example.step is not None and {o["check"] for o in example.failures} & set(failing)
    if "leak" in fault:
        assert "kimi_k3" in record.by_rule("agent.no_markup_leak").message


@pytest.mark.slow
def test_no_tool_parser_is_an_environment_finding(server, tmp_path):
    restart(server, "no-tool-parser")
    _ctx, result, record = run(server, tmp_path, "axes.agent.repetitions=2", "axes.agent.concurrency_levels=[1,2]")
    env = record.by_rule("agent.auto_tool_choice")
    assert record.status == "fail" and env.status == "fail"
    assert "auto tool choice not enabled on the server" in env.message
    assert env.evidence["category"] == "environment" and level_for(env)[0] == "environment-rebuild"
    assert record.by_rule("agent.requests_ok").status == "pass"  # the refusal is not counted twice
    assert record.by_rule("agent.arguments_valid").status == "not-observable"
    assert any("flags missing" in s["decision"] for s in result.steps)
    assert decide({"agent": record}, ["agent"]).decision == "environment-rebuild"


@pytest.mark.slow
def test_streamed_scenario_and_request_bound(server, tmp_path):
    restart(server, "bad-tool-args=1")
    _ctx, result, record = run(server, tmp_path, "axes.agent.stream=true", "axes.agent.repetitions=3",
                               "axes.agent.concurrency_levels=[2]", "axes.agent.max_requests=7")
    assert len(result.steps) == 7 and all(s["reply"]["stream"] for s in result.steps)
    assert result.levels[0]["stopped_by"] == "max_requests"
    assert record.by_rule("agent.budget").status == "warn"
    assert record.by_rule("agent.arguments_valid").status == "fail"
    bad = failing_example(result)
    assert bad.step is not None and "data: " in bad.raw_text()


@pytest.mark.slow
def test_time_bound_stops_the_level(server, tmp_path):
    restart(server, "slow=50")
    _ctx, result, _record = run(server, tmp_path, "axes.agent.repetitions=50", "axes.agent.concurrency_levels=[2]",
                                "axes.agent.max_duration_s=1.5")
    level = result.levels[0]
    assert level["stopped_by"] == "max_duration_s" and level["duration_s"] < 1.5 + 6
    assert level["repetitions_completed"] < 50


@pytest.mark.slow
def test_notebook_under_papermill_against_the_emulator(server, tmp_path):
    import papermill as pm

    restart(server, "bad-tool-args")
    run_dir = tmp_path / "run"
    pm.execute_notebook(str(ROOT / "notebooks/02_agent_tools.ipynb"), str(tmp_path / "02.ipynb"),
                        kernel_name="python3", progress_bar=False, cwd=str(ROOT),
                        parameters={"params_file": "parameters/emulator.yaml", "run_dir": str(run_dir),
                                    "overrides": [f"target.base_url={server.url}", "axes.agent.repetitions=2",
                                                  "axes.agent.concurrency_levels=[2]"]})
    record = json.loads((run_dir / "evidence/agent.json").read_text())
    assert record["axis"] == "agent" and record["status"] == "fail"
    assert {"agent.arguments_valid", "agent.auto_tool_choice"} <= {f["rule"] for f in record["findings"]}
    assert (run_dir / "evidence/agent/requests.jsonl").exists()


@pytest.mark.slow
def test_the_plans_at_most_ends_the_axis_as_stopped_judged_on_what_was_measured(server, tmp_path):
    """A request past the plan's at-most is refused before it is sent (ConsentExceeded): the axis ends as stopped
    with what it measured kept and judged, its notebook does not crash, and a stopped axis is never a pass."""
    restart(server)
    run_dir = tmp_path / "run"
    first = open_axis("agent", PARAMS, [f"target.base_url={server.url}"], str(run_dir))
    first.store.write_json("plan.json", {"axes": [{"axis": "agent", "seconds": 30, "requests": 40, "at_most": 6}]})
    ctx, result, record = run(server, tmp_path, "axes.agent.repetitions=2", "axes.agent.concurrency_levels=[1]")
    assert result.stopped and "the 6 requests the plan showed" in result.stopped
    sent = [json.loads(line) for line in (run_dir / "evidence" / "agent" / "requests.jsonl").read_text().splitlines()]
    assert 0 < len(sent) <= 6
    stop = [f for f in record.findings if f.rule == "agent.budget" and "plan" in f.message]
    assert stop and stop[0].status == "warn", [f.message for f in record.findings]
    assert decide({"agent": record}, ["agent"]).decision != "production"
    assert agent.load_agent_result(ctx.store).stopped == result.stopped
