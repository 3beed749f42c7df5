"""One-way layers: the import graph of k3lib, read from the source with `ast` (module-level and function-local
imports, relative imports resolved; imports under `if TYPE_CHECKING:` are annotations, not run, and are left out),
has no cycle, and no module imports from a layer above its own.

The layer map below is the architecture the README draws. A new module must be placed in it (the test names
the module when it is not); a package entry `pkg.*` places every module of that package not named on its own.
"""

from __future__ import annotations

import ast
import fnmatch
from collections import defaultdict
from pathlib import Path

import pytest

K3LIB = Path(__file__).resolve().parents[1] / "k3lib"

# Lowest first: a module may import its own layer and the layers before it, never one after it. The folders of
# k3lib are the layers (`core/`, `io/`, `axes/`, `verdict/`, `report/`, `batch/`, `cli/`); two packages stand
# beside them: the emulator (an island at the foundation, see ISLANDS) and the renewal review, whose modules
# stand on the layer their role gives them.
LAYERS: dict[str, tuple[str, ...]] = {
    # what everything stands on: errors, parameters, the run folder, the target, the evidence model and the
    # outcome vocabulary, the axis context
    "core": ("core", "core.*", "emulator", "emulator.*"),
    # talking to a target and reading what it says: the HTTP client, load generation, /metrics, GPU samplers,
    # the readers of pasted artifacts
    "io": ("io", "io.*"),
    # the axes: each measures one thing and turns it into findings (an evidence record); the renewal review's
    # inputs and analyses
    "axes": ("axes", "axes.*", "renewal.*"),
    # records in, a decision out; the post-run tools that judge a run against an accepted one
    "verdict": ("verdict", "verdict.*", "renewal.decision", "renewal.review", "renewal.records"),
    # what a person reads: the notebooks' openers and HTML views, the summary, the report, its signature
    "report": ("report", "report.*", "renewal", "renewal.figures", "renewal.notebook", "renewal.session"),
    # running the notebooks: papermill stage by stage, the acceptance batch, the fleet
    "batch": ("batch", "batch.*", "renewal.batch"),
    # the command line: every print and argparse adapter
    "cli": ("", "__main__", "cli", "cli.*"),
}
# Packages that are not a layer of their own; every other folder of k3lib is the layer of the same name.
BESIDE = ("emulator", "renewal", "data")
RANK = {name: i for i, name in enumerate(LAYERS)}
VIEWS = RANK["report"]

# A package that may import only itself and the named layers (the emulator runs without the kit).
ISLANDS: dict[str, tuple[str, ...]] = {"emulator": ("core",)}

# Cycles and upward imports still on this branch, owned by other work; each must still exist (the test fails
# when one is gone, so the entry is removed with the fix).
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_UPWARD: set[tuple[str, str]] = set()


class Graph:
    """Modules and the imports between them (`edges[a]`: the modules `a` imports)."""

    def __init__(self) -> None:
        self.edges: dict[str, set[str]] = defaultdict(set)

    def add(self, module: str, imports: set[str] | None = None) -> None:
        self.edges[module] |= imports or set()
        for target in imports or ():
            self.edges.setdefault(target, set())

    def __iter__(self):
        return iter(list(self.edges))

    def pairs(self) -> set[tuple[str, str]]:
        return {(a, b) for a, bs in self.edges.items() for b in bs}

    def reachable(self, start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for b in self.edges[todo.pop()] - seen:
                seen.add(b)
                todo.append(b)
        return seen

    def cycles(self) -> set[frozenset[str]]:
        """The strongly connected components of more than one module (Kosaraju: each is one or more cycles)."""
        order: list[str] = []
        seen: set[str] = set()
        for root in self.edges:  # post-order of an iterative depth-first walk
            if root in seen:
                continue
            seen.add(root)
            stack = [(root, iter(sorted(self.edges[root])))]
            while stack:
                node, children = stack[-1]
                child = next((c for c in children if c not in seen), None)
                if child is None:
                    order.append(node)
                    stack.pop()
                else:
                    seen.add(child)
                    stack.append((child, iter(sorted(self.edges[child]))))
        back: dict[str, set[str]] = defaultdict(set)
        for a, b in self.pairs():
            back[b].add(a)
        out, placed = set(), set()
        for root in reversed(order):
            if root in placed:
                continue
            component, todo = {root}, [root]
            placed.add(root)
            while todo:
                for a in back[todo.pop()] - placed:
                    placed.add(a)
                    component.add(a)
                    todo.append(a)
            if len(component) > 1:
                out.add(frozenset(component))
        return out


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name relative to k3lib ("" is k3lib itself) → (file, is a package)."""
    out = {}
    for path in sorted(K3LIB.rglob("*.py")):
        parts = list(path.relative_to(K3LIB).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(name: str, is_package: bool, tree: ast.Module, modules: dict[str, tuple[Path, bool]]) -> set[str]:
    """The k3lib modules `name` imports (the deepest module each import names: `from .capacity import run` is
    `capacity.run`, `from .capacity import CapacityResult` is `capacity`)."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    package = [p for p in package if p]

    def resolve(dotted: str) -> str | None:
        parts = dotted.split(".")
        if parts[0] != "k3lib":
            return None
        parts = parts[1:]
        while ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts)

    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(t for a in child.names if (t := resolve(a.name)) is not None)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[:len(package) - (child.level - 1)]
                    module = ".".join(["k3lib", *base, *([child.module] if child.module else [])])
                else:
                    module = child.module or ""
                for alias in child.names:
                    target = resolve(f"{module}.{alias.name}")
                    if target is not None:
                        found.add(target)
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def import_graph() -> Graph:
    modules = _modules()
    graph = Graph()
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph.add(name, _imported(name, is_package, tree, modules))
    return graph


def layer_of(module: str) -> str | None:
    """The layer the map gives `module`: its own entry, else its package's `pkg.*` entry."""
    for layer, entries in LAYERS.items():
        if module in entries:
            return layer
    best = None
    for layer, entries in LAYERS.items():
        for entry in entries:
            if entry.endswith(".*") and fnmatch.fnmatchcase(module, entry):
                if best is None or len(entry) > len(best[1]):
                    best = (layer, entry)
    return best[0] if best else None


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph()


def test_the_graph_sees_function_local_and_relative_imports(graph):
    # probes of the reader itself: a function-local import (the CLI imports its commands on use) and a
    # two-dot relative import
    assert "report.pages" in graph.edges["cli.main"]
    assert "io.client" in graph.edges["axes.capacity.run"]
    assert len(graph.pairs()) > 300


def test_no_import_cycle(graph):
    cycles = graph.cycles()
    new = sorted(sorted(c) for c in cycles - KNOWN_CYCLES)
    assert not new, "import cycles in k3lib (each list: the modules of one cycle, relative to k3lib): " + \
        "; ".join(" <-> ".join(c) for c in new)
    gone = sorted(sorted(c) for c in KNOWN_CYCLES - cycles)
    assert not gone, f"these known cycles are broken now: remove them from KNOWN_CYCLES: {gone}"


def test_every_module_is_placed_in_a_layer(graph):
    missing = sorted(m or "k3lib" for m in graph if layer_of(m) is None)
    assert not missing, f"modules not placed in tests/test_architecture.py LAYERS: {missing} (add each to the " \
                        f"layer it belongs to, or its package's `pkg.*` entry)"


def upward_imports(graph: Graph) -> set[tuple[str, str]]:
    """(importer, imported) where the imported module stands on a layer above the importer's."""
    return {(a, b) for a, b in graph.pairs() if RANK[layer_of(a) or "cli"] < RANK[layer_of(b) or "cli"]}


def test_no_module_imports_from_a_layer_above_its_own(graph):
    upward = upward_imports(graph)
    new = sorted(upward - KNOWN_UPWARD)
    assert not new, "imports from a higher layer (module [layer] -> imported [layer]): " + "; ".join(
        f"{a or 'k3lib'} [{layer_of(a)}] -> {b} [{layer_of(b)}]" for a, b in new)
    gone = sorted(KNOWN_UPWARD - upward)
    assert not gone, f"these known upward imports are gone: remove them from KNOWN_UPWARD: {gone}"


def test_the_data_model_never_imports_the_views(graph):
    """Not even through another module (the known upward imports aside, which the lead removes)."""
    kept = Graph()
    for a in graph:
        kept.add(a, {b for b in graph.edges[a] if (a, b) not in KNOWN_UPWARD})
    below = [m for m in graph if RANK[layer_of(m) or "cli"] < VIEWS]
    bad = sorted((m, v) for m in below for v in kept.reachable(m) if layer_of(v) == "report")
    assert not bad, f"{len(bad)} modules below the views reach them (directly or through others), e.g. {bad[:12]}"


def test_the_live_comparison_of_paths_does_not_import_the_renewal_review(graph):
    """The renewal review reads paths records; `k3 paths` stands on its own (the retry policy both use lives in
    the foundation), so the two axes are not one knot."""
    bad = sorted((a, b) for a, b in graph.pairs()
                 if (a == "axes.paths" or a.startswith("axes.paths.")) and (b == "renewal" or b.startswith("renewal.")))
    assert not bad, f"paths imports the renewal review: {bad}"
    assert "core.retry" in graph.edges["axes.paths.config"] and "core.retry" in graph.edges["renewal.rules"]


def test_islands_import_only_their_own_package_and_the_layers_they_name(graph):
    bad = []
    for island, layers in ISLANDS.items():
        for a, b in graph.pairs():
            inside = a == island or a.startswith(island + ".")
            if inside and not (b == island or b.startswith(island + ".")) and layer_of(b) not in layers:
                bad.append(f"{a} -> {b} [{layer_of(b)}]")
    assert not bad, f"an island imports outside its allowed layers: {bad}"


def test_the_layer_map_names_only_real_modules(graph):
    stale = []
    for entries in LAYERS.values():
        for entry in entries:
            package = entry[:-2] if entry.endswith(".*") else None
            if package is not None and not any(m.startswith(package + ".") for m in graph):
                stale.append(entry)
            elif package is None and entry not in graph:
                stale.append(entry)
    assert not stale, f"LAYERS names modules that do not exist (moved or removed?): {stale}"


def test_the_check_fails_on_a_cycle_and_on_an_upward_import():
    """The reader is what the checks above trust: a made-up graph with a cycle and an upward import is caught."""
    tree = ast.parse("def f():\n    from ...report.views import badge\n")
    modules = {"axes.capacity": (Path("x"), True), "axes.capacity.result": (Path("x"), False),
               "report.views": (Path("x"), False)}
    assert _imported("axes.capacity.result", False, tree, modules) == {"report.views"}
    g = Graph()
    g.add("verdict.decision", {"report.views", "core.evidence"})
    g.add("report.views", {"verdict.decision", "core.evidence"})
    g.add("core.evidence", {"core.errors"})
    g.add("cli.main", {"report.views"})
    assert g.cycles() == {frozenset({"verdict.decision", "report.views"})}
    g.add("core.errors", {"cli.main"})
    assert g.cycles() == {frozenset({"verdict.decision", "report.views", "core.evidence", "core.errors", "cli.main"})}
    assert RANK[layer_of("verdict.decision")] < RANK[layer_of("report.views")]
    by_default = defaultdict(list)
    for m in ("axes.capacity.brand_new", "renewal.brand_new", "brand_new"):
        by_default[layer_of(m)].append(m)
    assert by_default == {"axes": ["axes.capacity.brand_new", "renewal.brand_new"], None: ["brand_new"]}


def test_a_deliberate_import_from_a_lower_layer_to_a_higher_one_fails(graph):
    """The real graph plus one bad import written here (the evidence model importing a report view, the agent
    axis importing the CLI): the upward check names exactly those, with their layers."""
    bad = Graph()
    for a in graph:
        bad.add(a, set(graph.edges[a]))
    modules = _modules()
    for name, source in (("core.evidence", "from ..report.views import badge\n"),
                         ("axes.agent.judge", "def f():\n    from ...cli.main import main\n")):
        bad.add(name, _imported(name, False, ast.parse(source), modules))
    assert upward_imports(bad) - upward_imports(graph) == {("core.evidence", "report.views"),
                                                           ("axes.agent.judge", "cli.main")}
    with pytest.raises(AssertionError, match=r"core\.evidence \[core\] -> report\.views \[report\]"):
        test_no_module_imports_from_a_layer_above_its_own(bad)


def test_the_folders_are_the_layers():
    """Every folder of k3lib is a layer of the same name (or one of the packages beside them), and at most eight
    modules stand at k3lib's top level."""
    folders = sorted(p.name for p in K3LIB.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert [f for f in folders if f not in LAYERS and f not in BESIDE and f != "templates"] == []
    assert [layer for layer in LAYERS if layer != "cli" and layer not in folders] == []
    top = sorted(p.name for p in K3LIB.glob("*.py"))
    assert len(top) <= 8, f"{len(top)} modules at k3lib's top level: {top}"


ROLES = ("config", "run", "judge", "figures")


def test_every_axis_package_has_the_same_role_modules():
    """`config` (its parameters), `run` (drives the measurement), `judge` (findings, pure), `figures` (plots and
    tables): where an axis is judged has one answer for every axis."""
    packages = sorted(p.parent for p in (K3LIB / "axes").glob("*/__init__.py"))
    assert len(packages) >= 5
    missing = {p.name: [r for r in ROLES if not (p / f"{r}.py").exists()] for p in packages}
    assert {k: v for k, v in missing.items() if v} == {}


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(K3LIB)): n for p in K3LIB.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}, f"k3lib modules over 500 lines (split them along the concepts they hold): {long}"


def test_every_view_is_registered_for_a_type_that_exists():
    """The views are registered by (module, class name): a type moved elsewhere would lose its view silently."""
    import importlib
    import types

    from IPython.core.formatters import DisplayFormatter

    from k3lib.report import views
    from k3lib.verdict.decision import decide

    for module, name in views.RENDERERS:
        assert isinstance(getattr(importlib.import_module(module), name, None), type), f"{module}.{name}"
    shell = types.SimpleNamespace(display_formatter=DisplayFormatter())  # what register() uses of a shell
    views.register(shell)
    decision = decide({}, ["probe"])
    data, _ = shell.display_formatter.format(decision)
    assert data["text/html"] == views.decision_html(decision) and "Decision: <span" in data["text/html"]
