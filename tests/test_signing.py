"""Signed sheet: sign a run's manifest, then verify hashes, the signed manifest hash and the SSH signature."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from conftest import ROOT, needs_tool

from k3lib.cli.sign import cmd_sign as sign_main
from k3lib.core.params import load_params
from k3lib.verdict.assemble import compute_decision
from k3lib.cli.sign import cmd_verify as verify_main
from k3lib.axes.probe import EndpointProbe, probe_record, probe_result
from k3lib.core.errors import BadInputError, EvidenceError
from k3lib.report.signing import SIGNATURE, SSH_SIG, sign_run, verify_run
from k3lib.core.store import RunStore

needs_ssh = needs_tool(shutil.which("ssh-keygen") is not None,
                       "ssh-keygen missing (Debian package openssh-client, installed by .ci/run)")
NOW = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc)


def make_run(tmp_path, name="run") -> RunStore:
    """A small run whose decision.json is the one its evidence gives (`k3 verify` decides it again)."""
    store = RunStore.create_at(tmp_path / name)
    params = load_params([ROOT / "parameters" / "emulator.yaml"])
    store.write_json("params.json", params.public_dict())
    # the probe's own record of four answers (k3 verify judges it again from the bodies kept beside it)
    at, base = "2026-12-01T09:00:00Z", "http://127.0.0.1:8000"
    cards = '{"data": [{"id": "kimi-k3", "root": "moonshotai/Kimi-K3", "max_model_len": 4096}]}'
    found = {"health": EndpointProbe("health", f"{base}/health", 200, 1.0, "", None, None, at),
             "version": EndpointProbe("version", f"{base}/version", 200, 1.0, '{"version": "0.33.0"}', None, None, at),
             "models": EndpointProbe("models", f"{base}/v1/models", 200, 1.0, cards, None, None, at),
             "metrics": EndpointProbe("metrics", f"{base}/metrics", 200, 1.0, "vllm:num_requests_running 0\n", None,
                                      None, at)}
    probe = probe_record(probe_result(found, None), SimpleNamespace(params=params, store=store))
    store.write_json("evidence/probe.json", probe.model_dump(mode="json"))
    store.write_json("decision.json", compute_decision(params, {"probe": probe}).model_dump())
    return store


def keypair(tmp_path, name: str):
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def allowed_signers(tmp_path, identity: str, key) -> str:
    pub = (key.with_suffix(".pub") if key.suffix else key.parent / (key.name + ".pub")).read_text().split()
    path = tmp_path / "allowed_signers"
    path.write_text(f"{identity} {pub[0]} {pub[1]}\n")
    return str(path)


def flip_one_byte(path, at=5):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_tampering_one_byte_of_one_evidence_file_fails_and_names_it(tmp_path, capsys):
    store = make_run(tmp_path)
    sign_run(store.root, "Alice Martin", now=NOW)
    flip_one_byte(store.path("evidence/probe/metrics.txt"))
    code = verify_main(argparse.Namespace(run=str(store.root), allowed_signers=None))
    out = capsys.readouterr().out
    assert code == 1
    changed = [line for line in out.splitlines() if line.startswith("CHANGED")]
    assert changed and all("evidence/probe/metrics.txt" in line for line in changed)
    assert "evidence/probe.json" not in "\n".join(changed)


def test_signature_json_is_beside_the_manifest_not_in_it(tmp_path):
    store = make_run(tmp_path)
    before = store.manifest_sha256()
    rec = sign_run(store.root, "Alice Martin", now=NOW)
    assert store.manifest_sha256() == before  # signing never rewrites the manifest it signs
    assert SIGNATURE not in store.manifest()["files"]
    saved = json.loads(store.path(SIGNATURE).read_text())
    assert saved == rec.model_dump()
    assert saved["manifest_sha256"] == before and saved["decision"] == "limited-observation"
    assert saved["signed_at"] == "2026-12-01T09:30:00Z" and saved["run_id"] == "run"
    assert verify_run(store.root).ok


@needs_ssh
def test_signed_run_verifies_with_allowed_signers(tmp_path, capsys):
    store = make_run(tmp_path)
    key = keypair(tmp_path, "reviewer")
    ns = argparse.Namespace(run=str(store.root), reviewer="Alice Martin", key=str(key),
                            identity="alice@example.org", force=False)
    assert sign_main(ns) == 0
    assert store.path(SSH_SIG).read_text().startswith("-----BEGIN SSH SIGNATURE-----")
    signers = allowed_signers(tmp_path, "alice@example.org", key)
    assert verify_main(argparse.Namespace(run=str(store.root), allowed_signers=signers)) == 0
    out = capsys.readouterr().out
    assert "allowed-signers" in out and "alice@example.org" in out
    # without an allowed-signers file the signature is checked, and the output says the signer is not proven
    result = verify_run(store.root)
    assert result.ok and result.signature_mode == "check-novalidate"
    assert any("NOT authenticated" in n for n in result.notes)


@needs_ssh
@pytest.mark.parametrize("change", [
    pytest.param("rewrite", id="manifest-bytes-edited"),
    pytest.param("store-write", id="later-write-through-the-store"),
])
def test_changing_the_manifest_after_signing_fails(tmp_path, change):
    store = make_run(tmp_path)
    key = keypair(tmp_path, "reviewer")
    sign_run(store.root, "alice", key=key, now=NOW)
    if change == "rewrite":
        manifest = json.loads(store.path("manifest.json").read_text())
        manifest["files"]["evidence/probe.json"]["bytes"] += 1
        store.path("manifest.json").write_text(json.dumps(manifest))
    else:
        store.write_json("evidence/agent.json", {"axis": "agent"})
    result = verify_run(store.root, allowed_signers=allowed_signers(tmp_path, "alice", key))
    assert not result.ok
    assert any(line.startswith("manifest.json: changed after signing") for line in result.changed)
    assert any(line.startswith(SSH_SIG) for line in result.changed)


@needs_ssh
@pytest.mark.parametrize("signer_key, identity", [
    pytest.param("other", "alice", id="another-key-for-the-identity"),
    pytest.param("reviewer", "mallory", id="identity-not-in-allowed-signers"),
])
def test_a_wrong_key_or_identity_fails(tmp_path, signer_key, identity):
    store = make_run(tmp_path)
    keys = {"reviewer": keypair(tmp_path, "reviewer"), "other": keypair(tmp_path, "other")}
    sign_run(store.root, identity, key=keys["reviewer"], now=NOW)
    signers = allowed_signers(tmp_path, "alice", keys[signer_key])
    result = verify_run(store.root, allowed_signers=signers)
    assert not result.ok and result.exit_code == 1
    assert any(line.startswith(f"{SSH_SIG}: does not verify (allowed-signers)") for line in result.changed)


def test_a_file_added_after_signing_is_named(tmp_path):
    store = make_run(tmp_path)
    sign_run(store.root, "alice", now=NOW)
    store.path("evidence/agent.json").write_text("{}")  # bypasses the store: the manifest does not list it
    result = verify_run(store.root)
    assert result.changed == ("evidence/agent.json: added after signing (not in the manifest)",)


def test_unsigned_run_checks_hashes_only_and_says_so(tmp_path):
    store = make_run(tmp_path)
    result = verify_run(store.root)
    assert result.ok and result.signature_mode == "not-signed"
    assert any("not signed" in n for n in result.notes)
    # asking for signer verification of an unsigned run is a failure, not a silent pass
    assert not verify_run(store.root, allowed_signers=tmp_path / "none").ok


def test_signed_without_key_cannot_satisfy_allowed_signers(tmp_path):
    store = make_run(tmp_path)
    sign_run(store.root, "alice", now=NOW)
    signers = tmp_path / "allowed"
    signers.write_text("alice ssh-ed25519 AAAA\n")
    result = verify_run(store.root, allowed_signers=signers)
    assert not result.ok and any(line.startswith(SSH_SIG + ": missing") for line in result.changed)


@pytest.mark.parametrize("setup, reviewer, error, match", [
    pytest.param("tamper", "alice", EvidenceError, "does not verify", id="run-does-not-verify"),
    pytest.param("no-decision", "alice", BadInputError, "decision.json", id="no-decision"),
    pytest.param("signed", "bob", BadInputError, "already signed by 'alice'", id="already-signed"),
    pytest.param(None, "   ", BadInputError, "reviewer name is required", id="empty-reviewer"),
    pytest.param("not-a-run", "alice", BadInputError, "not a k3kit run folder", id="not-a-run"),
])
def test_sign_refuses(tmp_path, setup, reviewer, error, match):
    store = make_run(tmp_path)
    root = store.root
    if setup == "tamper":
        flip_one_byte(store.path("evidence/probe.json"))
    elif setup == "no-decision":
        store = RunStore.create_at(tmp_path / "bare")
        root = store.root
    elif setup == "signed":
        sign_run(root, "alice", now=NOW)
    elif setup == "not-a-run":
        root = tmp_path
    with pytest.raises(error, match=match):
        sign_run(root, reviewer, now=NOW)


@needs_ssh
def test_force_resign_without_key_drops_the_stale_ssh_signature(tmp_path):
    store = make_run(tmp_path)
    sign_run(store.root, "alice", key=keypair(tmp_path, "k"), now=NOW)
    sign_run(store.root, "bob", now=NOW, force=True)
    assert not store.path(SSH_SIG).exists()
    assert verify_run(store.root).signature_mode == "unsigned-key"


@needs_ssh
def test_a_reviewer_name_with_spaces_signs_and_verifies(tmp_path):
    """The README's `k3 sign RUN --reviewer "Camille Durand" --key ...`: the name is the identity, written in
    double quotes in the allowed-signers file (OpenSSH reads a quoted principal)."""
    store = make_run(tmp_path)
    key = keypair(tmp_path, "k")
    record = sign_run(store.root, "Camille  Durand", key=key, now=NOW)
    assert record.reviewer == record.identity == "Camille Durand"
    assert verify_run(store.root, allowed_signers=allowed_signers(tmp_path, '"Camille Durand"', key)).ok
    assert not verify_run(store.root, allowed_signers=allowed_signers(tmp_path, '"Camille Dupont"', key)).ok


def test_an_identity_an_allowed_signers_file_cannot_hold_is_bad_input(tmp_path):
    store = make_run(tmp_path)
    for identity in ('Alice "A" Martin', "Martin, Alice"):
        with pytest.raises(BadInputError, match="--identity"):
            sign_run(store.root, "Alice Martin", key=tmp_path / "k", identity=identity)


def test_missing_key_is_bad_input(tmp_path):
    store = make_run(tmp_path)
    with pytest.raises(BadInputError, match="SSH key not found"):
        sign_run(store.root, "alice", key=tmp_path / "nope")
    assert not store.path(SIGNATURE).exists()


def test_verify_main_output_starts_with_the_verdict(tmp_path, capsys):
    store = make_run(tmp_path)
    assert verify_main(argparse.Namespace(run=str(store.root), allowed_signers=None)) == 0
    assert capsys.readouterr().out.startswith("OK 7 files match ")  # same first words as the unsigned `k3 verify`
    flip_one_byte(store.path("params.json"))
    assert verify_main(argparse.Namespace(run=str(store.root), allowed_signers=None)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAILED 1 problem(s)") and out[1].startswith("CHANGED params.json")
