"""Per-function totals of a call trace (`emutrace report`; pure: no emulator).  Times are
guest instructions.  Memory grows with the program's distinct functions, never with the
trace's length.

The numbers are uftrace's (0.13 `utils/report.c` report_update_node, finish_time_stat):

* `calls`: how often the function was called (every call, recursive ones too).
* `total`: the time inside the function, summed over its calls, except the calls made while
  an outer call to the same address is open (a recursion is counted once, by its outermost
  call; uftrace compares addresses, so two PLT slots named `_init` are not a recursion).
  `total_min`/`total_max` over every call; `total_avg` = the sum over every call
  (recursive ones too) / calls, in integers.
* `self`: a call's duration minus the durations of the calls it made, summed over every call;
  `self_min`/`self_max`/`self_avg` likewise.

Sorting (uftrace's `-s KEY[,KEY...]`): every key but `func` puts the largest first; `func`
sorts names in byte order; ties under all keys stay in byte order of the names, as uftrace
prints them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from emutrace.trace.events import Entry, Exit, Record

SORT_KEYS = ("total", "total_avg", "total_min", "total_max", "self", "self_avg", "self_min",
             "self_max", "call", "func")


@dataclass
class FuncStats:
    name: str
    calls: int = 0
    total: int = 0  # outermost calls only
    total_all: int = 0  # every call (for the average)
    total_min: int = -1
    total_max: int = 0
    self_time: int = 0
    self_min: int = -1
    self_max: int = 0

    @property
    def total_avg(self) -> int:
        return self.total_all // self.calls if self.calls else 0

    @property
    def self_avg(self) -> int:
        return self.self_time // self.calls if self.calls else 0

    def key(self, name: str) -> int:
        """The value sort key `name` compares (not `func`)."""
        if name == "call":
            return self.calls
        if name == "self":
            return self.self_time
        return int(getattr(self, name))

    def add(self, duration: int, own: int, recursive: bool) -> None:
        self.calls += 1
        self.total_all += duration
        if not recursive:
            self.total += duration
        self.total_min = duration if self.total_min < 0 else min(self.total_min, duration)
        self.total_max = max(self.total_max, duration)
        self.self_time += own
        self.self_min = own if self.self_min < 0 else min(self.self_min, own)
        self.self_max = max(self.self_max, own)


def function_stats(records: Iterable[Record], symbolize: Callable[[int], str]
                   ) -> list[FuncStats]:
    """One `FuncStats` per function that returned (or was closed) in `records`: the
    records of one task, or of several in any interleaving (each task's calls nest on
    their own, `Record.tid`; the totals are over every task, as uftrace's)."""
    stats: dict[str, FuncStats] = {}
    tasks: dict[int, tuple[dict[int, int], list[list]]] = {}
    task = -1
    open_count: dict[int, int] = {}  # open frames per address (recursion), of `task`
    stack: list[list] = []  # [address, time of its callees] per open frame, of `task`
    for rec in records:
        if rec.tid != task:
            task = rec.tid
            open_count, stack = tasks.setdefault(task, ({}, []))
        if isinstance(rec, Entry):
            open_count[rec.func] = open_count.get(rec.func, 0) + 1
            stack.append([rec.func, 0])
        elif isinstance(rec, Exit) and stack:
            addr, child = stack.pop()
            open_count[addr] -= 1
            name = symbolize(addr)
            s = stats.get(name)
            if s is None:
                s = stats[name] = FuncStats(name)
            s.add(rec.duration, rec.duration - child, open_count[addr] > 0)
            if stack:
                stack[-1][1] += rec.duration
    return list(stats.values())


def sort_stats(stats: list[FuncStats], keys: list[str]) -> list[FuncStats]:
    out = sorted(stats, key=lambda s: s.name.encode())
    for key in reversed(keys):
        if key == "func":
            out.sort(key=lambda s: s.name.encode())
        else:
            out.sort(key=lambda s, k=key: s.key(k), reverse=True)  # type: ignore[misc]
    return out


_W = 17  # the width of an --avg-total/--avg-self column


def report_lines(stats: list[FuncStats], avg: str | None = None) -> list[str]:
    """uftrace report's table (`--avg-total`/`--avg-self` when `avg` is "total"/"self"),
    times as instruction counts."""
    if avg is None:
        lines = ["  Total [insns]  Self [insns]       Calls  Function",
                 "  =============  ============  ==========  ===================="]
        lines += [f"  {s.total:>13}  {s.self_time:>12}  {s.calls:>10}  {s.name}" for s in stats]
        return lines
    what = "Total" if avg == "total" else "Self"
    lines = ["  " + "  ".join(f"{what} {k} [insns]".rjust(_W) for k in ("avg", "min", "max"))
             + "  Function",
             "  " + "  ".join("=" * _W for _ in range(3)) + "  ===================="]
    for s in stats:
        mean, low, high = ((s.total_avg, s.total_min, s.total_max) if avg == "total"
                           else (s.self_avg, s.self_min, s.self_max))
        lines.append(f"  {mean:>{_W}}  {low:>{_W}}  {high:>{_W}}  {s.name}")
    return lines
