"""Folded stacks for flame graphs (`emutrace dump --flame-graph`; pure: no emulator), as
uftrace 0.13's `dump --flame-graph` writes them (cmds/dump.c print_flame_graph,
adjust_fg_time): `a;b;c N`, one line per distinct call path, in the aggregated call tree's
depth-first order (children in first-seen order).

* By default N is how often that call path was taken.
* With a sample time S (guest instructions): N = (the path's time − the time of its
  callees, each callee call counted in whole multiples of S) // S, i.e. self time in
  samples of S, where the part of a callee's call shorter than S counts for its caller.
* Lines with N = 0 are left out.

Flame-graph tools (Brendan Gregg's flamegraph.pl, speedscope, Perfetto) read this.  Memory
grows with the distinct call paths, not the trace's length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from emutrace.trace.events import Entry, Exit, Record


def folded_stacks(records: Iterable[Record], symbolize: Callable[[int], str],
                  sample_time: int = 0) -> Iterator[str]:
    ids: dict[tuple[int, str], int] = {}  # (parent node, name) -> node
    parents: list[int] = []
    names: list[str] = []
    children: list[list[int]] = []
    top: list[int] = []  # the outermost call paths
    calls: list[int] = []
    time: list[int] = []
    child_time: list[int] = []
    stack: list[int] = []  # node of each open frame
    for rec in records:
        if isinstance(rec, Entry):
            parent = stack[-1] if stack else -1
            name = symbolize(rec.func)
            node = ids.get((parent, name))
            if node is None:
                node = ids[(parent, name)] = len(names)
                parents.append(parent)
                names.append(name)
                calls.append(0)
                time.append(0)
                child_time.append(0)
                children.append([])
                (children[parent] if parent >= 0 else top).append(node)
            stack.append(node)
        elif isinstance(rec, Exit) and stack:
            node = stack.pop()
            calls[node] += 1
            time[node] += rec.duration
            if stack:
                child_time[stack[-1]] += (rec.duration // sample_time * sample_time
                                          if sample_time else rec.duration)

    def path(node: int) -> str:
        parts = []
        while node >= 0:
            parts.append(names[node])
            node = parents[node]
        return ";".join(reversed(parts))

    todo = list(reversed(top))
    while todo:
        node = todo.pop()
        n = (time[node] - child_time[node]) // sample_time if sample_time else calls[node]
        if n > 0:
            yield f"{path(node)} {n}"
        todo.extend(reversed(children[node]))
