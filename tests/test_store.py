"""Evidence store: atomic writes, a manifest that names every finished file, tampering detected."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time


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
