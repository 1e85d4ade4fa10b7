"""The package's import graph has no cycle and no cross-module import of a private name.

The graph is read from the source with ``ast`` (nothing is imported). An edge is a runtime
import: module-level and function-level ``import`` / ``from ... import`` statements count;
those under ``if TYPE_CHECKING:`` do not (they never run). ``from pkg import name`` is an edge
to ``pkg.name`` when that is a module, else to ``pkg`` (its ``__init__``).

Cycles are looked for at every level of the package tree: inside each package, its direct
children (sub-packages, modules and its own ``__init__``) must form a DAG, an edge between two
modules counting between their ancestors that are children of the package holding both. So
``verify.lossless -> execute.progress`` and ``execute.distributed.x -> verify.report``
together are a cycle between the packages ``verify`` and ``execute``, even though no module
imports itself back. A cycle between modules is always a cycle at some level.

Example of the data::

    Import("checkpoint_tool.verify.lossless", "checkpoint_tool.execute.progress", "Progress", 36)
    package_cycles(imports)  # [("checkpoint_tool", ("execute", "verify")), ...]
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "checkpoint_tool"
PACKAGE = "checkpoint_tool"



@dataclass(frozen=True)
class Import:
    """One runtime import: ``importer`` imports ``target`` (a module), maybe for ``name``.

    Example: ``Import("checkpoint_tool.cli.app", "checkpoint_tool.cli.convert", None, 12)``.
    """

    importer: str
    target: str
    name: str | None
    line: int


def module_name(path: Path) -> str:
    """``.../checkpoint_tool/cli/app.py`` -> ``checkpoint_tool.cli.app`` (``__init__`` kept)."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    return ".".join(rel.parts)


def all_modules() -> dict[str, Path]:
    """Every module of the package by dotted name; a package is ``pkg.__init__``."""
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except the bodies of ``if TYPE_CHECKING:`` (their ``else`` does run)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


class Resolver:
    """Turns the names in import statements into modules of the package."""

    def __init__(self, modules: Iterable[str]) -> None:
        self.modules = set(modules)

    def module(self, dotted: str) -> str | None:
        """``checkpoint_tool.cli`` -> ``checkpoint_tool.cli.__init__``; outside names -> None."""
        if dotted in self.modules:
            return dotted
        if f"{dotted}.__init__" in self.modules:
            return f"{dotted}.__init__"
        return None

    def base(self, importer: str, node: ast.ImportFrom) -> str:
        """The absolute module a ``from X import`` names, relative forms resolved."""
        if not node.level:
            return node.module or ""
        parts = importer.split(".")[:-1]  # the importer's package (for __init__ too)
        parts = parts[: len(parts) - (node.level - 1)]
        return ".".join([*parts, node.module] if node.module else parts)

    def imports(self, importer: str, tree: ast.AST) -> Iterator[Import]:
        for node in _runtime_nodes(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = self.module(alias.name)
                    if target:
                        yield Import(importer, target, None, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = self.base(importer, node)
                base_mod = self.module(base)
                for alias in node.names:
                    sub = self.module(f"{base}.{alias.name}")
                    if sub:
                        yield Import(importer, sub, None, node.lineno)
                    elif base_mod:
                        yield Import(importer, base_mod, alias.name, node.lineno)


def collect() -> tuple[list[Import], dict[str, ast.AST]]:
    modules = all_modules()
    resolver = Resolver(modules)
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in modules.items()}
    found = [imp for name, tree in trees.items() for imp in resolver.imports(name, tree)]
    return found, trees


def _package_of(module: str) -> list[str]:
    """``a.b.c`` -> ``["a", "b"]``; ``a.b.__init__`` -> ``["a", "b"]`` (its own package)."""
    return module.split(".")[:-1]


def _child(module: str, level: list[str]) -> str:
    """The child of package ``level`` that holds ``module`` (``__init__`` for the package's own)."""
    parts = module.split(".")
    return parts[len(level)]


def level_edges(imports: Iterable[Import]) -> dict[str, dict[str, set[str]]]:
    """For each package, the edges between its children that the imports imply."""
    levels: dict[str, dict[str, set[str]]] = {}
    for imp in imports:
        a, b = imp.importer.split("."), imp.target.split(".")
        common: list[str] = []
        for x, y in zip(_package_of(imp.importer), _package_of(imp.target), strict=False):
            if x != y:
                break
            common.append(x)
        ca, cb = a[len(common)], b[len(common)]
        if ca != cb:
            levels.setdefault(".".join(common), {}).setdefault(ca, set()).add(cb)
    return levels


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_cycles(imports: Iterable[Import]) -> list[tuple[str, tuple[str, ...]]]:
    """Every ring of children importing each other, as ``(package, sorted children)``."""
    out = []
    for level, graph in sorted(level_edges(imports).items()):
        out.extend((level, tuple(comp)) for comp in cycles(graph))
    return out


def witness(imports: list[Import], level: str, members: tuple[str, ...]) -> list[str]:
    """The import statements behind a reported ring, for the failure message."""
    prefix = f"{level}." if level else ""
    inside = {f"{prefix}{m}" for m in members}

    def holder(module: str) -> str | None:
        for m in inside:
            if module == m or module.startswith(f"{m}."):
                return m
        return None

    lines = []
    for imp in imports:
        ha, hb = holder(imp.importer), holder(imp.target)
        if ha and hb and ha != hb:
            what = f" ({imp.name})" if imp.name else ""
            lines.append(f"  {imp.importer}:{imp.line} -> {imp.target}{what}")
    return sorted(set(lines))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(
    imports: Iterable[Import], trees: dict[str, ast.AST]
) -> list[tuple[str, str, int]]:
    """Cross-module uses of underscore names, as ``(importer, module.name, line)``:
    ``from m import _x``, a ``_mod`` module imported from another package, or ``alias._x`` on
    a module bound by an import."""
    found = []
    for imp in imports:
        if imp.importer == imp.target:
            continue
        if imp.name is not None and _private(imp.name):
            found.append((imp.importer, f"{imp.target}.{imp.name}", imp.line))
        tail = imp.target.split(".")
        if any(_private(p) for p in tail) and _package_of(imp.importer) != _package_of(imp.target):
            found.append((imp.importer, imp.target, imp.line))
    resolver = Resolver(trees)
    for importer, tree in trees.items():
        aliases: dict[str, str] = {}
        for node in _runtime_nodes(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and resolver.module(alias.name):
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = resolver.base(importer, node)
                for alias in node.names:
                    if resolver.module(f"{base}.{alias.name}"):
                        aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
            ):
                found.append((importer, f"{aliases[node.value.id]}.{node.attr}", node.lineno))
    return sorted(set(found))


@pytest.fixture(scope="module")
def graph() -> tuple[list[Import], dict[str, ast.AST]]:
    return collect()


def test_no_import_cycle(graph: tuple[list[Import], dict[str, ast.AST]]) -> None:
    imports, _ = graph
    found = package_cycles(imports)
    report = [
        f"{level or '(top)'}: {' <-> '.join(members)}\n"
        + "\n".join(witness(imports, level, members))
        for level, members in found
    ]
    assert not found, "import cycles:\n" + "\n".join(report)


def test_no_private_import_across_modules(graph: tuple[list[Import], dict[str, ast.AST]]) -> None:
    imports, trees = graph
    found = [
        f"{importer}:{line} uses {name}"
        for importer, name, line in private_imports(imports, trees)
    ]
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_the_graph_reader_sees_cycles_and_private_names() -> None:
    """The checks above can fail: a planted ring and a planted private import are reported."""
    m = ["checkpoint_tool.a.x", "checkpoint_tool.a.__init__", "checkpoint_tool.b.y"]
    resolver = Resolver(m)
    src = {
        "checkpoint_tool.a.x": "from checkpoint_tool.b.y import _hidden\n",
        "checkpoint_tool.b.y": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from checkpoint_tool.a import x\n"
            "def f():\n    from ..a import thing\n"
        ),
        "checkpoint_tool.a.__init__": "",
    }
    trees = {k: ast.parse(v) for k, v in src.items()}
    imports = [i for k, t in trees.items() for i in resolver.imports(k, t)]
    assert package_cycles(imports) == [("checkpoint_tool", ("a", "b"))]
    assert private_imports(imports, trees) == [
        ("checkpoint_tool.a.x", "checkpoint_tool.b.y._hidden", 1)
    ]
    # without the function-level import, the TYPE_CHECKING one alone makes no ring
    trees["checkpoint_tool.b.y"] = ast.parse(src["checkpoint_tool.b.y"].split("def f")[0])
    imports = [i for k, t in trees.items() for i in resolver.imports(k, t)]
    assert package_cycles(imports) == []
