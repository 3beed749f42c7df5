"""Evidence store: atomic writes, a manifest that names every finished file, tampering detected."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest


from k3lib.cli.main import main
from k3lib.core.store import RunStore, sha256_file


def test_run_folder_layout_and_manifest(tmp_path):
    store = RunStore.create(tmp_path, label="lab/el")
    assert store.root.parent == tmp_path.resolve()
    assert store.run_id.endswith("-lab-el")
    for sub in ("evidence", "notebooks", "report"):
        assert (store.root / sub).is_dir()
    store.write_json("evidence/probe.json", {"axis": "probe"})
    store.write_text("report/index.html", "<html></html>")
    files = store.manifest()["files"]
    assert set(files) == {"evidence/probe.json", "report/index.html"}
    assert files["evidence/probe.json"]["sha256"] == sha256_file(store.root / "evidence/probe.json")
    assert store.verify() == []


def test_verify_names_the_tampered_file(tmp_path, capsys):
    store = RunStore.create(tmp_path)
    store.write_json("evidence/a.json", {"x": 1})
    store.write_json("evidence/b.json", {"x": 2})
    path = store.root / "evidence/b.json"
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01  # one byte
    path.write_bytes(bytes(data))
    assert main(["verify", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert "evidence/b.json" in out and "evidence/a.json" not in out
    (store.root / "evidence/a.json").unlink()
    assert any(p.startswith("evidence/a.json: missing") for p in store.verify())


def test_verify_ok(tmp_path, capsys):
    store = RunStore.create(tmp_path)
    store.write_text("evidence/probe/metrics.txt", "vllm:num_requests_running 0\n")
    assert main(["verify", str(store.root)]) == 0
    assert capsys.readouterr().out.startswith("OK 1 files")


def test_verify_fails_a_decision_nothing_in_the_run_decides(tmp_path, capsys):
    """A decision.json written with no params.json and no evidence: its hashes hold, but nothing gives it."""
    store = RunStore.create(tmp_path)
    store.write_json("decision.json", {"decision": "production"})
    assert main(["verify", str(store.root)]) == 1
    assert "CHANGED decision.json: cannot be decided again" in capsys.readouterr().out


def test_verify_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert "not a k3kit run folder" in capsys.readouterr().err


def _writer(root: str, n: int, tag: str) -> None:
    store = RunStore(root)
    for i in range(n):
        store.write_json(f"evidence/{tag}-{i}.json", {"i": i})


def test_concurrent_writers_keep_every_entry(tmp_path):
    """Two notebook kernels writing to one run at once: the manifest loses nothing (file lock)."""
    store = RunStore.create(tmp_path)
    procs = [multiprocessing.Process(target=_writer, args=(str(store.root), 25, t)) for t in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    files = store.manifest()["files"]
    assert len(files) == 50
    assert store.verify() == []


KILLED_WRITER = r"""
import sys, time
from k3lib.core.store import RunStore
store = RunStore(sys.argv[1])
i = 0
while True:
    store.write_bytes(f"evidence/blob-{i}.bin", bytes([i % 256]) * 200_000)
    i += 1
"""


def test_sigkill_mid_write_leaves_finished_files_verifiable(tmp_path):
    store = RunStore.create(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(store.root)])
    deadline = time.monotonic() + 20
    while len(store.manifest()["files"]) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    manifest = json.loads((store.root / "manifest.json").read_text())  # still valid JSON: replaced atomically
    assert len(manifest["files"]) >= 5
    assert store.verify() == []
    # no half-written file under a final name: any leftover is a dot-temp file
    for path in (store.root / "evidence").iterdir():
        assert path.name.startswith(".") or f"evidence/{path.name}" in manifest["files"] or \
            path.stat().st_size == 200_000


def test_a_notebook_papermill_wrote_is_moved_in_durably_and_hashed(tmp_path, monkeypatch):
    """The executed notebook is evidence: the partial file is fsynced before it replaces the final name, the
    folder after, and its hash goes into the manifest, as for the kit's own writes."""
    store = RunStore.create_at(tmp_path / "run")
    partial = store.path("notebooks/.03_capacity.partial.ipynb")
    partial.write_text('{"cells": []}')
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store.move_in(partial, "notebooks/03_capacity.ipynb")
    assert not partial.exists() and store.path("notebooks/03_capacity.ipynb").read_text() == '{"cells": []}'
    assert synced[:2] == [str(partial), str(store.path("notebooks"))]
    assert "notebooks/03_capacity.ipynb" in store.manifest()["files"] and store.verify() == []


def test_a_jsonl_stream_has_one_rule_a_torn_last_line_is_skipped_a_bad_middle_line_refused(tmp_path, caplog):
    """What a kill can leave (a last line without its newline) is skipped and logged; a bad line anywhere else was
    put there after the kit wrote it, and every reader of a stream refuses it rather than judge part of it."""
    from k3lib.axes.agent import STEPS_FILE, load_agent_result
    from k3lib.core.errors import EvidenceError

    store = RunStore.create_at(tmp_path / "run")
    for i in range(3):
        store.append_jsonl(STEPS_FILE, {"i": i})
    path = store.path(STEPS_FILE)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"i": 3, "cut')
    with caplog.at_level("WARNING", logger="k3lib.core.store"):
        assert [r["i"] for r in store.read_jsonl(STEPS_FILE)] == [0, 1, 2]
    assert any("last line" in r.getMessage() for r in caplog.records)
    assert [r["i"] for r in load_agent_result(store).steps] == [0, 1, 2]  # the agent axis reads by the same rule
    path.write_bytes(whole + b'{"i": 3}')  # whole but for its newline: kept
    assert [r["i"] for r in store.read_jsonl(STEPS_FILE)] == [0, 1, 2, 3]
    for bad in (b"{not json}\n", b"[1, 2]\n"):
        lines = whole.splitlines(keepends=True)
        path.write_bytes(lines[0] + bad + b"".join(lines[1:]))
        with pytest.raises(EvidenceError, match="line 2"):
            store.read_jsonl(STEPS_FILE)
        with pytest.raises(EvidenceError, match="line 2"):
            load_agent_result(store)
    assert store.read_jsonl("evidence/none.jsonl") == []


def test_appending_after_a_dead_writer_cuts_its_torn_line_so_it_never_sits_mid_stream(tmp_path):
    rel = "evidence/capacity/requests.jsonl"
    store = RunStore.create_at(tmp_path / "run")
    path = store.path(rel)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"i": 0}\n{"i": 1, "cu')  # a writer killed mid-line, then the axis runs again
    store.append_jsonl(rel, {"i": 2})
    assert path.read_bytes() == b'{"i": 0}\n{"i": 2}\n'
    other = RunStore.create_at(tmp_path / "other")
    other.path("evidence").mkdir(exist_ok=True)
    other.path("evidence/s.jsonl").write_bytes(b'{"i": 0}')  # whole but for its newline: kept
    other.append_jsonl("evidence/s.jsonl", {"i": 1})
    assert [r["i"] for r in other.read_jsonl("evidence/s.jsonl")] == [0, 1]


def test_a_rewrite_cut_between_its_steps_still_verifies_and_is_refused_for_signing(tmp_path, monkeypatch):
    """A file the manifest lists is rewritten in three durable steps (pending, replace, settle): a kill after the
    replace and before the manifest settles leaves content the manifest names as pending, which verifies; a file
    changed by anyone else still does not; and a run holding such a cut rewrite is not signed."""
    import k3lib.core.store as store_module
    from k3lib.core.errors import EvidenceError
    from k3lib.report.signing import sign_run

    store = RunStore.create(tmp_path, label="cut")
    store.write_json("evidence/capacity/metrics.json", {"samples": 1})
    real = store_module.RunStore._update_manifest

    def killed_before_settling(self, entries, drop=(), pending=None):
        if entries and not pending:
            raise KeyboardInterrupt("killed")
        return real(self, entries, drop, pending)

    monkeypatch.setattr(store_module.RunStore, "_update_manifest", killed_before_settling)
    with pytest.raises(KeyboardInterrupt):
        store.write_json("evidence/capacity/metrics.json", {"samples": 2})
    monkeypatch.undo()
    assert store.read_json("evidence/capacity/metrics.json") == {"samples": 2}
    assert store.verify() == []
    store.path("evidence/capacity/metrics.json").write_text('{"samples": 3}')
    assert store.verify() == ["evidence/capacity/metrics.json: changed (sha256 differs from the manifest)"]
    store.write_json("evidence/capacity/metrics.json", {"samples": 4})
    assert store.verify() == [] and "pending" not in store.manifest()["files"]["evidence/capacity/metrics.json"]
    with monkeypatch.context() as m:
        m.setattr(store_module.RunStore, "_update_manifest", killed_before_settling)
        with pytest.raises(KeyboardInterrupt):
            store.write_json("evidence/capacity/metrics.json", {"samples": 5})
    with pytest.raises(EvidenceError, match="a rewrite cut by a kill"):
        sign_run(store.root, "Camille Durand", key=tmp_path / "no-key")
