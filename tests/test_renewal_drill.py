"""The live incident drill against the emulator answers the five questions; the pipeline artifact check."""

from __future__ import annotations

import hashlib
import json

import pytest

from k3lib.core.errors import BadInputError
from k3lib.renewal.artifacts import check_pipeline
from k3lib.renewal.drill import QUESTIONS, run_drill
from k3lib.renewal.params import DrillParams

from k3lib import emulator
from k3lib.renewal.drill import DrillObservation, answer_questions
from k3lib.renewal.demo import PREVIOUS_VERSION

KILL = [{"http": {"path": "/_emulator/faults", "json": {"faults": ["crash=1"]}}},
        {"http": {"path": "/v1/chat/completions", "json": {"messages": [{"role": "user", "content": "hi"}],
                                                           "max_tokens": 4}}}]


def _restart(version=None):
    body = {"profile": "demo", "faults": []} | ({"vllm_version": version} if version else {})
    return [{"http": {"path": "/_emulator/restart", "json": body}}]


ROLLBACK = _restart(PREVIOUS_VERSION)
NOOP = [{"argv": ["true"]}]


@pytest.fixture()
def servers():
    cfg = emulator.EmulatorConfig.from_profile("demo", time_scale=0.05)
    target, api = emulator.start_emulator(cfg, port=0), emulator.start_emulator(cfg, port=0)
    try:
        yield target, api
    finally:
        target.stop()
        api.stop()


def _drill(**kw):
    return DrillParams.model_validate({"kill": KILL, "restore": ROLLBACK, "recovery_timeout_s": 10,
                                       "request_timeout_s": 10, **kw})


def test_drill_answers_all_five_questions(servers):
    target, api = servers
    result = run_drill(target.url, _drill(previous_version=PREVIOUS_VERSION), api_base_url=api.url)
    answers = {k: v["answer"] for k, v in result["answers"].items()}
    assert answers == dict.fromkeys(QUESTIONS, "yes"), result["steps"]
    assert "error event" in result["answers"]["in_flight_resumed_or_cancelled"]["evidence"]
    assert result["versions"] == {"before": "0.33.0", "after_restore": PREVIOUS_VERSION,
                                  "expected_previous": PREVIOUS_VERSION}
    assert f"0.33.0 before the drill → {PREVIOUS_VERSION} after the restore" in \
        result["answers"]["previous_version_restored"]["evidence"]
    assert result["summary"].startswith("5/5")
    json.dumps(result)  # evidence-ready


def test_rollback_to_any_older_release_is_the_previous_version(servers):
    """No version named: an older release than the one served before the drill is the previous version."""
    target, _ = servers
    result = run_drill(target.url, _drill(restore=_restart("0.30.1")))
    assert result["answers"]["previous_version_restored"]["answer"] == "yes", result["steps"]


@pytest.mark.parametrize("drill, api, expected", [
    pytest.param({"restore": [], "recovery_timeout_s": 2}, True, {"previous_version_restored": "not shown"},
                 id="no-restore-command"),
    pytest.param({"restore": _restart()}, True, {"previous_version_restored": "not shown"},
                 id="restart-of-the-same-version-is-no-rollback"),
    pytest.param({"restore": _restart("0.10.0"), "previous_version": PREVIOUS_VERSION}, True,
                 {"previous_version_restored": "no"}, id="restored-another-version-than-the-named-one"),
    pytest.param({"restore": _restart("0.34.0")}, True, {"previous_version_restored": "no"},
                 id="restored-a-newer-version"),
    pytest.param({}, False, {"api_failover_without_contract_change": "not shown"}, id="no-api-configured"),
    pytest.param({"kill": [], "restore": [], "recovery_timeout_s": 1}, True,
                 {"detected_automatically": "not shown", "in_flight_resumed_or_cancelled": "not shown"},
                 id="kill-did-nothing"),
    pytest.param({"kill": NOOP, "restore": NOOP, "recovery_timeout_s": 2}, True,
                 {"detected_automatically": "not shown", "previous_version_restored": "not shown",
                  "in_flight_resumed_or_cancelled": "not shown", "fields_preserved": "not shown"},
                 id="no-op-kill-and-restore-show-nothing"),
])
@pytest.mark.slow
def test_drill_answers_no_or_not_shown_when_the_evidence_says_so(servers, drill, api, expected):
    target, api_server = servers
    result = run_drill(target.url, _drill(**drill), api_base_url=api_server.url if api else None)
    for q, a in expected.items():
        assert result["answers"][q]["answer"] == a, (q, result["answers"][q], result["steps"])


def _seen(**over):
    fields = {"call": {"reasoning": True, "content": False, "tool_calls": True},
              "answer": {"reasoning": True, "content": True, "tool_calls": False}}
    base = dict(detected=True, detect_s=0.2, health_after_kill="HTTP 503", task_outcome="error",
                task_detail="error event: engine dead", restore_steps=1, restored=True, recovery_s=1.0,
                version_before="0.33.0", version_after="0.32.0", previous_version=None, first_after_status=200,
                resumed_status=200, before_fields=fields, after_fields=fields, failover=None, timeout_s=10.0,
                in_flight_at_kill=True)
    return DrillObservation(**(base | over))


@pytest.mark.parametrize("over, question, answer", [
    pytest.param({}, "previous_version_restored", "yes", id="older-version-back"),
    pytest.param({"version_after": "0.33.0"}, "previous_version_restored", "not shown", id="same-version-back"),
    pytest.param({"version_after": None}, "previous_version_restored", "not shown", id="no-version-reported"),
    pytest.param({"first_after_status": 503}, "previous_version_restored", "no", id="not-serving-after-restore"),
    pytest.param({"detected": False, "health_after_kill": "HTTP 200", "task_outcome": "cut",
                  "task_detail": "connection dropped"}, "detected_automatically", "no",
                 id="task-broke-but-health-stayed-200"),
    pytest.param({"detected": False, "health_after_kill": "HTTP 200", "task_outcome": "finished"},
                 "fields_preserved", "not shown", id="nothing-went-down-nothing-recovered"),
    pytest.param({"before_fields": {"call": {"reasoning": False, "content": True, "tool_calls": False},
                                    "answer": {"reasoning": False, "content": True, "tool_calls": False}}},
                 "fields_preserved", "not shown", id="no-reasoning-or-tool-call-to-keep"),
    pytest.param({"after_fields": {"call": {"reasoning": False, "content": True, "tool_calls": True},
                                   "answer": {"reasoning": False, "content": True, "tool_calls": False}}},
                 "fields_preserved", "no", id="reasoning-lost-after-recovery"),
])
def test_answers_come_from_what_was_observed(over, question, answer):
    got = answer_questions(_seen(**over))[question]
    assert got.answer == answer, got


def test_drill_kill_by_argv_runs_the_command(servers, tmp_path):
    target, _ = servers
    marker = tmp_path / "killed"
    drill = _drill(kill=[{"argv": ["touch", str(marker)]}, *KILL])
    result = run_drill(target.url, drill)
    assert marker.exists()
    assert any("touch" in s and "exit 0" in s for s in result["steps"])


# --- pipeline artifacts -------------------------------------------------------------------------------------------

def _pipeline(tmp_path, *, truncate=False, no_meta=False, bad_order=False, rerun=True, stray=None):
    files = {"01_script.txt": b"scene 1\n", "02_voice.wav": b"RIFF" + b"\0" * 60}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    if truncate:
        (tmp_path / "02_voice.wav").write_bytes(b"RIFF")
    if stray:
        (tmp_path / stray).write_bytes(b"x")
    steps = [
        {"name": "script", "order": 1, "status": "done", "depends_on": [], "rerun": ["make", "script"],
         "outputs": [{"path": "01_script.txt", "bytes": 8, "sha256": hashlib.sha256(files["01_script.txt"]).hexdigest(),
                      "metadata": {"brief": "b1"}}]},
        {"name": "voice", "order": 2, "status": "done", "depends_on": ["script"], "rerun": ["make", "voice"],
         "outputs": [{"path": "02_voice.wav", "bytes": 64, "metadata": {} if no_meta else {"sample_rate": 48000}}]},
        {"name": "video", "order": 3, "status": "failed", "depends_on": ["voice"],
         "rerun": ["make", "video"] if rerun else None, "outputs": [{"path": "03_video.mp4.partial"}]},
    ]
    if bad_order:
        steps[0]["depends_on"] = ["video"]
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps({"pipeline": "campaign", "steps": steps}))
    return m


@pytest.mark.parametrize("kw, failing", [
    pytest.param({}, set(), id="recoverable-pipeline"),
    pytest.param({"truncate": True}, {"partial-files"}, id="truncated-output"),
    pytest.param({"no_meta": True}, {"metadata"}, id="missing-metadata"),
    pytest.param({"bad_order": True}, {"step-order"}, id="dependency-on-a-later-step"),
    pytest.param({"rerun": False}, {"rerun-failed-step-only"}, id="failed-step-not-rerunnable-alone"),
    pytest.param({"stray": "02_voice.wav.tmp"}, {"output-names"}, id="temporary-file-left"),
])
def test_pipeline_check(tmp_path, kw, failing):
    findings = check_pipeline(_pipeline(tmp_path, **kw))
    assert [f["check"] for f in findings] == ["partial-files", "metadata", "output-names", "step-order",
                                              "rerun-failed-step-only"]
    assert {f["check"] for f in findings if f["status"] == "fail"} == failing


def test_pipeline_manifest_that_is_not_one(tmp_path):
    p = tmp_path / "manifest.json"
    p.write_text('{"files": []}')
    with pytest.raises(BadInputError) as ei:
        check_pipeline(p)
    assert str(p) in ei.value.one_line()


@pytest.mark.slow
def test_a_no_op_drill_never_makes_incidents_recoverable(servers):
    """Through the stability analysis and its typed record: nothing shown is 'recovery not shown', never yes."""
    from k3lib.renewal.analysis import analyse_stability
    from k3lib.renewal.results import typed
    from k3lib.renewal.rules import RenewalRules

    target, api = servers
    result = run_drill(target.url, _drill(kill=NOOP, restore=NOOP, recovery_timeout_s=2), api_base_url=api.url)
    stability = typed("stability", analyse_stability([], RenewalRules(), result))
    assert stability.recoverable is None and stability.drill.went_down is False
    assert {"detected_automatically", "previous_version_restored", "fields_preserved"} <= set(stability.not_shown)
    assert any("neither the drill nor the incident log shows" in r for r in stability.not_recoverable_because)
