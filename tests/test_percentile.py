"""The kit's one percentile: numpy's linear method (Hyndman & Fan type 7), used by every module that reports one."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from k3lib.core.stats import percentile, percentile_rounded


@pytest.mark.parametrize("values, q, expected", [
    pytest.param([], 50, None, id="empty"),
    pytest.param([None, None], 50, None, id="only-blanks"),
    pytest.param([3.0], 99, 3.0, id="single"),
    pytest.param([1.0, 2.0, 3.0, 4.0], 50, 2.5, id="even-median-is-mean-of-middle-two"),
    pytest.param([4.0, None, 1.0, 3.0, 2.0], 100, 4.0, id="unsorted-max-blanks-dropped"),
    pytest.param(list(range(1, 101)), 99, 99.01, id="p99-of-100-is-not-the-max"),
    pytest.param([10, 20], 25, 12.5, id="interpolated"),
])
def test_percentile_values(values: list[float | None], q: float, expected: float | None) -> None:
    got = percentile(values, q)
    assert got == (None if expected is None else pytest.approx(expected))


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40), st.floats(0, 100))
def test_percentile_is_numpys_linear_method(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12, abs=1e-9)


def test_percentile_refuses_a_fraction_out_of_range() -> None:
    with pytest.raises(ValueError, match="outside 0–100"):
        percentile([1.0], 150)


def test_the_rounded_percentile_takes_q_on_the_same_scale() -> None:
    # the records' rounded figures: q from 0 to 100 like `percentile` (paths once passed 0.95, capacity 95)
    assert percentile_rounded([1.0, 2.0, 3.0, 4.0], 95) == round(percentile([1.0, 2.0, 3.0, 4.0], 95), 3) == 3.85
    assert percentile_rounded([0.12345, 0.12345], 50) == 0.123 and percentile_rounded([None], 50) is None
    with pytest.raises(ValueError, match="outside 0–100"):
        percentile_rounded([1.0], 95.0 * 100)


def test_no_module_defines_its_own_percentile() -> None:
    """Every percentile of measured values comes from k3lib.core.stats (issue 17: there were four definitions; issue
    38: `_pct` wrappers on two scales, q 0–1 and 0–100, now `percentile_rounded`, q 0–100 everywhere). The
    server-side histogram quantiles (Prometheus buckets) are not definitions."""
    root = pathlib.Path(__file__).resolve().parent.parent / "k3lib"
    own = []
    for path in root.rglob("*.py"):
        if path.name == "stats.py" and path.parent == root / "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            wraps = isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "pct" and any(
                isinstance(n, ast.Name) and n.id == "percentile" for n in ast.walk(node))  # a wrapper of its own
            if wraps or isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "percentile":
                own.append(f"{path.relative_to(root)}:{node.lineno} def {node.name}")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                    (node.value.id == "statistics" and node.attr == "quantiles")
                    or (node.value.id in ("np", "numpy") and node.attr in ("percentile", "quantile",
                                                                            "nanpercentile", "nanquantile"))):
                own.append(f"{path.relative_to(root)}:{node.lineno} {node.value.id}.{node.attr}")
    assert own == []
