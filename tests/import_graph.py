"""The import graph of a Python package, read with `ast` (nothing is imported), and the
three rules tests/test_structure.py holds the package to: no cycle, no upward import, no
emulator in a pure layer.

What counts as an import of module S:

* every ``import X`` and ``from X import Y`` anywhere in S: at module level, inside a
  function or a method, inside ``try``/``if`` — an import in a function body runs later,
  but it runs, so it is as much a dependency as one at the top;
* ``importlib.import_module("X")`` and ``__import__("X")`` with a literal name (a name
  computed at run time — a registry loading its plug-ins by name — is data, not an edge);
* relative imports resolved against S's package; ``from P import M`` is an import of the
  module P.M when P/M.py exists, otherwise of P (the name comes from P's ``__init__``);
* an import of P.M is not also counted as one of P's ``__init__``: Python runs it first,
  but a package's face hands names on and is checked on its own imports.

An import inside ``if TYPE_CHECKING:`` is kept with ``typing_only=True``.  It never runs,
so it cannot make an import cycle and is left out of the cycle rule; it is still a
dependency of the code on the module it names, so the layer rule and the emulator rule
count it like any other import (a type from a higher layer is an upward dependency).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    """One module's text; a package's ``__init__`` resolves relative imports from itself."""
    text: str
    is_package: bool = False


@dataclass(frozen=True)
class Import:
    """Module `importer` names `imported` (a dotted name, of this package or not) at `line`."""
    importer: str
    imported: str
    line: int
    typing_only: bool = False

    def where(self) -> str:
        kind = " (TYPE_CHECKING)" if self.typing_only else ""
        return f"{self.importer}:{self.line} -> {self.imported}{kind}"


def read_package(root: Path, package: str) -> dict[str, Source]:
    """Every module of `package` (the directory root/package), by dotted name."""
    sources: dict[str, Source] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        sources[".".join(parts)] = Source(path.read_text(encoding="utf-8"), is_package)
    return sources


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _literal_import_call(node: ast.Call) -> str | None:
    """The module a call ``importlib.import_module("X")`` / ``__import__("X")`` loads."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _statements(tree: ast.AST, typing_only: bool = False
                ) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under `tree` with whether it sits under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for body in child.body:
                yield body, True
                yield from _statements(body, True)
            for other in child.orelse:
                yield other, typing_only
                yield from _statements(other, typing_only)
            continue
        yield child, typing_only
        yield from _statements(child, typing_only)


def _absolute(module: str, source: Source, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if source.is_package else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, source: Source, modules: Collection[str] = ()) -> list[Import]:
    """What `module` imports, as dotted names; `modules` (the package's) decides whether
    ``from P import M`` names the module P.M."""
    found: list[Import] = []
    tree = ast.parse(source.text, filename=module)
    for node, typing_only in _statements(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, source, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.append(sub if sub in modules else base)
        elif isinstance(node, ast.Call):
            literal = _literal_import_call(node)
            names = [literal] if literal else []
        line = getattr(node, "lineno", 0)
        found.extend(Import(module, name, line, typing_only) for name in names)
    return found


def owner(name: str, modules: Collection[str]) -> str | None:
    """The module of the package that an imported dotted name lands in (the longest known
    prefix), or None for a name outside the package."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


@dataclass(frozen=True)
class Graph:
    """The package's modules and every import between them (outside imports kept apart)."""
    modules: frozenset[str]
    internal: tuple[Import, ...]   # imported is a module of the package
    external: tuple[Import, ...]   # imported is outside the package, as written

    @classmethod
    def of(cls, sources: Mapping[str, Source]) -> Graph:
        modules = frozenset(sources)
        internal: list[Import] = []
        external: list[Import] = []
        for module, source in sorted(sources.items()):
            for imp in imports_of(module, source, modules):
                target = owner(imp.imported, modules)
                if target is None:
                    external.append(imp)
                elif target != module:
                    internal.append(Import(module, target, imp.line, imp.typing_only))
        # `from M import a, b` is one import of M on its line
        return cls(modules, tuple(dict.fromkeys(internal)),
                   tuple(dict.fromkeys(external)))


# --- the rules -------------------------------------------------------------------------

def _components(nodes: Iterable[str], edges: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative) of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(edges.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        result.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges.get(child, ()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(result)


def _shortest_cycle(start: str, members: set[str], edges: Mapping[str, Sequence[str]]
                    ) -> list[str]:
    """The shortest path start -> ... -> start inside one component (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in edges.get(node, ()):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start]


def cycles(graph: Graph) -> list[str]:
    """Each import cycle (a strongly connected group of modules) as one closed path, with
    every import that ties the group and its line.  ``TYPE_CHECKING`` imports never run and
    are left out."""
    lines: dict[tuple[str, str], list[int]] = {}
    for imp in graph.internal:
        if not imp.typing_only:
            lines.setdefault((imp.importer, imp.imported), []).append(imp.line)
    edges: dict[str, list[str]] = {}
    for importer, imported in sorted(lines):
        edges.setdefault(importer, []).append(imported)
    reports = []
    for component in _components(graph.modules, edges):
        members = set(component)
        path = _shortest_cycle(component[0], members, edges)
        ties = [f"    {a} -> {b} (line {', '.join(map(str, sorted(set(lines[a, b]))))})"
                for (a, b) in sorted(lines) if a in members and b in members]
        reports.append(" -> ".join(path) + "\n" + "\n".join(ties))
    return reports


def covers(pattern: str, name: str) -> bool:
    """``"P.*"`` covers the module P and every module under it; ``"M"`` covers M alone."""
    if pattern.endswith(".*"):
        stem = pattern[:-2]
        return name == stem or name.startswith(stem + ".")
    return name == pattern


def _covered(patterns: Iterable[str], name: str) -> bool:
    return any(covers(p, name) for p in patterns)


@dataclass(frozen=True)
class Layers:
    """A layer order, bottom first.  Each layer is a tuple of patterns (see `covers`); a
    module belongs to the layer of the most specific pattern that covers it (the longest
    name; a bare name before "P.*" of the same P).  A module may import its own layer and
    the layers below it."""
    order: tuple[tuple[str, ...], ...]

    def of(self, module: str) -> int | None:
        best: tuple[tuple[int, bool], int] | None = None
        for level, layer in enumerate(self.order):
            for pattern in layer:
                exact = not pattern.endswith(".*")
                rank = (len(pattern.removesuffix(".*")), exact)
                if covers(pattern, module) and (best is None or rank > best[0]):
                    best = (rank, level)
        return None if best is None else best[1]

    def name(self, level: int) -> str:
        return " ".join(self.order[level])


def unplaced(graph: Graph, layers: Layers) -> list[str]:
    """Modules that no layer covers: every module has a declared place."""
    return sorted(m for m in graph.modules if layers.of(m) is None)


def unused(graph: Graph, layers: Layers) -> list[str]:
    """Patterns that cover no module: a layer table that names what is gone."""
    return [p for layer in layers.order for p in layer
            if not any(covers(p, m) for m in graph.modules)]


def upward(graph: Graph, layers: Layers) -> list[str]:
    """Every import of a module in a higher layer than the importer's."""
    found = []
    for imp in graph.internal:
        low, high = layers.of(imp.importer), layers.of(imp.imported)
        if low is not None and high is not None and high > low:
            found.append(f"{imp.where()}: layer '{layers.name(low)}' imports "
                         f"layer '{layers.name(high)}'")
    return found


def impure(graph: Graph, pure: Sequence[str], may_import: Sequence[str],
           emulators: Sequence[str]) -> list[str]:
    """Imports that take a module covered by `pure` out of the pure part: a module of the
    package covered neither by `pure` nor by `may_import`, or an outside name covered by
    `emulators`."""
    found = []
    for imp in graph.internal:
        if _covered(pure, imp.importer) and not _covered((*pure, *may_import), imp.imported):
            found.append(f"{imp.where()}: a pure layer imports a module that is not pure")
    for imp in graph.external:
        if _covered(pure, imp.importer) and _covered(emulators, imp.imported):
            found.append(f"{imp.where()}: a pure layer imports an emulator")
    return found
