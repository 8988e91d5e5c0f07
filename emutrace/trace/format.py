"""The text call graph in uftrace `replay` layout (itself modelled on ftrace's
`function_graph`), with uftrace's filter options.

Layout (uftrace-replay(1), `-f duration`, with `-A`/`-R` style arguments and return values)::

    # DURATION [insns]   FUNCTION
                       | main(1, 0x7ffe0010) {
                   120 |   fact(10) = 3628800;
                       |   scenario_qsort() {
                    33 |     compare_ints(0x4a0010, 0x4a0014) = -1;
                    90 |   } /* scenario_qsort */
                   400 | } = 0; /* main */

* One line per entry and per exit, indented two spaces per depth level; a function that
  calls nothing shown (its entry immediately followed by its exit) takes one line,
  `name(args) = retval;`.  Past `MAX_INDENT` levels the indentation stops growing and the
  line starts with its depth instead (`[depth 5000] `): uftrace-style indentation is O(d^2)
  text, and a guest recursing 10^5 deep would otherwise make emutrace write ~10^10 bytes
  (found by the fuzz harness: a mutant recursing until `--max-insns`).
* The duration column holds the callee's duration on exit and leaf lines, blank on entry
  lines.  Durations are guest instructions (the header says `[insns]`), not time, so a rerun
  gives byte-identical text.
* Arguments and return values as uftrace's default ("auto") format prints integers: the
  word read as a signed number of the ISA's width; if it is within ±100000 it is decimal,
  otherwise lowercase hex with `0x` (a pointer); on 64-bit ISAs a value in
  (0xffff0000, 0xffffffff] is a sign-extended-looking 32-bit negative and prints as decimal,
  as uftrace does.  `show_args=False` prints `name()`; `show_retval=False` (or a return value
  that was not read) prints `} /* name */` and `name(args);`.
* Frames that did not return by their own return instruction have no return value and say
  so: `} /* name (unwound) */`, `} /* name (at exit) */`, or as leaves
  `name(args); /* unwound */`.
* A recording's several tasks (`iter_task_lines`, `emutrace replay`): their records in time
  order, each line with its task's id after the duration (`[     2]`, uftrace's TID
  column), each task nested on its own.
* A frame the kernel entered rather than a call says so on its first line: a signal
  handler `name(args) { /* signal handler */` (a leaf: `name(args); /* signal handler */`,
  `/* signal handler, unwound */` when it was left by siglongjmp), an exception vector
  `/* exception */`.

Filters: uftrace's `-F/-N/-T/-H/-C/-D/--trace` with its semantics (`trace/filters.py`:
patterns, the later option winning, the depth budget restarting at each `-F` match); a
`ReplayOptions` holds them as `rules`, or as exact `filters`/`notrace` names and `depth`.

* `time_filter` (`-t/--time-filter N`): hide frames that ran fewer than N instructions,
  with what they called (`trace/time_filter.py`).
* `start` (`--start SYM`, default `main`): nothing is shown before the first entry of SYM;
  frames already open then are never shown.  `None` shows everything.

Names come from the caller's `symbolize(addr) -> str`.  The output is a pure function of
the records and the options.

This module is the reference: `emutrace run` writes the same bytes with native/replaytext.c
(native/replaytext.py says when it does), and tests/test_run_text_native.py compares the
two, so a change to the layout here needs the same change there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from emutrace.trace.events import Record, Row, row_of
from emutrace.trace.filters import Filters, FilterState, TraceSwitch
from emutrace.trace.spill import SpillSink
from emutrace.trace.time_filter import time_tagged
from emutrace.trace.values import Value, as_value, render, shown_name

HEADER = "# DURATION [insns]   FUNCTION"
TASK_HEADER = "# DURATION [insns]      TID   FUNCTION"  # several tasks (iter_task_lines)
MAX_INDENT = 256  # levels of indentation shown; deeper lines say their depth
_DURATION_WIDTH = 18  # len("# DURATION [insns]"); the function text starts after " | "


@dataclass(frozen=True)
class ReplayOptions:
    filters: tuple[str, ...] = ()
    notrace: tuple[str, ...] = ()
    depth: int | None = None
    start: str | None = "main"
    show_args: bool = True
    show_retval: bool = True
    word_bits: int = 64
    header: bool = True
    # arguments shown per function: from DWARF or -A; others get default_args (None: all
    # the backend recorded)
    arg_counts: Mapping[str, int] = field(default_factory=dict)
    default_args: int | None = None
    # `-t N`: hide frames that ran fewer than N instructions (trace/time_filter.py)
    time_filter: int | None = None
    # a recording's task ids (`iter_task_lines`): `Record.tid` indexes them
    task_ids: tuple[int, ...] = ()
    # the command line's filter rules (trace/filters.py); None: `filters`, `notrace` and
    # `depth` as exact names
    rules: Filters | None = None

    def filter_rules(self) -> Filters:
        return self.rules if self.rules is not None else \
            Filters.of_names(self.filters, self.notrace, self.depth)


def format_value(value: int | Value | str, bits: int = 64) -> str:
    """An argument or return value as the replay shows it: a plain word in uftrace's "auto"
    format, a captured `Value` by its kind (`trace.values.render`); a `str` is a value the
    spill file's rows rendered already (trace/spill.py)."""
    if isinstance(value, str):
        return value
    return render(as_value(value, bits))


# how a frame the kernel entered is marked (Entry.entered)
_ENTERED_MARKS = {"signal": "signal handler", "trap": "exception", "resumed": "resumed"}
BEFORE_RANGE = "before"  # Entry.entered of a frame open when replay -r's range starts


class _Writer:
    """Emits lines; holds back a shown entry until it is known whether it is a leaf."""

    def __init__(self, task_ids: tuple[int, ...] = ()) -> None:
        self.lines: list[str] = []
        # (depth, call_text, mark) of a held entry; mark: how the kernel entered it, or None
        self.pending: tuple[int, str, str | None] | None = None
        self.task_ids = task_ids  # with tasks: a TID column, `task` the current line's
        self.task = self.pending_task = 0

    def _line(self, duration: str, depth: int, text: str, task: int | None = None) -> None:
        if depth > MAX_INDENT:
            text = f"[depth {depth}] {text}"
            depth = MAX_INDENT
        column = f" [{self.task_ids[self.task if task is None else task]:>6}]" \
            if self.task_ids else ""
        self.lines.append(f"{duration:>{_DURATION_WIDTH}}{column} | {'  ' * depth}{text}")

    def flush(self) -> None:
        if self.pending is not None:
            depth, call_text, mark = self.pending
            self.pending = None
            self._line("", depth, call_text + " {" + (f" /* {mark} */" if mark else ""),
                       self.pending_task)

    def entry(self, depth: int, call_text: str, mark: str | None = None) -> None:
        self.flush()
        self.pending = (depth, call_text, mark)
        self.pending_task = self.task

    def exit(self, depth: int, call_text: str, name: str, duration: int, ret: str | None,
             note: str | None) -> None:
        if self.pending is not None and self.pending[0] == depth \
                and self.pending_task == self.task:
            mark = self.pending[2]
            self.pending = None
            if mark is not None:
                note = mark if note is None else f"{mark}, {note}"
            if note is not None and ret is not None:
                text = f"{call_text} = {ret}; /* {note} */"
            elif note is not None:
                text = f"{call_text}; /* {note} */"
            elif ret is not None:
                text = f"{call_text} = {ret};"
            else:
                text = f"{call_text};"
        else:
            self.flush()
            if note is not None:
                text = f"}} /* {name} ({note}) */"
            elif ret is not None:
                text = f"}} = {ret}; /* {name} */"
            else:
                text = f"}} /* {name} */"
        self._line(str(duration), depth, text)


def replay_lines(records: Iterable[Record], symbolize: Callable[[int], str],
                 opts: ReplayOptions = ReplayOptions()) -> list[str]:
    """The call graph as lines (no trailing newlines)."""
    return list(iter_replay_lines(records, symbolize, opts))


def iter_replay_lines(records: Iterable[Record], symbolize: Callable[[int], str],
                      opts: ReplayOptions = ReplayOptions()) -> Iterator[str]:
    """The lines one by one: a trace of depth d is O(d^2) characters of indentation, so a
    writer that streams them keeps emutrace's own memory linear in the depth.

    A program with threads (records with a `tid`): one section per thread, in thread
    order, each opened by a line `# thread N` (N: the thread's number, 0 the main thread,
    n the n-th created, whose Linux tid is the pid + n) and laid out as above; `start`
    applies to the main thread, the others are shown from their first call."""
    of_thread = _threads(records)
    if of_thread is not None:
        if opts.header:
            yield HEADER
        for tid, thread_records in of_thread:
            yield f"# thread {tid}"
            yield from _replay(thread_records, symbolize, replace(
                opts, header=False, start=opts.start if tid == 0 else None))
        return
    yield from _replay(records, symbolize, opts)


def iter_task_lines(tagged: Iterable[tuple[Record, bool]], symbolize: Callable[[int], str],
                    opts: ReplayOptions) -> Iterator[str]:
    """The lines of a recording's tasks read together, as uftrace's replay shows them:
    `tagged` is (record, shown by the time filter) in time order, each task's records
    nested on their own (`Record.tid` indexes `opts.task_ids`), every line with its task's
    id after the duration (`[   tid]`); an entry is a leaf line only when the next record
    is its exit, so another task's record in between opens it as `name() {`."""
    yield from _lines(((row_of(rec), keep, rec.tid) for rec, keep in tagged), symbolize,
                      opts)


def _threads(records: Iterable[Record]) -> Iterator[tuple[int, Iterable[Record]]] | None:
    """Each thread's records in thread order, or None for one thread (or a one-pass
    stream).  A list is split in one pass; a sink that knows its threads (trace/spill.py)
    is read once per thread."""
    if isinstance(records, list):
        if not any(r.tid for r in records):
            return None
        by_thread: dict[int, list[Record]] = {}
        for rec in records:
            by_thread.setdefault(rec.tid, []).append(rec)
        return iter(sorted(by_thread.items()))
    if not isinstance(records, SpillSink) or not any(records.tids):
        return None
    return ((tid, records.of_thread(tid)) for tid in sorted(records.tids))


def _replay(records: Iterable[Record], symbolize: Callable[[int], str],
            opts: ReplayOptions) -> Iterator[str]:
    tagged: Iterable[tuple[Row, bool, int]]
    if opts.time_filter is not None and opts.time_filter > 0:
        tagged = ((row_of(rec), keep, 0)
                  for rec, keep in time_tagged(records, opts.time_filter))
    else:  # (the spill file reads C's records straight into rows)
        rows = records.rows() if isinstance(records, SpillSink) else map(row_of, records)
        tagged = ((row, True, 0) for row in rows)
    yield from _lines(tagged, symbolize, opts)


def _lines(tagged: Iterable[tuple[Row, bool, int]], symbolize: Callable[[int], str],
           opts: ReplayOptions) -> Iterator[str]:
    """(row, shown by the time filter, task) -> lines; each task nests on its own."""
    rules = opts.filter_rules()
    switch = TraceSwitch(rules.trace)  # uftrace's tracing switch: one for every task
    started = opts.start is None
    states: dict[int, FilterState] = {}
    texts: dict[int, list[str]] = {}  # per task, each open frame's "name(args)" (or "")
    state = states.setdefault(0, FilterState(rules, switch))
    stack: list[str] = texts.setdefault(0, [])
    out = _Writer(opts.task_ids)
    lines = out.lines
    if opts.header:
        lines.append(TASK_HEADER if opts.task_ids else HEADER)
    names: dict[int, str] = {}  # symbolize's answers (a trace names few functions often)
    bits, show_args, show_retval = opts.word_bits, opts.show_args, opts.show_retval
    arg_counts, default_args = opts.arg_counts, opts.default_args
    for row, long_enough, task in tagged:
        if lines:
            yield from lines
            lines.clear()
        if not long_enough:  # (-t: a short frame goes with all it called, as uftrace's)
            continue
        if task != out.task:
            out.task = task
            state = states.get(task) or states.setdefault(task, FilterState(rules, switch))
            stack = texts.setdefault(task, [])
        func = row[1]
        name = names.get(func)
        if name is None:
            name = names[func] = symbolize(func)
        if not row[0]:  # an entry: (False, func, args, entered)
            if not started and name == opts.start:
                started = True
            depth = state.enter(name, started)
            call_text = ""
            if depth is not None:
                count = arg_counts.get(name, default_args)
                values = row[2] if count is None else row[2][:count]
                args = ", ".join([format_value(a, bits) for a in values]) \
                    if show_args else ""
                # uftrace's rule: a name ending in its parameter list (--demangle=full)
                # takes no "()" when no value is shown
                shown = shown_name(name)
                call_text = shown if not args and shown.endswith(")") else f"{shown}({args})"
                if row[3] == BEFORE_RANGE:  # (its exit is shown, at its depth, as uftrace's)
                    out.flush()
                else:
                    out.entry(depth, call_text, _ENTERED_MARKS.get(row[3]))
            elif state.unmerge:
                out.flush()
            stack.append(call_text)
        else:  # an exit: (True, func, retval, duration, unwound, at_exit)
            if not stack:
                raise ValueError(f"exit without entry: {name} {row!r}")
            call_text = stack.pop()
            depth = state.leave()
            if depth is None:
                continue
            note = ("at exit" if row[5] else "unwound") if row[4] else None
            retval = row[2]
            ret = format_value(retval, bits) \
                if show_retval and retval is not None else None
            out.exit(depth, call_text, shown_name(name), row[3], ret, note)
    out.flush()
    yield from lines


def replay_text(records: Iterable[Record], symbolize: Callable[[int], str],
                opts: ReplayOptions = ReplayOptions()) -> str:
    return "".join(line + "\n" for line in replay_lines(records, symbolize, opts))
