"""Short, shallow functions in k3lib: no function longer than 80 lines, none nested deeper than four levels.

Measured from the source with `ast`, the same for every function, method and nested function:

- **length** is `end_lineno - lineno + 1` of the `def` node: from the `def` line (decorators left out) to the
  function's last line, docstring, comments and blank lines inside it included. A nested function counts in its
  own length and in the length of the function around it.
- **nesting** is the depth of compound statements inside a function: `if`, `for`, `while`, `with`, `try` (and
  `try*`), `match` and their `async` forms each add one level to the statements they hold; an `elif` is an `if`
  in the `orelse` of the first and counts at the same level (it reads as a sibling branch); `else`, `except`,
  `finally` and `case` blocks are at the level of their statement. A statement directly in the function body is
  at depth 0, so `for: if: with: try: x` puts `x` at depth 4. A nested `def`, `lambda` or class starts its own
  count (it is measured as a function of its own).
- Comprehensions and conditional expressions are expressions, not statements: they do not nest.

The limits are guides, not walls (issue 48): a function that reads best whole may pass them when it says why, in a
comment `# shape: <why>` on its `def` line or the line above it (or above its decorators). The reason is shown in the
guide's report and must say something (three words at least); twice the guide is a wall all the same.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

K3LIB = Path(__file__).resolve().parents[1] / "k3lib"
MAX_LINES = 80
MAX_DEPTH = 4
WALL = 2  # a stated reason carries a function up to twice the guide, never past it
_REASON = re.compile(r"#\s*shape:\s*(?P<why>.*\S)")

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
if hasattr(ast, "TryStar"):  # Python 3.11+
    _COMPOUND = (*_COMPOUND, ast.TryStar)


def _blocks(node: ast.stmt) -> list[tuple[list[ast.stmt], bool]]:
    """The statement lists a compound statement holds, each with whether it is one level deeper.

    An `elif` (an `If` alone in an `If`'s `orelse`) stays at the level of the first `if`.
    """
    if isinstance(node, ast.If):
        elif_ = len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
        return [(node.body, True), (node.orelse, not elif_)]
    if isinstance(node, ast.Match):
        return [(case.body, True) for case in node.cases]
    blocks: list[tuple[list[ast.stmt], bool]] = [(node.body, True)]  # type: ignore[attr-defined]
    blocks += [(handler.body, True) for handler in getattr(node, "handlers", ())]
    blocks += [(getattr(node, name, []), True) for name in ("orelse", "finalbody")]
    return blocks


def nesting(function: ast.AST) -> int:
    """The deepest compound-statement level reached inside `function` (its own nested functions left out)."""

    def walk(statements: list[ast.stmt], depth: int) -> int:
        deepest = depth if statements else 0
        for node in statements:
            if isinstance(node, _COMPOUND):
                for body, deeper in _blocks(node):
                    deepest = max(deepest, walk(body, depth + 1 if deeper else depth))
        return deepest

    # The body's own statements sit at depth 0; a compound statement's blocks at 1, and so on.
    return walk(function.body, 0)  # type: ignore[attr-defined]


def stated_reason(lines: list[str], function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The `# shape: <why>` a function states on its `def` line or the line above it (or above its decorators)."""
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    for number in (function.lineno, function.lineno - 1, first - 1):
        if 1 <= number <= len(lines) and (m := _REASON.search(lines[number - 1])):
            return m["why"]
    return ""


def shapes(source: str, where: str) -> list[tuple[str, int, int, str]]:
    """(`where:qualified name`, length in lines, nesting, the reason it states for passing the guide) of every
    function in a module's source."""
    out: list[tuple[str, int, int, str]] = []
    lines = source.splitlines()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCTIONS):
                name = f"{prefix}{child.name}"
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                out.append((f"{where}:{name}", length, nesting(child), stated_reason(lines, child)))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def _k3lib_shapes() -> list[tuple[str, int, int, str]]:
    out = []
    for path in sorted(K3LIB.rglob("*.py")):
        out += shapes(path.read_text(encoding="utf-8"), str(path.relative_to(K3LIB.parent)))
    return out


def _past_guide(size: int, guide: int, why: str) -> bool:
    """Past the guide without a reason of three words or more, or past the wall whatever the reason."""
    return size > guide * WALL or (size > guide and len(why.split()) < 3)


def test_no_function_in_k3lib_is_longer_than_80_lines():
    long = [f"{name}: {length} lines" for name, length, _, why in _k3lib_shapes() if _past_guide(length, MAX_LINES, why)]
    assert not long, (f"functions over {MAX_LINES} lines (split them along their concepts, or say why with "
                      f"`# shape: <why>`; {MAX_LINES * WALL} is the wall):\n" + "\n".join(long))


def test_no_function_in_k3lib_nests_deeper_than_four_levels():
    deep = [f"{name}: depth {depth}" for name, _, depth, why in _k3lib_shapes() if _past_guide(depth, MAX_DEPTH, why)]
    assert not deep, (f"functions nested over {MAX_DEPTH} levels (or say why with `# shape: <why>`):\n"
                      + "\n".join(deep))


def test_a_stated_reason_carries_a_function_past_the_guide_but_not_the_wall():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES + 5)) + "    return x0\n"
    said = shapes("@decorated\n# shape: one table, read top to bottom\ndef f():\n" + body, "m")
    silent = shapes("def f():\n" + body, "m")
    terse = shapes("def f():  # shape: long\n" + body, "m")
    wall = shapes("def f():  # shape: one table, read top to bottom\n" + body * WALL, "m")
    assert [_past_guide(n, MAX_LINES, why) for _, n, _, why in said + silent + terse + wall] == [
        False, True, True, True]
    assert said[0][3] == "one table, read top to bottom"


def test_the_measure_sees_every_function_of_k3lib():
    # A walk that missed methods or nested functions would pass on anything: the known shapes must be found.
    names = {name.split(":", 1)[1] for name, _, _, _ in _k3lib_shapes()}
    assert len(names) > 500
    assert any("." in name for name in names)  # methods and nested functions are measured too


_LONG = "def long():\n" + "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES)) + "    return x0\n"
_DEEP = textwrap.dedent(
    """
    def deep(rows):
        for row in rows:
            if row:
                with open(row) as f:
                    try:
                        while f:
                            pass
                    except OSError:
                        pass
    """
)
_FLAT_ELIF = textwrap.dedent(
    """
    def flat(x):
        if x == 1:
            return 1
        elif x == 2:
            return 2
        elif x == 3:
            return 3
        else:
            return 4
    """
)
_NESTED_DEF = textwrap.dedent(
    """
    class Holder:
        def outer(self):
            for a in b:
                def inner():
                    if c:
                        if d:
                            pass
                return inner
    """
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(_LONG, [("m:long", MAX_LINES + 2, 0)], id="82-lines"),
        pytest.param(_DEEP, [("m:deep", 9, 5)], id="five-deep"),
        pytest.param(_FLAT_ELIF, [("m:flat", 9, 1)], id="elif-chain-is-one-level"),
        pytest.param(_NESTED_DEF, [("m:Holder.outer", 7, 1), ("m:Holder.outer.inner", 4, 2)], id="nested-def"),
    ],
)
def test_the_measure_on_crafted_functions(source, expected):
    assert [(n, length, depth) for n, length, depth, _ in shapes(source, "m")] == expected


def test_the_limits_fail_on_a_deliberate_long_and_deep_function():
    found = shapes(_LONG + _DEEP, "m")
    assert [n for n, length, _, why in found if _past_guide(length, MAX_LINES, why)] == ["m:long"]
    assert [n for n, _, depth, why in found if _past_guide(depth, MAX_DEPTH, why)] == ["m:deep"]
