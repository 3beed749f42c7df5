"""Every /metrics artifact in ../shared/real-world/metrics reads to the values in labels.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3lib.io.metrics import inspect_metrics

REAL_WORLD = Path(__file__).resolve().parents[1].parent / "shared" / "real-world"
LABELS = json.loads((REAL_WORLD / "labels.json").read_text()) if (REAL_WORLD / "labels.json").exists() else {}
FILES = sorted(k for k in LABELS if k.startswith("metrics/"))


def test_real_world_metrics_are_present():
    assert FILES, f"no metrics labels under {REAL_WORLD}"


@pytest.mark.parametrize("key", [pytest.param(k, id=k) for k in FILES])
def test_inspect_metrics_matches_label(key):
    expected = LABELS[key]
    got = inspect_metrics((REAL_WORLD / key).read_text())
    assert set(got) == {"engine", "model_name", "engines", "values", "out_of_domain"}
    assert got["out_of_domain"] == []
    assert got["engine"] == expected["engine"]
    assert got["model_name"] == expected["model_name"]
    assert got["engines"] == expected["engines"]
    assert set(got["values"]) >= set(expected["values"])
    for name, value in expected["values"].items():
        if value is None:
            assert got["values"][name] is None, name
        else:
            assert got["values"][name] == pytest.approx(value, rel=1e-12), name


@pytest.mark.parametrize("key", [pytest.param(k, id=k) for k in FILES])
def test_inspect_metrics_survives_crlf_indent_and_prompt(key):
    # The same artifact as a user would paste it: CRLF, a shell prompt, Markdown fence and indentation.
    text = (REAL_WORLD / key).read_text()
    pasted = "$ curl -s http://10.0.0.7:8000/metrics\r\n```\r\n" + "".join(
        f"    {line}\r\n" for line in text.splitlines()) + "```\r\n"
    assert inspect_metrics(pasted) == inspect_metrics(text)
