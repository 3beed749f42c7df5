"""How much the test suite asserts, counted the same way before and after a change to it (issue 38).

    python scripts/suite_count.py [TESTS_DIR]

prints three figures: the test items pytest collects, the `assert` statements in the test code (helpers included),
and the `pytest.raises` / `pytest.fail` calls (an expected exception is an assertion too). A shorter suite must
keep the last two at least where they were: a merged duplicate is not a lost assertion only if what it asserted
moved into the test it merged into.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def static_counts(tests: Path) -> tuple[int, int]:
    """(`assert` statements, `pytest.raises`/`pytest.fail` calls) in every .py file under `tests`."""
    asserts = raises = 0
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Assert):
                asserts += 1
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("raises", "fail") and isinstance(node.func.value, ast.Name)
                  and node.func.value.id == "pytest"):
                raises += 1
    return asserts, raises


def collected(tests: Path) -> int:
    """The test items `pytest --collect-only` finds (parametrized cases counted one by one)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(tests)], cwd=ROOT, capture_output=True, text=True, check=False)
    for line in reversed(done.stdout.splitlines()):
        if " collected" in line or line.endswith("tests collected") or "test collected" in line:
            return int(line.split()[0])
    raise SystemExit(f"pytest collected nothing:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def main() -> None:
    tests = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests"
    asserts, raises = static_counts(tests)
    print(f"items {collected(tests)}  asserts {asserts}  raises/fail {raises}  assertions {asserts + raises}")


if __name__ == "__main__":
    main()
