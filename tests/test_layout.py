"""The package's shape: no import cycle among ``mc`` modules, and no module too long to read.

Import graph (one node per module under ``mc/``; a package is its ``__init__.py``):

- every ``import mc.x`` / ``from mc.x import y`` / relative import is an edge, wherever it sits:
  module level, inside a function or a class. A function-level import still runs (at call time),
  so a cycle through one is a real dependency loop that only import order hides;
- ``from mc.a import b`` points at module ``mc.a.b`` when that is a module, else at ``mc.a``;
- imports under ``if TYPE_CHECKING:`` are NOT edges: they never run, they only feed type checkers
  (the documented way to name a type without importing its module at run time);
- importing ``mc.a.b`` also runs ``mc/a/__init__.py``, but that implied parent import is not an
  edge: a package ``__init__`` that re-exports its own submodules is normal, not a cycle.

Sizes: every module under ``mc/`` at most 400 lines, ``mc/controller.py`` under 300 (see obsidian
"Design": one concern per module).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

MC = Path(__file__).resolve().parent.parent / "mc"
MAX_LINES = 400
CONTROLLER_MAX_LINES = 299  # "under 300"


def module_name(path: Path, root: Path = MC) -> str:
    """``mc/harness/run.py`` -> ``mc.harness.run``; ``mc/harness/__init__.py`` -> ``mc.harness``."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """Collects ``(target module, line)`` for every import that can run (TYPE_CHECKING blocks skipped)."""

    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.found: list[tuple[str, int]] = []

    def _known_prefix(self, name: str) -> str | None:
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in self.known:
                return ".".join(parts[:n])
        return None

    def _add(self, name: str, line: int) -> None:
        target = self._known_prefix(name)
        if target is not None:
            self.found.append((target, line))

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:  # the else branch does run
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # relative: resolved against this module's package
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            self._add(sub if sub in self.known else source, node.lineno)


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, dict[str, int]]:
    """``{module: (source text, is_package)}`` -> ``{module: {imported module: first line}}`` (known modules only)."""
    known = set(sources)
    graph: dict[str, dict[str, int]] = {}
    for name, (text, is_package) in sources.items():
        visitor = _Imports(name, is_package, known)
        visitor.visit(ast.parse(text, filename=name))
        edges: dict[str, int] = {}
        for target, line in visitor.found:
            if target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int] | set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]`` (depth-first search, deterministic order), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished (no cycle through it)
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def mc_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(encoding="utf-8"), p.name == "__init__.py") for p in sorted(MC.rglob("*.py"))}


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    """``mc.a -> mc.b (mc.a line 12) -> mc.a (mc.b line 3)``."""
    steps = [cycle[0]] + [f"{b} ({a} line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(steps)


# ----------------------------------------------------------------------------- the finder itself
def test_cycle_finder_finds_a_cycle_and_only_a_real_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond is not a cycle
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({}) is None


def test_import_edges_count_function_level_and_relative_imports_but_not_type_checking():
    sources = {
        "mc": ("", True),
        "mc.pkg": ("from mc.pkg import b  # a package re-exporting its submodule\n", True),
        "mc.pkg.a": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mc.pkg.b import X\n"
                     "def f():\n    from . import b\n    return b\n", False),
        "mc.pkg.b": ("import os\nimport mc.top\n", False),
        "mc.top": ("def g():\n    from mc.pkg import a\n", False),
    }
    graph = import_graph(sources)
    assert graph["mc.pkg.a"] == {"mc.pkg.b": 5}  # the function-level relative import; TYPE_CHECKING skipped
    assert graph["mc.top"] == {"mc.pkg.a": 2}  # `from mc.pkg import a` is the submodule
    assert graph["mc.pkg.b"] == {"mc.top": 2}  # os is not an mc module
    cycle = find_cycle(graph)
    assert cycle == ["mc.pkg.b", "mc.top", "mc.pkg.a", "mc.pkg.b"]  # reached from mc.pkg (sorted first)
    assert describe(cycle, graph) == ("mc.pkg.b -> mc.top (mc.pkg.b line 2) -> mc.pkg.a (mc.top line 2) "
                                      "-> mc.pkg.b (mc.pkg.a line 5)")
    sources["mc.pkg.a"] = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mc.pkg.b import X\n", False)
    assert find_cycle(import_graph(sources)) is None  # only the TYPE_CHECKING import is left: no cycle


# ----------------------------------------------------------------------------- the package
def test_no_import_cycle_among_mc_modules():
    graph = import_graph(mc_sources())
    assert len(graph) > 20 and any(graph.values()), "the walk found no modules or no imports: it proves nothing"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in mc/: " + describe(cycle, graph)


@pytest.mark.parametrize("path", sorted(MC.rglob("*.py")), ids=lambda p: str(p.relative_to(MC.parent)))
def test_module_is_short_enough(path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    limit = CONTROLLER_MAX_LINES if path == MC / "controller.py" else MAX_LINES
    assert n <= limit, (f"{path.relative_to(MC.parent)} has {n} lines (limit {limit}): split it, one concern per "
                        "module (see obsidian Design)")
