"""Report files are written like any other file of the process: the umask decides who may read them."""

from __future__ import annotations

import os

import pytest

from k3lib.core.store import RunStore


@pytest.mark.parametrize("umask, mode", [pytest.param(0o022, 0o644, id="default"),
                                         pytest.param(0o027, 0o640, id="group-only"),
                                         pytest.param(0o077, 0o600, id="private")])
def test_files_take_the_process_umask(tmp_path, umask, mode):
    """A report folder served by a web server or shared with a group is readable as the umask says."""
    old = os.umask(umask)
    try:
        store = RunStore.create(tmp_path)
        store.write_text("report/index.html", "<html></html>")
    finally:
        os.umask(old)
    for rel in ("report/index.html", "manifest.json"):
        assert (store.root / rel).stat().st_mode & 0o777 == mode, rel
    assert store.verify() == []
