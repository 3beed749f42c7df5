"""Issue 43, a demo is not production: a run against the kit's emulator records what its target is (decision.json's
`target_kind`: embedded-emulator, external-emulator or engine), says `production (demo)`, and `k3 sign` refuses it
(one line, exit 2) unless `--demo` signs it as one; `k3 verify` still verifies it."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from conftest import ROOT

from k3lib.axes.probe import EndpointProbe, probe_record, probe_result
from k3lib.cli.main import main
from k3lib.core.params import load_params
from k3lib.core.errors import EvidenceError
from k3lib.core.store import RunStore
from k3lib.report.signing import sign_run
from k3lib.verdict.assemble import compute_decision


def _probe(tmp_path, version_body: str, request: dict | None = None):
    """The probe's record of four answers, from a target at a URL the kit did not start."""
    params = load_params([ROOT / "parameters" / "emulator.yaml"], ["target.base_url=http://127.0.0.1:8000"])
    store = RunStore.create_at(tmp_path / "run")
    if request is not None:
        store.write_json("request.json", request)
    at, base = "2026-12-01T09:00:00Z", "http://127.0.0.1:8000"
    cards = '{"data": [{"id": "kimi-k3", "root": "moonshotai/Kimi-K3", "max_model_len": 4096}]}'
    found = {"health": EndpointProbe("health", f"{base}/health", 200, 1.0, "", None, None, at),
             "version": EndpointProbe("version", f"{base}/version", 200, 1.0, version_body, None, None, at),
             "models": EndpointProbe("models", f"{base}/v1/models", 200, 1.0, cards, None, None, at),
             "metrics": EndpointProbe("metrics", f"{base}/metrics", 200, 1.0, "vllm:num_requests_running 0\n", None,
                                      None, at)}
    return params, probe_record(probe_result(found, None), SimpleNamespace(params=params, store=store))


@pytest.mark.parametrize("body, request_json, kind", [
    pytest.param('{"version": "0.33.0", "emulator": "k3kit-emulator"}', None, "external-emulator",
                 id="an emulator the kit did not start, declaring itself"),
    pytest.param('{"version": "0.33.0"}', {"target": {"base_url": None}}, "embedded-emulator",
                 id="the emulator the batch started"),
    pytest.param('{"version": "0.33.0"}', None, "engine", id="an engine"),
])
def test_attack_a_demo_decides_production_as_a_demo(tmp_path, body, request_json, kind):
    """Before the fix the emulator's healthy run was `production`, nothing saying it was a demo."""
    params, probe = _probe(tmp_path, body, request_json)
    assert probe.data["target_kind"] == kind
    d = compute_decision(params, {"probe": probe})
    assert d.target_kind == kind and d.model_dump()["target_kind"] == kind
    if kind == "engine":
        assert d.line == d.decision and not any(r.startswith("demo:") for r in d.reasons)
    else:
        assert d.line == f"{d.decision} (demo)" and any(r.startswith("demo: the target is the kit's emulator")
                                                        for r in d.reasons)


def test_attack_k3_sign_refuses_the_demo_and_verify_still_verifies(healthy_run, tmp_path, capsys):
    code, original = healthy_run
    assert code == 0  # the healthy demo still ends in production, exit 0
    shutil.copytree(original.root, tmp_path / "run")
    store = RunStore(tmp_path / "run")
    decision = json.loads(store.path("decision.json").read_text())
    assert decision["decision"] == "production" and decision["target_kind"] == "embedded-emulator"
    capsys.readouterr()
    assert main(["sign", str(store.root), "--reviewer", "Alice Martin"]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "is a demo" in err and "Traceback" not in out + err
    assert not store.path("signature.json").exists()
    assert main(["verify", str(store.root)]) == 0
    assert main(["sign", str(store.root), "--reviewer", "Alice Martin", "--demo"]) == 0
    assert "(demo)" in capsys.readouterr().out
    assert json.loads(store.path("signature.json").read_text())["demo"] is True
    assert main(["verify", str(store.root)]) == 0


def test_the_index_says_demo(healthy_run):
    _, store = healthy_run
    index = store.path("report/index.html").read_text(encoding="utf-8")
    assert "(demo)" in index and "k3 sign</code> refuses it" in index


def test_attack_a_demo_relabelled_engine_to_be_signed(healthy_run, tmp_path):
    """The probe's record edited to say `engine` and the decision recomputed through the kit's own store: the
    hashes hold, but the kept /version body and request.json give the emulator back — verify and sign name it."""
    from k3lib.core.errors import EvidenceError
    from k3lib.core.evidence import read_records
    from k3lib.core.params import load_params_json
    from k3lib.report.signing import sign_run, verify_run

    _, original = healthy_run
    shutil.copytree(original.root, tmp_path / "run")
    store = RunStore.open(tmp_path / "run")
    probe = store.read_json("evidence/probe.json")
    probe["data"]["target_kind"] = "engine"
    store.write_json("evidence/probe.json", probe)
    params = load_params_json(store.path("params.json"))
    store.write_json("decision.json", compute_decision(params, read_records(store)).model_dump())
    assert store.verify() == [] and store.read_json("decision.json")["target_kind"] == "engine"
    result = verify_run(store.root)
    assert not result.ok
    assert "evidence/probe.json: target_kind is engine but its raw data gives embedded-emulator" in result.changed
    with pytest.raises(EvidenceError, match="target_kind is engine"):
        sign_run(store.root, "Alice Martin")


def test_attack_a_renewal_demo_is_not_signed_as_a_review(renewal_run, tmp_path, capsys):
    """The renewal side: a review with `demo:` set drills the kit's emulator whatever inputs it names, so its
    decision is a demonstration (decision.json `target_kind`), refused by `k3 sign` without --demo; a decision.json
    stripped of that mark is named by `k3 verify` (the review decided again from params.json marks it)."""
    dest = tmp_path / renewal_run.root.name
    shutil.copytree(renewal_run.root, dest)
    store = RunStore.open(dest)
    stored = store.read_json("decision.json")
    assert stored["target_kind"] == "embedded-emulator"
    assert main(["sign", str(dest), "--reviewer", "Alice Martin"]) == 2
    assert "is a demo" in capsys.readouterr().err
    assert not (dest / "signature.json").exists()
    assert main(["sign", str(dest), "--reviewer", "Alice Martin", "--demo"]) == 0
    assert json.loads((dest / "signature.json").read_text())["demo"] is True
    stripped = tmp_path / "stripped"
    shutil.copytree(renewal_run.root, stripped)
    RunStore.open(stripped).write_json("decision.json", {k: v for k, v in stored.items() if k != "target_kind"})
    capsys.readouterr()
    assert main(["verify", str(stripped)]) == 1
    assert "decision.json: target_kind" in capsys.readouterr().out
    with pytest.raises(EvidenceError, match="does not give"):
        sign_run(stripped, "Alice Martin")
