"""Attestation file and rollback drill: what the kit cannot observe stays open unless attested or drilled."""

from __future__ import annotations

import datetime as dt
import socket
import sys
from pathlib import Path

import pytest
import yaml

from k3lib.axes.attestation import (RULE_LIMITS, RULE_ROLLBACK, DrillResult, HttpAction, Served, attestation_findings,
                               parse_attestation, parse_drill_command, read_attestation, rollback_drill)
from k3lib.core.errors import BadInputError

EXAMPLE = Path(__file__).resolve().parents[1] / "parameters" / "attestation.example.yaml"
TODAY = dt.date(2026, 12, 1)


def example_data() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


@pytest.fixture(scope="module")
def emulator_url():
    from k3lib.emulator import EmulatorConfig, start_emulator

    handle = start_emulator(EmulatorConfig.from_profile("demo", time_scale=0.02), host="127.0.0.1", port=0)
    yield handle.url
    handle.stop()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_the_shipped_example_reads():
    att = read_attestation(EXAMPLE)
    assert att.who.startswith("Camille") and att.when == dt.date(2026, 11, 28)
    assert att.items.operator_knows_limits.context_limit_tokens == 32768
    assert att.items.rollback_rehearsed.duration_s == 360


def _without(data: dict, *path: str) -> dict:
    node = data
    for p in path[:-1]:
        node = node[p]
    node.pop(path[-1])
    return data


@pytest.mark.parametrize("mutate, field, match", [
    pytest.param(lambda d: d.update(signed=True) or d, "signed", "unknown key", id="unknown-top-key"),
    pytest.param(lambda d: d["items"]["operator_knows_limits"].update(qps=3) or d,
                 "items.operator_knows_limits.qps", "unknown key", id="unknown-item-key"),
    pytest.param(lambda d: d.update(when="last week") or d, "when", "ISO date", id="bad-date"),
    pytest.param(lambda d: _without(d, "who"), "who", "required", id="missing-who"),
    pytest.param(lambda d: d.update(link="  ") or d, "link", "at least 1", id="blank-link"),
    pytest.param(lambda d: d.update(items={}) or d, "items", "at least one item", id="no-items"),
    pytest.param(lambda d: d["items"]["operator_knows_limits"].update(concurrency_limit=0) or d,
                 "items.operator_knows_limits.concurrency_limit", "greater than 0", id="zero-concurrency"),
])
def test_bad_attestations_are_one_line_bad_input(mutate, field, match):
    with pytest.raises(BadInputError, match=match) as info:
        parse_attestation(mutate(example_data()), "att.yaml")
    assert info.value.field == field and info.value.source == "att.yaml"
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize("text, match", [
    pytest.param("who: [unclosed", "not valid YAML", id="invalid-yaml"),
    pytest.param("- a list\n", "expected a mapping", id="not-a-mapping"),
])
def test_unreadable_files_are_bad_input(tmp_path, text, match):
    path = tmp_path / "att.yaml"
    path.write_text(text)
    with pytest.raises(BadInputError, match=match):
        read_attestation(path)
    with pytest.raises(BadInputError, match="file not found"):
        read_attestation(tmp_path / "missing.yaml")


def _statuses(findings):
    return {f.rule: f.status for f in findings}


def test_nothing_attested_nothing_drilled_stays_open_never_pass():
    findings = attestation_findings(None, today=TODAY)
    assert _statuses(findings) == {RULE_LIMITS: "not-observable", RULE_ROLLBACK: "not-observable"}
    assert all(f.message.startswith("open:") for f in findings)


@pytest.mark.parametrize("change, contract, planned, expected", [
    pytest.param({}, 32768, 5, {RULE_LIMITS: "pass", RULE_ROLLBACK: "pass"}, id="matches-contract"),
    pytest.param({}, 65536, 5, {RULE_LIMITS: "fail", RULE_ROLLBACK: "pass"}, id="wrong-context-limit"),
    pytest.param({}, 32768, 4, {RULE_LIMITS: "fail", RULE_ROLLBACK: "pass"}, id="concurrency-above-accepted"),
    pytest.param({}, 32768, 8, {RULE_LIMITS: "pass", RULE_ROLLBACK: "pass"}, id="concurrency-below-accepted"),
    pytest.param({"when": "2027-01-01"}, 32768, 5, {RULE_LIMITS: "fail", RULE_ROLLBACK: "fail"}, id="future-date"),
    pytest.param({"items": {"rollback_rehearsed": {"previous_image": "vllm/vllm-openai:v0.32.1",
                                                   "result": "served again with a chat completion"}}}, 32768, 5,
                 {RULE_LIMITS: "not-observable", RULE_ROLLBACK: "pass"}, id="only-rollback-attested"),
    pytest.param({"when": "2026-11-17"}, 32768, 5, {RULE_LIMITS: "pass", RULE_ROLLBACK: "pass"},
                 id="fourteen-days-old"),
    pytest.param({"when": "2026-11-16"}, 32768, 5, {RULE_LIMITS: "fail", RULE_ROLLBACK: "fail"},
                 id="older-than-the-window"),
])
def test_attested_items(change, contract, planned, expected):
    data = example_data()
    data.update(change)
    att = parse_attestation(data, "att.yaml")
    findings = attestation_findings(att, contract_context_tokens=contract, planned_concurrency=planned, today=TODAY,
                                    accepted=ACCEPTED)
    assert _statuses(findings) == expected
    passed = [f for f in findings if f.status == "pass"]
    assert all("Camille Durand" in f.message and "OPS-1234" in f.message for f in passed)


ACCEPTED = Served("0.33.0", "vllm/vllm-openai:v0.33.0", "sha256:" + "a" * 64)
PREVIOUS = Served("0.32.1", "vllm/vllm-openai:v0.32.1", "sha256:" + "b" * 64)


def _drill(ok: bool) -> DrillResult:
    return DrillResult("cmd", "http://127.0.0.1:1", ok, "exit status 0" if ok else "exit status 3",
                       200 if ok else None, ok, None if ok else "the rollback command failed", 1.0,
                       ACCEPTED, PREVIOUS if ok else None, "0.32.1",
                       {"command": "fwd", "detail": "HTTP 200", "serving": True, "error": None, "served": ACCEPTED})


def test_a_failed_drill_fails_the_item_whatever_was_attested():
    att = parse_attestation(example_data(), "att.yaml")
    findings = attestation_findings(att, drill=_drill(False), today=TODAY)
    assert _statuses(findings)[RULE_ROLLBACK] == "fail"
    findings = attestation_findings(None, drill=_drill(True), today=TODAY)
    assert _statuses(findings) == {RULE_LIMITS: "not-observable", RULE_ROLLBACK: "pass"}


@pytest.mark.parametrize("command, expected", [
    pytest.param('http:POST:{base_url}/_emulator/restart:{"profile": "demo"}',
                 HttpAction("POST", "http://h:8/_emulator/restart", {"profile": "demo"}), id="http-with-json"),
    pytest.param("http:get:http://h:8/health", HttpAction("GET", "http://h:8/health"), id="http-no-body"),
    pytest.param("kubectl rollout undo 'deployment/vllm k3'", ("kubectl", "rollout", "undo", "deployment/vllm k3"),
                 id="command-line"),
    pytest.param(["curl", "{base_url}/x"], ("curl", "http://h:8/x"), id="argv"),
])
def test_drill_command_forms(command, expected):
    assert parse_drill_command(command, "http://h:8/") == expected


@pytest.mark.parametrize("command, match", [
    pytest.param("http:POST", "http:METHOD:URL", id="no-url"),
    pytest.param("http:FETCH:http://h/x", "METHOD one of", id="bad-method"),
    pytest.param("http:POST:ftp://h/x", "http\\(s\\) URL", id="not-http-url"),
    pytest.param('http:POST:http://h/x:{"profile": }', "not JSON", id="bad-json"),
    pytest.param("   ", "empty", id="empty"),
    pytest.param([], "empty", id="empty-argv"),
    pytest.param("echo 'unclosed", "cannot split", id="unbalanced-quote"),
])
def test_bad_drill_commands_are_bad_input(command, match):
    with pytest.raises(BadInputError, match=match):
        parse_drill_command(command, "http://h:8")


RESTART = 'http:POST:{base_url}/_emulator/restart:{"profile": "demo", "vllm_version": "%s"}'
INSPECT = "{base_url}/_emulator/inspect"


def test_drill_rolls_the_emulator_back_shows_the_previous_release_and_rolls_forward(emulator_url):
    result = rollback_drill(RESTART % "0.32.1", emulator_url, 30, inspect=INSPECT, rollback_to="0.32.1",
                            roll_forward=RESTART % "0.33.0")
    assert result.before.vllm_version == "0.33.0" and result.before.image == "vllm/vllm-openai:v0.33.0"
    assert result.after.vllm_version == "0.32.1" and result.after.image == "vllm/vllm-openai:v0.32.1"
    assert result.before.digest.startswith("sha256:") and result.after.digest != result.before.digest
    assert result.forward["served"].same_as(result.before)
    finding = result.finding()
    assert finding.rule == RULE_ROLLBACK and finding.status == "pass", finding.message
    assert "vLLM 0.33.0" in finding.message and "previous release vLLM 0.32.1" in finding.message


@pytest.mark.parametrize("command", [
    pytest.param(["true"], id="true"),
    pytest.param([sys.executable, "-c", "print('rolled back')"], id="prints-but-does-nothing"),
    pytest.param('http:POST:{base_url}/_emulator/restart:{"profile": "demo"}', id="restarts-the-same-release"),
])
def test_a_drill_that_restores_nothing_leaves_c16_open(emulator_url, command):
    result = rollback_drill(command, emulator_url, 30, inspect=INSPECT)
    assert result.serving and not result.ok
    finding = result.finding()
    assert finding.status == "not-observable" and "changed nothing" in finding.message


def test_a_drill_to_the_wrong_release_fails(emulator_url):
    result = rollback_drill(RESTART % "0.31.0", emulator_url, 30, inspect=INSPECT, rollback_to="0.32.1",
                            roll_forward=RESTART % "0.33.0")
    finding = result.finding()
    assert finding.status == "fail" and "not the previous release 0.32.1" in finding.message


def test_a_roll_forward_that_does_not_return_fails(emulator_url):
    result = rollback_drill(RESTART % "0.32.1", emulator_url, 30, inspect=INSPECT, roll_forward=RESTART % "0.32.1")
    finding = result.finding()
    assert finding.status == "fail" and "not the accepted" in finding.message
    rollback_drill(RESTART % "0.33.0", emulator_url, 30)  # leave the module's emulator as it was


@pytest.mark.parametrize("command, url_kind, error", [
    pytest.param([sys.executable, "-c", "import sys; sys.exit(3)"], "emulator", "exit status 3", id="command-fails"),
    pytest.param('http:POST:{base_url}/_emulator/restart:{"profile": "no-such-profile"}', "emulator", "HTTP 400",
                 id="restart-refused"),
    pytest.param(["/nonexistent/rollback-tool"], "emulator", "command not found", id="command-missing"),
    pytest.param([sys.executable, "-c", "pass"], "closed", "did not serve within", id="target-down"),
])
def test_failed_drills_are_fail_findings(emulator_url, command, url_kind, error):
    url = emulator_url if url_kind == "emulator" else closed_port_url()
    result = rollback_drill(command, url, 1.5, poll_s=0.1)
    assert not result.ok and error in (result.error or "")
    assert result.finding().status == "fail"
    assert result.duration_s < 10
