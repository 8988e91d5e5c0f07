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
* Past `MAX_INDENT` levels of indentation a line draws only the innermost ones, after
  `[+K]` (K levels left out): a line stays short however deep the tree, so the output grows
  with the nodes, not with nodes times depth.  The walk keeps its own stack: no depth is
  too deep for it.  A backtrace of more than `MAX_BACKTRACE` frames shows its outermost
  `OUTER` and its innermost frames around one line naming those left out.
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
    frame: int  # FUNC's frame in `Graph.frames`: its path is the one that led to FUNC
    hits: int = 0
    time: int = 0


@dataclass
class Frames:
    """The call paths seen, as a tree of frames (each path shares its callers' frames, so
    memory grows with the distinct paths, not with paths times depth)."""
    parents: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    addrs: list[int] = field(default_factory=list)
    ids: dict[tuple[int, int], int] = field(default_factory=dict)  # (parent, addr) -> frame

    def frame(self, parent: int, name: str, addr: int) -> int:
        frame = self.ids.get((parent, addr))
        if frame is None:
            frame = self.ids[(parent, addr)] = len(self.names)
            self.parents.append(parent)
            self.names.append(name)
            self.addrs.append(addr)
        return frame

    def path(self, frame: int) -> list[tuple[str, int]]:
        """(name, address) from the outermost frame to `frame`."""
        out = []
        while frame >= 0:
            out.append((self.names[frame], self.addrs[frame]))
            frame = self.parents[frame]
        return out[::-1]


@dataclass
class Graph:
    root: Node
    backtraces: dict[int, Backtrace] = field(default_factory=dict)  # by FUNC's frame
    frames: Frames = field(default_factory=Frames)


def call_graph(records: Iterable[Record], symbolize: Callable[[int], str],
               func: str | None, program: str) -> Graph:
    """The graph under every outermost call of `func`, or under the whole program.  Several
    tasks' records (in time order, as uftrace reads them) make one graph: the program's
    root holds each task's outermost calls, its time their sum."""
    root = Node(func if func is not None else program, calls=1 if func is None else 0)
    graph = Graph(root)
    tasks: dict[int, tuple[list[int], list[Node | None], list[Backtrace | None]]] = {}
    task = -1
    # of the current record's task (each task's calls nest on their own, `Record.tid`):
    path: list[int] = []  # the frame of each open call (with `func` only: backtraces)
    nodes: list[Node | None] = []  # each open frame's graph node (None: outside the graph)
    traces: list[Backtrace | None] = []  # the backtrace a root call of FUNC counts in
    for rec in records:
        if rec.tid != task:
            task = rec.tid
            path, nodes, traces = tasks.setdefault(task, ([], [], []))
        if isinstance(rec, Entry):
            name = symbolize(rec.func)
            parent = nodes[-1] if nodes else (root if func is None else None)
            trace = None
            node: Node | None = None
            if func is not None:
                path.append(graph.frames.frame(path[-1] if path else -1, name, rec.func))
            if parent is not None:
                node = parent.children.get(name)
                if node is None:
                    node = parent.children[name] = Node(name)
            elif name == func:
                node = root
                trace = graph.backtraces.get(path[-1])
                if trace is None:
                    trace = graph.backtraces[path[-1]] = Backtrace(path[-1])
            nodes.append(node)
            traces.append(trace)
        elif isinstance(rec, Exit) and nodes:
            if path:
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


def backtrace_lines(graph: Graph, trace: Backtrace) -> list[str]:
    """A backtrace's frames, `[j] name (address)`; a path of more than MAX_BACKTRACE
    frames shows its outermost and innermost ones around a line naming those left out."""
    path = graph.frames.path(trace.frame)
    lines = [f"   [{j}] {name} ({addr:#x})" for j, (name, addr) in enumerate(path)
             if len(path) <= MAX_BACKTRACE or j < OUTER or j >= len(path) - (MAX_BACKTRACE - OUTER)]
    if len(path) > MAX_BACKTRACE:
        lines.insert(OUTER, f"   [{OUTER}..{len(path) - (MAX_BACKTRACE - OUTER) - 1}] "
                            f"({len(path) - MAX_BACKTRACE} frames not shown)")
    return lines


_WIDTH = 13  # the time column
MAX_INDENT = 64  # tree levels drawn before a line's indentation is cut short
MAX_BACKTRACE = 64  # frames of a backtrace shown; of a longer one the outermost OUTER
OUTER = 8  # and the innermost MAX_BACKTRACE - OUTER


def graph_lines(graph: Graph, func: str | None) -> list[str]:
    root = graph.root
    if root.calls == 0:
        return []
    lines = [f"# Function Call Graph for '{root.name}'"]
    if func is not None:
        lines.append("=============== BACKTRACE ===============")
        for i, bt in enumerate(reversed(graph.backtraces.values())):
            lines.append(f" backtrace #{i}: hit {bt.hits}, time {bt.time} insns")
            lines += backtrace_lines(graph, bt)
            lines.append("")
    lines.append("========== FUNCTION CALL GRAPH ==========")
    lines.append(f"# {'TOTAL [insns]':>{_WIDTH - 2}}   FUNCTION")
    mask: dict[int, bool] = {}

    def indent(depth: int, line: bool) -> str:
        # past MAX_INDENT levels only the innermost MAX_INDENT are drawn, after `[+K]`
        # (uftrace draws them all: a line as long as the tree is deep, and output growing
        # with depth times nodes)
        first = max(0, depth - MAX_INDENT)
        last = max((i for i in range(first, depth) if line and mask.get(i)), default=-1)
        out = [f"[+{first}]"] if first else []
        for i in range(first, depth):
            if not line or i < last:
                out.append(" | " if mask.get(i) else "   ")
            else:
                out.append(" +-" if i == last else "---")
        return "".join(out)

    # a depth-first walk with its own stack (a recording may nest deeper than Python's
    # recursion limit): ("node", node, depth, needs_line, is_last_of_several),
    # ("gap", depth) between siblings, ("done", depth) after a node's children
    todo: list[tuple[str, Node | None, int, bool, bool]] = [("node", root, 0, False, False)]
    while todo:
        what, node, depth, needs_line, last_of_several = todo.pop()
        if what == "gap":
            lines.append(f"{'':>{_WIDTH}} : {indent(depth, False)}")
            continue
        if what == "done":
            mask[depth] = False
            continue
        assert node is not None
        lines.append(f"{node.total:>{_WIDTH}} : {indent(depth, needs_line)}"
                     f"({node.calls}) {node.name}")
        many = len(node.children) > 1
        if many:
            mask[depth] = True
        if last_of_several and depth > 0:  # the last of several siblings clears the bar
            mask[depth - 1] = False
        inner = depth + 1 if many else depth
        todo.append(("done", None, depth, False, False))
        children = list(node.children.values())
        for i in range(len(children) - 1, -1, -1):
            if i != len(children) - 1:
                todo.append(("gap", None, inner, False, False))
            todo.append(("node", children[i], inner, many, many and i == len(children) - 1))
    lines.append("")
    return lines
