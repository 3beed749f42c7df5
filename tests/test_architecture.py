"""One-way layers: the import graph of k3lib, read from the source with `ast` (module-level, function-local and
type-only imports under `if TYPE_CHECKING:` alike, relative imports resolved), has no cycle, and no module imports
from a layer above its own.

The folders of k3lib are the layers (`LAYERS`, lowest first); a module stands on the layer of its top folder. The
checker is one function, `violations(import_graph(root))`, run on k3lib here and on a made-up package with
deliberate bad imports in `test_the_checker_names_a_deliberate_cycle_and_upward_import`.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
K3LIB = ROOT / "k3lib"

# Lowest first: a module may import its own layer and the layers before it, never one after it. Each layer is the
# folders that stand on it ("" is k3lib's own __init__, the lazy public names; `__main__` is `python -m k3lib`).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # what everything stands on: errors, parameters, the run folder, the Target (named, never started here), the
    # evidence model and the outcome vocabulary, the axis context, the batch plans
    ("core", ("core",)),
    # the embedded emulator: a model of a vLLM server that imports core only (ISLANDS) and runs without the kit;
    # above the foundation, so that whatever starts it (io/target.py, the drill, the CLI) imports downward
    ("emulator", ("emulator",)),
    # talking to a target and reading what it says: reaching or starting it, the HTTP client, load over worker
    # processes, /metrics, GPU samplers, the readers of pasted artifacts
    ("io", ("io",)),
    # the axes: each measures one thing (run.py) and judges it purely (judge.py) into an evidence record
    ("axes", ("axes",)),
    # records in, a decision out: the acceptance decision assembled, recomputed and judged again from raw data,
    # the post-run judgements against an accepted run
    ("verdict", ("verdict",)),
    # the go-live kit of an accepted run: Prometheus alerts, a Grafana dashboard, ROLLBACK.md, from the levels the
    # verdict's accepted run measured
    ("golive", ("golive",)),
    # the renewal review: its inputs, analyses, records and decision, its notebooks' entry point and live drill, and
    # a review run decided again; above the acceptance verdict, whose accepted run it reads (`verdict.accepted`)
    ("renewal", ("renewal",)),
    # what a person reads: the HTML views, the tables and figures, the report, its signature
    ("report", ("report",)),
    # what a notebook opens first: its parameters, run folder and target (reached, or the embedded emulator started),
    # with the report's views installed; the review notebooks' calls gathered (`k3lib.review`)
    ("opening", ("opening",)),
    # running the notebooks: papermill stage by stage, the acceptance and renewal batches, the fleet
    ("batch", ("batch",)),
    # the command line: every print and argparse adapter, and the package's public names
    ("cli", ("cli", "", "__main__")),
)
RANK = {layer: i for i, (layer, _) in enumerate(LAYERS)}
FOLDER_LAYER = {folder: layer for layer, folders in LAYERS for folder in folders}

# A package that may import only itself and the named layers (the emulator runs without the kit).
ISLANDS: dict[str, tuple[str, ...]] = {"emulator": ("core",)}


class Graph:
    """Modules and the imports between them (`edges[a]`: the modules `a` imports)."""

    def __init__(self) -> None:
        self.edges: dict[str, set[str]] = defaultdict(set)
        self.missing: set[tuple[str, str]] = set()  # (module, a module of the package it names that does not exist)

    def add(self, module: str, imports: set[str] | None = None) -> None:
        self.edges[module] |= imports or set()
        for target in imports or ():
            self.edges.setdefault(target, set())

    def __iter__(self):
        return iter(list(self.edges))

    def pairs(self) -> set[tuple[str, str]]:
        return {(a, b) for a, bs in self.edges.items() for b in bs}

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


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name relative to the package at `root` ("" is the package itself) → (file, is a package)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _imported(name: str, is_package: bool, tree: ast.Module, modules: dict[str, tuple[Path, bool]],
              top: str = "k3lib", missing: set[tuple[str, str]] | None = None) -> set[str]:
    """The modules of package `top` that module `name` imports, wherever the import stands (a function, an
    `if TYPE_CHECKING:` block): the deepest module each import names (`from .capacity import run` is
    `capacity.run`, `from .capacity import CapacityResult` is `capacity`). A `from X import …` whose X is no
    module of the package (a type-only import left behind by a move: it never runs) goes to `missing`."""
    package = [p for p in (name.split(".") if is_package else name.split(".")[:-1]) if p]
    missing = set() if missing is None else missing

    def resolve(dotted: str) -> str | None:
        parts = dotted.split(".")
        if parts[0] != top:
            return None
        parts = parts[1:]
        while ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts)

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(t for a in node.names if (t := resolve(a.name)) is not None)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                module = ".".join([top, *base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] == top and module.partition(".")[2] not in modules:
                missing.add((name, module.partition(".")[2]))
                continue
            found.update(t for alias in node.names if (t := resolve(f"{module}.{alias.name}")) is not None)
    found.discard(name)
    return found


def import_graph(root: Path = K3LIB) -> Graph:
    """Every module of the package at `root` and the modules of it each imports."""
    modules = _modules(root)
    graph = Graph()
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph.add(name, _imported(name, is_package, tree, modules, top=root.name, missing=graph.missing))
    return graph


def layer_of(module: str) -> str | None:
    """The layer of the module's top folder (None: a folder or top-level module no layer names)."""
    return FOLDER_LAYER.get(module.split(".")[0])


def violations(graph: Graph) -> list[str]:
    """One line per module no layer places, per import cycle and per import from a higher layer; [] when the
    graph keeps the layers."""
    out = [f"{m or '(package)'} stands in no layer (add its folder to LAYERS)" for m in sorted(graph)
           if layer_of(m) is None]
    out += [f"{a or '(package)'} imports {b}, which does not exist" for a, b in sorted(graph.missing)]
    out += ["import cycle: " + " <-> ".join(sorted(c)) for c in sorted(graph.cycles(), key=sorted)]
    out += [f"upward import: {a or '(package)'} [{layer_of(a)}] -> {b} [{layer_of(b)}]"
            for a, b in sorted(graph.pairs())
            if layer_of(a) is not None and layer_of(b) is not None and RANK[layer_of(a)] < RANK[layer_of(b)]]
    return out


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph()


def test_the_graph_sees_function_local_relative_and_type_only_imports(graph):
    # probes of the reader itself: a function-local import (the CLI's parser takes the emulator's arguments on
    # use), a two-dot relative import, and an import under `if TYPE_CHECKING:` (the capacity judge's AxisContext)
    assert "emulator.cli" in graph.edges["cli.main"]
    assert "io.client" in graph.edges["axes.capacity.run"]
    assert "core.session" in graph.edges["axes.capacity.judge"]
    assert len(graph.pairs()) > 300


def test_the_layers_hold(graph):
    """No module outside the layers, no import cycle (type-only imports counted), no import from above."""
    bad = violations(graph)
    assert not bad, "k3lib breaks its layers (modules relative to k3lib):\n" + "\n".join(bad)


def test_the_checker_names_a_deliberate_cycle_and_upward_import(tmp_path):
    """The same checker over a made-up k3lib: the evidence model importing a report view inside a function, an
    axis' judge and figures importing each other (the figures only for type checking), a stray top-level module, a
    type-only import of a module that moved away. Each is named; the same package without them passes."""
    pkg = tmp_path / "k3lib"
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/evidence.py": "def badge_of(rec):\n    from ..report.views import badge\n    return badge(rec)\n",
        "report/__init__.py": "",
        "report/views.py": "from ..core.evidence import badge_of\n\ndef badge(rec):\n    return rec\n",
        "axes/__init__.py": "",
        "axes/toy/__init__.py": "",
        "axes/toy/judge.py": "from . import figures\n",
        "axes/toy/figures.py": ("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                "    from .judge import ToyResult\n"),
        "stray.py": "",
        "axes/toy/run.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .session import Gone\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text, encoding="utf-8")
    found = violations(import_graph(pkg))
    assert found == ["stray stands in no layer (add its folder to LAYERS)",
                     "axes.toy.run imports axes.toy.session, which does not exist",
                     "import cycle: axes.toy.figures <-> axes.toy.judge",
                     "import cycle: core.evidence <-> report.views",
                     "upward import: core.evidence [core] -> report.views [report]"]
    with pytest.raises(AssertionError, match=r"upward import: core\.evidence \[core\] -> report\.views \[report\]"):
        test_the_layers_hold(import_graph(pkg))
    (pkg / "stray.py").unlink()
    (pkg / "axes/toy/run.py").write_text("", encoding="utf-8")
    (pkg / "core/evidence.py").write_text("def badge_of(rec):\n    return rec\n", encoding="utf-8")
    (pkg / "axes/toy/figures.py").write_text("from .judge import ToyResult\n", encoding="utf-8")
    (pkg / "axes/toy/judge.py").write_text("class ToyResult:\n    pass\n", encoding="utf-8")
    assert violations(import_graph(pkg)) == []


def test_islands_import_only_their_own_package_and_the_layers_they_name(graph):
    bad = []
    for island, layers in ISLANDS.items():
        for a, b in graph.pairs():
            inside = a == island or a.startswith(island + ".")
            if inside and not (b == island or b.startswith(island + ".")) and layer_of(b) not in layers:
                bad.append(f"{a} -> {b} [{layer_of(b)}]")
    assert not bad, f"an island imports outside its allowed layers: {bad}"


def test_the_live_comparison_of_paths_does_not_import_the_renewal_review(graph):
    """The renewal review reads paths records; `k3 paths` stands on its own (the retry policy both use lives in
    the foundation), so the two axes are not one knot."""
    bad = sorted((a, b) for a, b in graph.pairs()
                 if (a == "axes.paths" or a.startswith("axes.paths.")) and (b == "renewal" or b.startswith("renewal.")))
    assert not bad, f"paths imports the renewal review: {bad}"
    assert "core.retry" in graph.edges["axes.paths.config"] and "core.retry" in graph.edges["renewal.rules"]


def test_the_folders_are_the_layers():
    """Every folder of k3lib is named by a layer (data and templates hold no code), and at most eight modules
    stand at k3lib's top level."""
    folders = sorted(p.name for p in K3LIB.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert [f for f in folders if f not in FOLDER_LAYER and f not in ("data", "templates")] == []
    assert [f for layer, fs in LAYERS for f in fs if f not in ("", "__main__") and f not in folders] == []
    top = sorted(p.name for p in K3LIB.glob("*.py"))
    assert len(top) <= 8, f"{len(top)} modules at k3lib's top level: {top}"


ROLES = ("config", "run", "judge", "figures")
# what a judge must not import: its own package's runner and pictures, and anything that sends or spawns
NOT_IN_A_JUDGE = ("httpx", "aiohttp", "requests", "socket", "subprocess", "urllib.request", "multiprocessing")
IO_MODULES = ("io.client", "io.load", "io.workers", "io.target", "io.gpu", "io.metrics.scrape", "io.metrics.sampler")


def _axis_packages() -> list[Path]:
    return sorted(p.parent for p in (K3LIB / "axes").glob("*/__init__.py"))


def test_every_axis_package_has_the_same_role_modules():
    """`config` (its parameters), `run` (drives the measurement, the notebook's entry point), `judge` (findings,
    pure), `figures` (plots and tables): where an axis is judged has one answer for every axis."""
    packages = _axis_packages()
    assert len(packages) >= 5
    missing = {p.name: [r for r in ROLES if not (p / f"{r}.py").exists()] for p in packages}
    assert {k: v for k, v in missing.items() if v} == {}


def test_every_judge_is_pure_and_blind_to_its_figures(graph):
    """A judge imports neither its package's runner nor its figures (type-only imports included), nor anything
    that sends a request or spawns a process: the judgement is a function of the measured data."""
    bad = []
    for package in _axis_packages():
        name = f"axes.{package.name}"
        own = graph.edges[f"{name}.judge"]
        bad += [f"{name}.judge -> {m}" for m in sorted(own) if m in (f"{name}.run", f"{name}.figures")]
        bad += [f"{name}.judge -> {m}" for m in sorted(own) if m.startswith(IO_MODULES)]
        tree = ast.parse((package / "judge.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad += [f"{name}.judge -> {n}" for n in names if n.startswith(NOT_IN_A_JUDGE)]
    assert not bad, f"impure judges: {bad}"


def test_the_notebooks_call_each_axis_from_its_run_module():
    """What an axis notebook (one opened with `k3lib.open_axis`) runs on its context, `k3lib.<axis>.<entry>(ctx)`,
    is defined in that axis' `run.py`: "where does the capacity axis start?" has the same answer as for every other
    axis. (The paths axis runs from `k3 paths`, its `run.run_paths`; the review notebook only shows a finished run.)"""
    packages = {p.name for p in _axis_packages()}
    entries = {"paths.run_paths": "k3 paths"}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        if not any("k3lib.open_axis(" in c for c in cells):
            continue
        for source in cells:
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Attribute) \
                        and getattr(node.func.value.value, "id", None) == "k3lib" \
                        and node.func.value.attr in packages \
                        and node.args and getattr(node.args[0], "id", None) == "ctx":
                    entries[f"{node.func.value.attr}.{node.func.attr}"] = path.name
    assert len(entries) >= 5, entries
    import k3lib

    misplaced = {e: getattr(getattr(k3lib, e.split(".")[0]), e.split(".")[1]).__module__ for e in entries}
    assert {e: m for e, m in misplaced.items() if not m.endswith(".run")} == {}


# A guide, not a wall (issue 48): a module that holds one concept past 500 lines says why in its docstring, on a line
# `shape: <why>` (three words at least); 1,000 lines is the wall all the same.
MODULE_GUIDE, MODULE_WALL = 500, 1000
_MODULE_REASON = re.compile(r"^\s*shape:\s*(?P<why>\S.*)$", re.M)


def _module_past_guide(source: str) -> bool:
    n = len(source.splitlines())
    doc = ast.get_docstring(ast.parse(source)) or ""
    why = m["why"] if (m := _MODULE_REASON.search(doc)) else ""
    return n > MODULE_WALL or (n > MODULE_GUIDE and len(why.split()) < 3)


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(K3LIB)): len(p.read_text(encoding="utf-8").splitlines()) for p in K3LIB.rglob("*.py")
            if _module_past_guide(p.read_text(encoding="utf-8"))}
    assert long == {}, (f"k3lib modules over {MODULE_GUIDE} lines (split them along the concepts they hold, or say why "
                        f"in the docstring: `shape: <why>`; {MODULE_WALL} is the wall): {long}")


def test_a_module_states_why_it_passes_the_guide():
    body = "x = 1\n" * (MODULE_GUIDE + 10)
    assert _module_past_guide(body)
    assert not _module_past_guide('"""One table.\n\nshape: one table of rules, read whole\n"""\n' + body)
    assert _module_past_guide('"""One table.\n\nshape: long\n"""\n' + body)
    assert _module_past_guide('"""One table.\n\nshape: one table of rules, read whole\n"""\n' + body * 2)


def test_every_view_is_registered_for_a_type_that_exists():
    """The views are registered by (module, class name): a type moved elsewhere would lose its view silently."""
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
