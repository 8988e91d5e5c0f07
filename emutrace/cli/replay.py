"""`emutrace replay -d DIR`: the call graph of a recording, in the layout `emutrace run`
prints (trace/format.py), with uftrace's filter options.  It streams: memory stays bounded
whatever the recording's length; a file damaged in the middle is reported (one line, 65)
after the lines before the damage."""

from __future__ import annotations

import argparse
import sys

from emutrace.cli import options
from emutrace.cli.viewing import shown_names
from emutrace.isa import by_name
from emutrace.trace.events import Entry
from emutrace.trace.format import ReplayOptions, iter_replay_lines
from emutrace.trace.uftrace_read import load_recording
from emutrace.trace.uftrace_write import TID

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


def task_ids(text: str) -> frozenset[int]:
    """`--tid TID[,TID...]`, as uftrace spells it."""
    try:
        tids = frozenset(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TID[,TID...]") from None
    if any(t <= 0 for t in tids):
        raise argparse.ArgumentTypeError(f"{text!r}: a task id is a positive number")
    return tids


class ReplayCommand:
    name = "replay"
    help = "print the call graph of a recording made by `emutrace record`"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("-d", "--data", default="uftrace.data", metavar="DIR",
                       help="data directory (default uftrace.data)")
        options.add_filter_options(p)
        p.add_argument("-t", "--time-filter", type=time_threshold, metavar="N",
                       help="hide functions that ran fewer than N instructions, with what "
                            "they called (uftrace's units also work: 1us = 1000)")
        p.add_argument("--tid", type=task_ids, metavar="TID[,TID...]",
                       help=f"only these tasks (a recording has one task today: {TID})")
        p.add_argument("--no-args", action="store_true",
                       help="show neither arguments nor return values (as uftrace's)")
        p.add_argument("--no-retval", action="store_true", help="do not show return values")
        p.add_argument("--start", default="main", metavar="SYM",
                       help="show nothing before SYM is first entered (default: main; "
                            "everything when the recording has no SYM)")

    def __call__(self, args: argparse.Namespace) -> int:
        records, raw_names, isa = load_recording(args.data)
        symbolize = shown_names(raw_names)
        if args.tid is not None and TID not in args.tid:
            # uftrace prints nothing for tasks the recording does not have
            print(f"emutrace: {args.data}: no task {','.join(map(str, sorted(args.tid)))} "
                  f"(its task: {TID})", file=sys.stderr)
            return 0
        # the records stream (memory does not grow with the recording); a first pass reads
        # only up to SYM's first entry (the whole file when SYM is never entered)
        probe, _symbolize, _isa = load_recording(args.data)
        entered = any(isinstance(r, Entry) and symbolize(r.func) == args.start for r in probe)
        start = args.start if entered else None
        opts = ReplayOptions(filters=tuple(args.filter), notrace=tuple(args.notrace),
                             depth=args.depth, start=start, time_filter=args.time_filter,
                             show_args=not args.no_args,
                             show_retval=not (args.no_args or args.no_retval),
                             word_bits=8 * by_name(isa).identity.word_size if isa else 64)
        sys.stdout.writelines(line + "\n" for line in iter_replay_lines(records, symbolize, opts))
        return 0
