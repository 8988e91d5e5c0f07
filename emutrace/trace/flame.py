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

Output bounded by the input.  Each line repeats its whole call path, so a deep recording
of many distinct paths (a recursion 1,000 levels deep, or long names, under calls that
differ) gave output quadratic in the recording (a 640 KB recording: over 1 GB).  So:

* a call path of more than `MAX_FRAMES` frames is written as its outermost `OUTER` frames,
  one frame `[+K]` standing for the K frames left out, and its innermost frames (the
  leaf, whose self time the line counts, is always there); paths that become equal this way
  are separate lines, which flame-graph tools add up;
* a name longer than `MAX_NAME` characters is cut there and ends in `...`;
* with that, a line is at most about MAX_FRAMES × MAX_NAME characters, and the whole
  output may not pass `BUDGET_BASE` + `BUDGET_PER_RECORD` × the records read: a recording
  whose folded stacks would be longer is refused (65) before a line is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from emutrace.errors import EXIT_BAD_ELF, EmutraceError
from emutrace.trace.events import Entry, Exit, Record

MAX_FRAMES = 64  # frames of a line
OUTER = 8  # of them, the outermost kept when a path is longer
MAX_NAME = 512  # characters of a name
BUDGET_BASE = 16 << 20  # bytes of output any recording may give
BUDGET_PER_RECORD = 1024  # and per record read (64 bytes of output per byte of `.dat`)


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
    depths: list[int] = []
    outer: list[int] = []  # each node's ancestor at depth OUTER - 1 (itself if shallower)
    stacks: dict[int, list[int]] = {}  # per task (Record.tid): each task nests on its own
    task = 0
    stack: list[int] = stacks.setdefault(task, [])  # node of each open frame of `task`
    read = 0
    for rec in records:
        read += 1
        if rec.tid != task:
            task = rec.tid
            stack = stacks.setdefault(task, [])
        if isinstance(rec, Entry):
            parent = stack[-1] if stack else -1
            name = symbolize(rec.func)
            node = ids.get((parent, name))
            if node is None:
                node = ids[(parent, name)] = len(names)
                parents.append(parent)
                names.append(name if len(name) <= MAX_NAME else name[:MAX_NAME] + "...")
                depths.append(depths[parent] + 1 if parent >= 0 else 0)
                outer.append(node if depths[node] < OUTER else outer[parent])
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
        parts: list[str] = []
        inner = node
        while inner >= 0 and (depths[inner] >= OUTER or depths[node] < MAX_FRAMES):
            if len(parts) == MAX_FRAMES - OUTER - 1 and depths[node] >= MAX_FRAMES:
                parts.append(f"[+{depths[inner] - OUTER + 1}]")
                inner = outer[node]
                break
            parts.append(names[inner])
            inner = parents[inner]
        while inner >= 0:
            parts.append(names[inner])
            inner = parents[inner]
        return ";".join(reversed(parts))

    def counts() -> Iterator[tuple[int, int]]:
        todo = list(reversed(top))
        while todo:
            node = todo.pop()
            n = (time[node] - child_time[node]) // sample_time if sample_time else calls[node]
            if n > 0:
                yield node, n
            todo.extend(reversed(children[node]))

    budget = BUDGET_BASE + BUDGET_PER_RECORD * read
    size = 0
    for node, n in counts():
        size += len(path(node)) + len(str(n)) + 2
        if size > budget:
            raise EmutraceError(
                f"the flame graph would pass {budget} bytes ({BUDGET_BASE >> 20} MiB and "
                f"{BUDGET_PER_RECORD} bytes per record of the recording): too many distinct "
                f"deep call paths with long names", EXIT_BAD_ELF)
    for node, n in counts():
        yield f"{path(node)} {n}"
