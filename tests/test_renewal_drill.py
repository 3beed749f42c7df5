"""The live incident drill against the emulator answers the five questions; the pipeline artifact check."""

from __future__ import annotations

import hashlib
import json

import pytest

from k3lib.errors import BadInputError
from k3lib.renewal.artifacts import check_pipeline
from k3lib.renewal.drill import QUESTIONS, run_drill
from k3lib.renewal.params import DrillParams

emulator = pytest.importorskip("k3lib.emulator", reason="the embedded emulator is not importable yet")

KILL = [{"http": {"path": "/_emulator/faults", "json": {"faults": ["crash=1"]}}},
        {"http": {"path": "/v1/chat/completions", "json": {"messages": [{"role": "user", "content": "hi"}],
                                                           "max_tokens": 4}}}]
RESTORE = [{"http": {"path": "/_emulator/restart", "json": {"profile": "demo", "faults": []}}}]


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
    return DrillParams.model_validate({"kill": KILL, "restore": RESTORE, "recovery_timeout_s": 10,
                                       "request_timeout_s": 10, **kw})


def test_drill_answers_all_five_questions(servers):
    target, api = servers
    result = run_drill(target.url, _drill(), api_base_url=api.url)
    answers = {k: v["answer"] for k, v in result["answers"].items()}
    assert answers == dict.fromkeys(QUESTIONS, "yes"), result["steps"]
    assert "error event" in result["answers"]["in_flight_resumed_or_cancelled"]["evidence"]
    assert result["summary"].startswith("5/5")
    json.dumps(result)  # evidence-ready


@pytest.mark.parametrize("drill, api, expected", [
    pytest.param({"restore": [], "recovery_timeout_s": 2}, True, {"previous_version_restored": "unknown"},
                 id="no-restore-command"),
    pytest.param({"restore": [{"http": {"path": "/_emulator/restart",
                                        "json": {"profile": "demo", "faults": [], "vllm_version": "0.10.0"}}}]},
                 True, {"previous_version_restored": "no"}, id="restored-a-different-version"),
    pytest.param({}, False, {"api_failover_without_contract_change": "unknown"}, id="no-api-configured"),
    pytest.param({"kill": [], "restore": [], "recovery_timeout_s": 1}, True,
                 {"detected_automatically": "no", "in_flight_resumed_or_cancelled": "unknown"}, id="kill-did-nothing"),
])
def test_drill_answers_no_or_unknown_when_the_evidence_says_so(servers, drill, api, expected):
    target, api_server = servers
    result = run_drill(target.url, _drill(**drill), api_base_url=api_server.url if api else None)
    for q, a in expected.items():
        assert result["answers"][q]["answer"] == a, (q, result["answers"][q], result["steps"])


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
