"""Target faults survived: the acceptance batch against a target that refuses, dies mid-stream, answers 5xx in
bursts, stalls past the timeouts, sends truncated or invalid SSE, or answers in an unknown shape.

Each case runs the whole batch through the CLI with tiny per-axis bounds and asserts: it ends with a decision
(exit 3, 4 or 5, never a traceback), every load-bearing axis' evidence names the cause, and every load axis
stopped within its configured bound.
"""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path

import pytest

from k3lib.cli.main import main
from k3lib.core.store import RunStore
from test_hardening_server import Misbehaving, closed_port

ROOT = Path(__file__).resolve().parents[1]
EMULATOR_YAML = str(ROOT / "parameters" / "emulator.yaml")

# Tiny, but every phase still runs: one agent level, one long-context length, one concurrency step, a short
# soak, one prefix session. Request timeouts of 3 s make a stalled target cost seconds, not minutes.
REQUEST_TIMEOUT_S = 3
AGENT_LEVEL_S = 6
PREFIX_MAX_S = 6
TINY = [
    "contract.planned_concurrency=4",
    "run.notebook_timeout_s=150",
    "target.restart_timeout_s=5",
    "axes.probe.timeout_s=3",
    "axes.environment.timeout_s=3",
    "axes.agent.repetitions=2",
    "axes.agent.concurrency_levels=[2]",
    "axes.agent.max_requests=30",
    "axes.agent.tool_turns=4",  # the faults are the point, not the contract's 381-turn series (about 8 s a batch)
    f"axes.agent.max_duration_s={AGENT_LEVEL_S}",
    f"axes.agent.request_timeout_s={REQUEST_TIMEOUT_S}",
    "axes.capacity.ready_timeout_s=2",
    f"axes.capacity.request_timeout_s={REQUEST_TIMEOUT_S}",
    "axes.capacity.context_lengths_tokens=[800]",
    "axes.capacity.long_context_output_tokens=8",
    "axes.capacity.concurrency_steps=[2]",
    "axes.capacity.prompt_tokens=256",
    "axes.capacity.output_tokens=16",
    "axes.capacity.step_duration_s=1",
    "axes.capacity.step_max_requests=40",
    "axes.capacity.soak_duration_s=1",
    "axes.capacity.soak_max_requests=40",
    "axes.prefix_cache.sessions=2",
    "axes.prefix_cache.prefix_tokens=[600]",
    f"axes.prefix_cache.max_duration_s={PREFIX_MAX_S}",
    f"axes.prefix_cache.request_timeout_s={REQUEST_TIMEOUT_S}",
    "axes.prefix_cache.settle_s=0.5",
    "axes.operations.drill_timeout_s=10",
]

LOAD_AXES = {"agent": "02_agent_tools.ipynb", "capacity": "03_capacity.ipynb", "prefix_cache": "04_prefix_cache.ipynb"}

# A target that refuses every connection never reaches the axes: the preflight ends the run with one line, exit 2
# (tests/test_preflight.py). The cases below answer the preflight and misbehave on the chat path.
# case → (how the target misbehaves: a proxy mode, emulator faults or a closed port; extra --set; the cause, as a
# regex that every load axis' evidence must show). The agent plays its scenario streamed where the fault is in
# the stream, so that all three load axes meet the same defect.
STREAMED = ["axes.agent.stream=true"]
# Two cases run the whole batch through the CLI (a decision, the report, the notebooks' progress lines: the batch's
# assembly is the point); the others run the three load axes in-process against the same target, with the same
# assertions on each axis' record and on every load phase's bound. The stalled target is one of those: its whole
# batch takes about three minutes on two cores, nearly all of it outside the load axes.
CASES = [
    pytest.param("proxy", "die-mid-stream", [], STREAMED, r"broke mid-reply", id="dies-mid-stream"),
    pytest.param("emulator", None, ["flaky-5xx=0.6"], [], r"\b50[03]\b", id="flaky-5xx"),
]
AXIS_CASES = [
    pytest.param("emulator", None, ["slow=2000"], [], r"within 3 s|Timeout|timed out|deadline", id="stalls"),
    pytest.param("proxy", "truncated-sse", [], STREAMED, r"without `data: \[DONE\]`", id="truncated-sse"),
    pytest.param("proxy", "invalid-sse", [], STREAMED, r"invalid JSON in SSE", id="invalid-sse"),
    pytest.param("proxy", "unknown-shape", [], [], r"not a chat completion", id="unknown-shape"),
]


def _durations(err: str) -> dict[str, tuple[str, float]]:
    """The runner's progress lines: `[3/7] 02_agent_tools.ipynb   ok   15.7s` → {notebook: (status, s)}."""
    out = {}
    for m in re.finditer(r"^\[\d+/\d+\]\s+(\S+\.ipynb)\s+(\S+)\s+([\d.]+)s$", err, re.M):
        out[m.group(1)] = (m.group(2), float(m.group(3)))
    return out


def load_spans(store: RunStore) -> list[tuple[str, float, float]]:
    """(what, seconds it lasted, its configured bound) for every load phase the run folder describes."""
    spans = []
    run = store.read_json("evidence/capacity/run.json") or {}
    budget = (run.get("plan") or {}).get("budget_s", {})
    for phase in run.get("phases", []):
        if phase.get("end_wall") is not None:
            spans.append((f"capacity {phase['phase']}", phase["end_wall"] - phase["start_wall"],
                          budget[phase["phase"]]))
    agent = store.read_json("evidence/agent/run.json") or {}
    for level in agent.get("levels", []):
        # a level stops at max_duration_s; requests then in flight get a grace to hand back their records
        spans.append((f"agent level {level['level']}", level["duration_s"], AGENT_LEVEL_S + 5.0))
    path = store.path("evidence/prefix_cache/requests.jsonl")
    if path.exists():
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if recs:
            start = min(r["wall_anchor_ns"] for r in recs) / 1e9
            end = max((r["wall_anchor_ns"] + ((r["done_ns"] or r["perf_anchor_ns"]) - r["perf_anchor_ns"])) / 1e9
                      for r in recs)
            # the protocol stops at max_duration_s between requests: the one under way may take its timeout
            spans.append(("prefix_cache requests", end - start, PREFIX_MAX_S + REQUEST_TIMEOUT_S + 0.5))
    return spans


@pytest.fixture(scope="module")
def upstream():
    from k3lib.emulator import EmulatorConfig, start_emulator

    handle = start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.05), host="127.0.0.1", port=0)
    yield handle
    handle.stop()


@pytest.mark.slow
@pytest.mark.parametrize("kind, mode, faults, sets, cause", CASES)
def test_batch_survives_a_misbehaving_target(tmp_path, capsys, upstream, kind, mode, faults, sets, cause):
    argv = ["validate", "-p", EMULATOR_YAML, "--out", str(tmp_path)]
    for s in [*TINY, *sets]:
        argv += ["--set", s]
    for f in faults:
        argv += ["--fault", f]
    with ExitStack() as stack:
        if kind == "refused":
            argv += ["--set", f"target.base_url=http://127.0.0.1:{closed_port()}"]
        elif kind == "proxy":  # it forwards the emulator's admin paths too: restart and rollback drill work
            proxy = stack.enter_context(Misbehaving(upstream.url, mode))
            argv += ["--set", f"target.base_url={proxy.url}"]
        code = main(argv)
    out, err = capsys.readouterr()
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    store = RunStore(run)

    # a decision, never a crash
    decision = json.loads(store.path("decision.json").read_text())
    assert code in (3, 4, 5), (code, decision["reasons"])
    assert f"decision: {decision['decision']}" in out
    assert "Traceback" not in out + err
    assert store.verify() == []
    assert store.path("report/index.html").is_file()

    # every load axis ran to its own record (no notebook crash) and names the cause
    durations = _durations(err)
    for axis, nb in LOAD_AXES.items():
        record = json.loads(store.path(f"evidence/{axis}.json").read_text())
        assert not any(f["rule"] == f"{axis}.notebook" for f in record["findings"]), \
            f"{axis}: the notebook crashed: {record.get('error')}"
        assert record["status"] in ("fail", "not-observable", "warn"), (axis, record["status"], record["summary"])
        assert re.search(cause, json.dumps(record)), \
            f"{axis}: the cause ({cause}) is not in its evidence: {record['summary']}"
        # the notebook ran to its end, and its progress line shows the axis' verdict, not "ok"
        assert durations[nb][0] == record["status"], (nb, durations[nb], record["status"])

    # every load phase stopped within its configured bound, and the load notebooks together took well under the
    # sum of those bounds (a notebook adds its kernel start and figures: a few seconds)
    spans = _assert_bounded(store)
    load_s = sum(durations[nb][1] for nb in LOAD_AXES.values())
    assert load_s < 0.75 * sum(bound for _, _, bound in spans) + 3 * 8.0, (load_s, spans)


def _assert_bounded(store: RunStore) -> list[tuple[str, float, float]]:
    spans = load_spans(store)
    assert {s[0].split()[0] for s in spans} == {"capacity", "agent", "prefix_cache"}, spans
    for what, seconds, bound in spans:
        assert seconds <= bound + 1.0, f"{what} lasted {seconds:.1f} s, bound {bound:.1f} s"
    return spans


@pytest.mark.slow
@pytest.mark.parametrize("kind, mode, faults, sets, cause", AXIS_CASES)
def test_each_load_axis_survives_a_misbehaving_target(tmp_path, upstream, kind, mode, faults, sets, cause):
    """What the whole batch above shows of each load axis, in-process: its record names the cause and is a verdict
    (an axis that raises fails this test), every load phase stops within its bound, and the decision over the three
    records is never production."""
    import time

    import k3lib
    from k3lib.emulator import EmulatorConfig, start_emulator
    from k3lib.verdict.decision import decide
    from test_batch import _axis_record

    with ExitStack() as stack:
        if kind == "proxy":
            url = stack.enter_context(Misbehaving(upstream.url, mode)).url
        else:  # the batch's embedded emulator: the demo profile at the parameters' time scale, with the faults
            url = stack.enter_context(start_emulator(
                EmulatorConfig.from_profile("demo", faults=tuple(faults), time_scale=0.05), host="127.0.0.1",
                port=0)).url
        records, took = {}, {}
        for axis in LOAD_AXES:
            ctx = k3lib.open_axis(axis, EMULATOR_YAML, [f"target.base_url={url}", *TINY, *sets],
                                  str(tmp_path / "run"))
            t0 = time.monotonic()
            records[axis] = ctx.record(_axis_record(axis, ctx))
            took[axis] = time.monotonic() - t0
    store = RunStore(tmp_path / "run")
    for axis, record in records.items():
        assert record.status in ("fail", "not-observable", "warn"), (axis, record.status, record.summary)
        assert re.search(cause, json.dumps(record.model_dump(mode="json"))), \
            f"{axis}: the cause ({cause}) is not in its evidence: {record.summary}"
    spans = _assert_bounded(store)
    # the three axes together well under the sum of their phases' bounds, with the whole batch's allowance per axis
    assert sum(took.values()) < 0.75 * sum(bound for _, _, bound in spans) + 3 * 8.0, (took, spans)
    assert decide(records, list(LOAD_AXES)).decision != "production"
    assert store.verify() == []
