"""The aggregated call graph of a call trace (`emutrace graph`; pure: no emulator), in
uftrace 0.13's `graph` layout (cmds/graph.c print_graph_node, print_backtrace).  Times are
guest instructions.  Memory grows with the distinct call paths, not the trace's length.

* Without FUNC: one tree under the program's name, the calls merged by call path; each node
  shows how often that path was taken and the time spent in it.
* With FUNC: the tree under every outermost call of FUNC (a recursive call inside an open
  call of FUNC is a node of the tree, not a new root), and before it the distinct call paths
  (backtraces) that led to those calls, newest first as uftrace lists them.
* A node's children are in first-seen order; a node with more than one child indents its
  children one level (`+-`), a single child stays in its parent's column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from emutrace.trace.events import Entry, Exit, Record


@dataclass
class Node:
    name: str
    calls: int = 0
    total: int = 0
    children: dict[str, Node] = field(default_factory=dict)


@dataclass
class Backtrace:
    path: tuple[tuple[str, int], ...]  # (name, address) from the outermost frame to FUNC
    hits: int = 0
    time: int = 0


@dataclass
class Graph:
    root: Node
    backtraces: dict[tuple[int, ...], Backtrace] = field(default_factory=dict)


def call_graph(records: Iterable[Record], symbolize: Callable[[int], str],
               func: str | None, program: str) -> Graph:
    """The graph under every outermost call of `func`, or under the whole program."""
    root = Node(func if func is not None else program, calls=1 if func is None else 0)
    graph = Graph(root)
    path: list[tuple[str, int]] = []  # (name, address) of the open frames
    nodes: list[Node | None] = []  # each open frame's graph node (None: outside the graph)
    traces: list[Backtrace | None] = []  # the backtrace a root call of FUNC counts in
    for rec in records:
        if isinstance(rec, Entry):
            name = symbolize(rec.func)
            parent = nodes[-1] if nodes else (root if func is None else None)
            trace = None
            node: Node | None = None
            if parent is not None:
                node = parent.children.get(name)
                if node is None:
                    node = parent.children[name] = Node(name)
            elif name == func:
                node = root
                key = (*(a for _n, a in path), rec.func)
                trace = graph.backtraces.get(key)
                if trace is None:
                    trace = graph.backtraces[key] = Backtrace((*path, (name, rec.func)))
            path.append((name, rec.func))
            nodes.append(node)
            traces.append(trace)
        elif isinstance(rec, Exit) and nodes:
            path.pop()
            node = nodes.pop()
            trace = traces.pop()
            if node is None:
                continue
            node.calls += 1
            node.total += rec.duration
            if func is None and not nodes:
                root.total += rec.duration
            if trace is not None:
                trace.hits += 1
                trace.time += rec.duration
    return graph


_WIDTH = 13  # the time column


def graph_lines(graph: Graph, func: str | None) -> list[str]:
    root = graph.root
    if root.calls == 0:
        return []
    lines = [f"# Function Call Graph for '{root.name}'"]
    if func is not None:
        lines.append("=============== BACKTRACE ===============")
        for i, bt in enumerate(reversed(graph.backtraces.values())):
            lines.append(f" backtrace #{i}: hit {bt.hits}, time {bt.time} insns")
            lines += [f"   [{j}] {name} ({addr:#x})" for j, (name, addr) in enumerate(bt.path)]
            lines.append("")
    lines.append("========== FUNCTION CALL GRAPH ==========")
    lines.append(f"# {'TOTAL [insns]':>{_WIDTH - 2}}   FUNCTION")
    mask: dict[int, bool] = {}

    def indent(depth: int, line: bool) -> str:
        last = max((i for i in range(depth) if line and mask.get(i)), default=-1)
        out = []
        for i in range(depth):
            if not line or i < last:
                out.append(" | " if mask.get(i) else "   ")
            else:
                out.append(" +-" if i == last else "---")
        return "".join(out)

    def visit(node: Node, parent: Node | None, depth: int, needs_line: bool) -> None:
        lines.append(f"{node.total:>{_WIDTH}} : {indent(depth, needs_line)}"
                     f"({node.calls}) {node.name}")
        orig = depth
        many = len(node.children) > 1
        if many:
            mask[depth] = True
            depth += 1
        # the last of several siblings clears its parent's bar
        if (parent is not None and len(parent.children) > 1 and orig > 0
                and list(parent.children.values())[-1] is node):
            mask[orig - 1] = False
        children = list(node.children.values())
        for i, child in enumerate(children):
            visit(child, node, depth, many)
            if i != len(children) - 1:
                lines.append(f"{'':>{_WIDTH}} : {indent(depth, False)}")
        mask[orig] = False

    visit(root, None, 0, False)
    lines.append("")
    return lines
