"""The house's shape in figures (issue 48's "done when"): `dict[str, Any]` annotations (and, so that
a swap is not counted as a record, `dict[str, object]`, `Mapping[str, Any|object]` and aliases of them), hand-written
to_dict/from_dict, SimpleNamespace, function-local imports, classes with more than two bases and public class names
defined twice in k3lib. `python scripts/house_metrics.py` prints them; `--json` prints them as one object."""

from __future__ import annotations

import ast
import collections
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "k3lib"


def _function_local_imports(tree: ast.Module) -> list[ast.stmt]:
    """Every import statement inside a function (each once, however deeply the functions nest)."""
    found: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                found.append(child)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return found


def measure(root: Path = ROOT) -> dict[str, object]:
    dict_any = loose = aliases = to_from = namespace = local_imports = 0
    names: dict[str, list[str]] = collections.defaultdict(list)
    many_bases: list[str] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(root.parent))
        dict_any += len(re.findall(r"dict\[str, Any\]", text))
        loose += len(re.findall(r"(?:dict|Mapping|MutableMapping)\[str, (?:object|Any)\]", text)) - len(
            re.findall(r"dict\[str, Any\]", text))
        aliases += len(re.findall(r"^\w+(?:: TypeAlias)? = (?:dict|Mapping)\[str, (?:Any|object)\]", text, re.M))
        namespace += text.count("SimpleNamespace")
        tree = ast.parse(text)
        local_imports += len(_function_local_imports(tree))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                to_from += node.name in ("to_dict", "from_dict")
            if isinstance(node, ast.ClassDef) and len(node.bases) > 2:
                many_bases.append(f"{rel}:{node.name}")
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                names[node.name].append(rel)
    twice = {name: paths for name, paths in sorted(names.items()) if len(paths) > 1}
    return {"dict_str_any": dict_any, "other_loose_mappings": loose, "loose_mapping_aliases": aliases,
            "to_from_dict": to_from, "simple_namespace": namespace,
            "function_local_imports": local_imports, "classes_over_two_bases": many_bases,
            "class_names_defined_twice": twice}


if __name__ == "__main__":
    figures = measure()
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=1))
    else:
        for key, value in figures.items():
            print(f"{key:26} {value if not isinstance(value, (list, dict)) else len(value)}"
                  f"{'  ' + json.dumps(value) if isinstance(value, (list, dict)) and value else ''}")
