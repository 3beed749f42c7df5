"""The batch starts each stage's kernels while the stage before runs: same notebook results, nothing left behind."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from k3lib.batch import execute as runner  # the batch layer both batches run their notebooks on
from k3lib.core.store import RunStore

PROBE = ("import os, sys, json\n"
         "print(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(), 'names': sorted(k for k in dir() if k[:1] != '_'),"
         " 'k3m': '_k3_m' in dir(), 'preloaded': 'plotly.io' in sys.modules}))")


def notebook(source: str) -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": "params", "metadata": {"tags": ["parameters"]},
                       "outputs": [], "source": 'params_file = ""\noverrides = []\nrun_dir = ""\ninteractive = True'},
                      {"cell_type": "code", "execution_count": None, "id": "probe", "metadata": {}, "outputs": [],
                       "source": source}],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def probe_output(store: RunStore, name: str) -> tuple[dict, int]:
    nb = json.loads(store.path(f"notebooks/{name}").read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == "probe")
    return json.loads("".join(cell["outputs"][0]["text"])), cell["execution_count"]


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a child of this process: reap it if it has exited
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


@pytest.fixture()
def folders(tmp_path, monkeypatch):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    for name in ("a.ipynb", "b.ipynb", "c.ipynb"):
        (nbs / name).write_text(json.dumps(notebook(PROBE)))
    (nbs / "fails.ipynb").write_text(json.dumps(notebook("raise ValueError('on purpose')")))
    monkeypatch.setattr(runner, "NOTEBOOKS", nbs)
    import tempfile

    # the kernels' socket folders, to see that none is left; short, as an IPC socket path holds at most 107
    # characters (pytest's tmp_path under xdist is longer)
    sockets = Path(tempfile.mkdtemp(prefix="k3s-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(sockets))

    monkeypatch.setattr(tempfile, "tempdir", None)
    store = RunStore.create_at(tmp_path / "run")
    store.write_json("params.json", {})
    yield nbs, sockets, store
    monkeypatch.setattr(tempfile, "tempdir", None)
    shutil.rmtree(sockets, ignore_errors=True)


def test_later_stages_run_in_kernels_started_ahead_with_the_same_results(folders):
    nbs, sockets, store = folders
    stages = [[("a.ipynb", None)], [("fails.ipynb", "broken"), ("b.ipynb", None)], [("c.ipynb", None)]]
    outcomes = runner.run_notebooks(store, stages, timeout_s=60, progress=runner.Progress(4, io.StringIO()))
    assert {n: o.status for n, o in outcomes.items()} == {"a.ipynb": "ok", "fails.ipynb": "failed", "b.ipynb": "ok",
                                                          "c.ipynb": "ok"}
    assert "ValueError: on purpose" in (outcomes["fails.ipynb"].error or "")
    assert json.loads(store.path("evidence/broken.json").read_text())["status"] == "fail"
    first, first_count = probe_output(store, "a.ipynb")
    assert first["preloaded"] is False  # the first stage's kernel is papermill's own
    for name in ("b.ipynb", "c.ipynb"):
        seen, count = probe_output(store, name)
        assert seen["preloaded"] is True  # started ahead, its imports done
        # what the notebook sees is what papermill's own kernel shows it: folder, names, execution counts
        assert (seen["cwd"], seen["names"], seen["k3m"], count) == (first["cwd"], first["names"], False, first_count)
        assert seen["cwd"] == str(nbs)
    for name in ("a.ipynb", "b.ipynb", "c.ipynb"):
        assert gone(probe_output(store, name)[0]["pid"]), f"the kernel of {name} is still running"
    assert list(sockets.iterdir()) == []


def test_prepare_runs_while_the_first_stage_kernels_start_ahead(folders):
    """`prepare` (the review computes its axes there) runs before any notebook, the first stage's kernel meanwhile
    started ahead; nothing is left running."""
    nbs, sockets, store = folders
    ran: list[bool] = []
    outcomes = runner.run_notebooks(store, [[("a.ipynb", None)]], timeout_s=60,
                                    progress=runner.Progress(1, io.StringIO()),
                                    prepare=lambda: ran.append(store.path("notebooks/a.ipynb").exists()))
    assert ran == [False] and outcomes["a.ipynb"].status == "ok"
    seen, _ = probe_output(store, "a.ipynb")
    assert seen["preloaded"] is True and seen["cwd"] == str(nbs)
    assert gone(seen["pid"])
    assert list(sockets.iterdir()) == []


def test_kernels_no_notebook_takes_are_stopped(folders):
    """A resumed batch whose later stage is already finished: the kernels started for it are stopped."""
    nbs, sockets, store = folders
    stages = [[("a.ipynb", None)], [("b.ipynb", "done")]]
    runner.run_notebooks(store, stages[1:], timeout_s=60, progress=runner.Progress(1, io.StringIO()))
    store.write_json("evidence/done.json", {"axis": "done"})
    before = {p.pid for p in _kernels()}
    outcomes = runner.run_notebooks(store, stages, timeout_s=60, progress=runner.Progress(2, io.StringIO()),
                                    resume=True)
    assert outcomes["b.ipynb"].status == "kept" and outcomes["a.ipynb"].status == "ok"
    deadline = time.monotonic() + 10
    while {p.pid for p in _kernels()} - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not {p.pid for p in _kernels()} - before
    assert list(sockets.iterdir()) == []


def _kernels() -> list:
    import psutil  # installed with ipykernel (ipython needs it): never skip the kernel-leak checks

    return [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]


def test_a_kernel_that_failed_to_start_ahead_leaves_its_reason_in_the_log(caplog):
    """The notebook still runs (papermill starts a kernel itself), but why the warm one failed is not dropped."""
    from concurrent.futures import Future

    failed: Future = Future()
    failed.set_exception(RuntimeError("Kernel didn't respond in 60 seconds"))
    with caplog.at_level("WARNING", logger="k3lib"):
        assert runner._taken(failed, "03_capacity.ipynb") is None
    (record,) = [r for r in caplog.records if r.name == "k3lib.batch.execute"]
    assert record.levelname == "WARNING"
    assert "03_capacity.ipynb" in record.getMessage() and "didn't respond in 60 seconds" in record.getMessage()
