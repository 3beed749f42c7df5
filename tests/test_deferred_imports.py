"""k3lib defers rfc3987_syntax (seconds of parser building at import) to its first use, without changing a check,
where it says so (a notebook's display set-up, the batch runner): `import k3lib` itself changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHECKS = """
import json, sys
import jsonschema
fc = jsonschema.FormatChecker()
values = ["http://example.com/\\u00e9t\\u00e9", "http://exa mple.com", "//host/path?q=1#f", "a b", "", "\\u00e9:x"]
before = "rfc3987_syntax.syntax_helpers" in sys.modules
answers = {fmt: [fc.conforms(v, fmt) for v in values] for fmt in ("iri", "iri-reference")}
print(json.dumps({"loaded_before_use": before, "answers": answers,
                  "loaded_after_use": "rfc3987_syntax.syntax_helpers" in sys.modules}))
"""


def run(prelude: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", prelude + CHECKS], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_rfc3987_syntax_is_imported_on_first_use_with_the_same_answers():
    # installed with jupyterlab (jupyter-events needs jsonschema[format-nongpl]): a skip here would hide a
    # broken deferral in CI, so a missing module fails instead
    import rfc3987_syntax  # noqa: F401

    plain = run("")
    # what a notebook kernel does: its session opener sets up the display, then plotly imports nbformat
    deferred = run("from k3lib.core.plotting import use_offline_renderer\nuse_offline_renderer()\nimport nbformat\n")
    assert plain["loaded_before_use"] is True
    assert deferred["loaded_before_use"] is False  # nbformat and jsonschema no longer build the parser
    assert deferred["loaded_after_use"] is True
    assert deferred["answers"] == plain["answers"]
    assert True in plain["answers"]["iri"] and False in plain["answers"]["iri"]  # the checks do decide
    first = run("import rfc3987_syntax\nfrom k3lib.core._deferred import defer_rfc3987_syntax\n"
                "defer_rfc3987_syntax()\nimport nbformat\n")  # imported before: the real module stays
    assert first["loaded_before_use"] is True and first["answers"] == plain["answers"]


def test_import_k3lib_installs_no_stand_in_module():
    """An import has no side effect: after `import k3lib` (and the modules a CLI run loads) sys.modules holds
    only real modules, and jsonschema, imported next, gets the real rfc3987_syntax."""
    code = ("import sys, k3lib, k3lib.cli.main, k3lib.batch.execute, k3lib.opening.axis\n"
            "stand_ins = sorted(n for n, m in list(sys.modules.items()) if getattr(m, '__k3_stand_in__', False))\n"
            "assert 'rfc3987_syntax' not in sys.modules, 'imported (or stood in for) at import'\n"
            "import jsonschema\n"
            "assert not getattr(sys.modules['rfc3987_syntax'], '__k3_stand_in__', False)\n"
            "print(stand_ins)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
