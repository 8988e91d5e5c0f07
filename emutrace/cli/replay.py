"""`emutrace replay -d DIR`: the call graph of a recording, in the layout `emutrace run`
prints (trace/format.py), with uftrace's filter options.  A recording of several tasks
(threads) is shown as uftrace's replay shows it: every task (or those of `--tid`), their
lines in time order with a TID column.  It streams: memory stays bounded whatever the
recording's length; a file damaged in the middle is reported (one line, 65) after the lines
before the damage."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import replace

from emutrace.cli import options
from emutrace.cli.patterns import unmatched
from emutrace.cli.viewing import add_task_option, shown_names
from emutrace.discover.demangle import demangled, shown_by
from emutrace.isa import by_name
from emutrace.trace.events import Entry, Record
from emutrace.trace.filters import caller_kept
from emutrace.trace.format import (
    BEFORE_RANGE,
    ReplayOptions,
    iter_replay_lines,
    iter_task_lines,
)
from emutrace.trace.syscall_events import merged, recorded_syscalls
from emutrace.trace.time_filter import time_tagged
from emutrace.trace.uftrace_read import (
    in_time_order,
    load_recording,
    load_tasks,
    recording_names,
    recording_tasks,
)

# uftrace's time units (utils/utils.c parse_time); a recording's timestamp is one guest
# instruction where uftrace expects a nanosecond (README "Recording")
_UNITS = {"ns": 1, "us": 1000, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}


def time_threshold(text: str) -> int:
    """`-t N`: instructions, or uftrace's spelling with a unit (`1.5us` = 1500)."""
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number):] or "ns"
    try:
        value = float(number) * _UNITS[unit] if unit in _UNITS and number else None
    except ValueError:
        value = None
    if value is None or value < 0 or value != value:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a number of instructions (or with a unit: ns us ms s m)")
    return int(value)


def time_range(text: str) -> tuple[int, int | None]:
    """`-r START~STOP` (either may be left out): instructions, uftrace's units (`1us`), or
    uftrace's timestamp (`0.000031270`: seconds, read as instruction counts in
    nanoseconds)."""
    start, sep, stop = text.partition("~")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected START~STOP (either may be "
                                         "left out)")

    def at(part: str) -> int:
        if "." in part and part.replace(".", "", 1).isdigit():
            seconds, _, fraction = part.partition(".")
            return int(seconds) * 10**9 + int((fraction + "0" * 9)[:9])
        return time_threshold(part)
    return at(start) if start else 0, at(stop) if stop else None


class ReplayCommand:
    name = "replay"
    help = "print the call graph of a recording made by `emutrace record`"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("-d", "--data", default="uftrace.data", metavar="DIR",
                       help="data directory (default uftrace.data)")
        options.add_filter_options(p)
        options.add_demangle_option(p)
        p.add_argument("-t", "--time-filter", type=time_threshold, metavar="N",
                       help="hide functions that ran fewer than N instructions, with what "
                            "they called (uftrace's units also work: 1us = 1000)")
        p.add_argument("-r", "--time-range", type=time_range, metavar="START~STOP",
                       help="show only the records made from START to STOP (instruction "
                            "counts, the times `-f time` would show; uftrace's units and "
                            "timestamps also work); either may be left out")
        add_task_option(p)
        p.add_argument("--no-args", action="store_true",
                       help="show neither arguments nor return values (as uftrace's)")
        p.add_argument("--no-retval", action="store_true", help="do not show return values")
        p.add_argument("--start", metavar="SYM",
                       help="show nothing before SYM is first entered (default: main; "
                            "everything when the recording has no SYM)")

    def __call__(self, args: argparse.Namespace) -> int:
        streams, raw_names, isa = load_tasks(args.data, tids=args.tid)
        if not streams:
            return 0  # uftrace prints nothing for tasks the recording does not have
        symbolize = shown_names(raw_names, args.demangle)
        names = recording_names(args.data)
        rules = options.filter_rules(args, lambda n: demangled(n, args.demangle),
                                     map(shown_by(args.demangle), names))
        given = [*(getattr(args, "filter_specs", None) or ()),
                 *([("--start", args.start)] if args.start is not None else [])]
        for warning in unmatched(given, names, args.demangle, f"the recording {args.data}",
                                 match=args.match):
            print(f"emutrace: {warning}", file=sys.stderr)
        # the records stream (memory does not grow with the recording); a first pass reads
        # only up to SYM's first entry (the whole file when SYM is never entered)
        probe, _symbolize, _isa = load_recording(args.data, tids=args.tid)
        sym = demangled(args.start or "main", args.demangle)
        entered = any(isinstance(r, Entry) and symbolize(r.func) == sym for r in probe)
        # (-r shows the range's records whatever came before them, as uftrace's replay)
        start = sym if entered and (args.time_range is None or args.start) else None
        tasks = recording_tasks(args.data)
        opts = ReplayOptions(rules=rules, depth=args.depth, start=start,
                             time_filter=args.time_filter,
                             show_args=not args.no_args,
                             show_retval=not (args.no_args or args.no_retval),
                             word_bits=8 * by_name(isa).identity.word_size if isa else 64,
                             task_ids=tasks if len(tasks) > 1 else ())
        events = recorded_syscalls(args.data)
        if events:  # `record --syscalls`: each a call of linux:NAME in its thread's task
            merging = [(task, merged(records, events, symbolize, tasks.index(task)))
                       for task, records in streams]
            streams = [(task, records) for task, (records, _named) in merging]
            symbolize = merging[0][1][1]
        if args.time_range is not None:  # -r: the records made in the range, at their depth
            streams = [(task, _in_range(records, *args.time_range))
                       for task, records in streams]
        if rules.callers:  # -C: each task's records that lead to a match
            streams = [(task, caller_kept(records, symbolize, rules))
                       for task, records in streams]
        if len(tasks) == 1:
            lines = iter_replay_lines(streams[0][1], symbolize, opts)
        else:  # each task's time filter apart, then the tasks in time order
            tagged = [time_tagged(records, args.time_filter) for _task, records in streams]
            lines = iter_task_lines(in_time_order(tagged, _time), symbolize, opts)
        sys.stdout.writelines(line + "\n" for line in lines)
        return 0


def _in_range(records: Iterable[Record], start: int, stop: int | None) -> Iterator[Record]:
    """One task's records made from start to stop, as uftrace's replay -r shows them: each
    at its depth in the whole recording, and the exits of the frames entered before start
    shown too.  The frames open at start come first, as entries the viewer does not show
    (`format.BEFORE_RANGE`), so that their exits and what the range calls nest at their
    depth."""
    before: list[Entry] = []  # the frames open when the range starts
    records = iter(records)
    for rec in records:
        if stop is not None and rec.time > stop:
            return
        if rec.time < start:
            if isinstance(rec, Entry):
                before.append(rec)
            elif before:
                before.pop()
            continue
        yield from (replace(entry, entered=BEFORE_RANGE) for entry in before)
        yield rec
        break
    for rec in records:
        if stop is not None and rec.time > stop:
            return
        yield rec


def _time(tagged: tuple[Record, bool]) -> int:
    return tagged[0].time
