"""`emutrace replay -d DIR`: the call graph of a recording, in the layout `emutrace run`
prints (trace/format.py), with uftrace's filter options.  It streams: memory stays bounded
whatever the recording's length; a file damaged in the middle is reported (one line, 65)
after the lines before the damage."""

from __future__ import annotations

import argparse
import sys

from emutrace.cli import options
from emutrace.isa import by_name
from emutrace.trace.events import Entry
from emutrace.trace.format import ReplayOptions, iter_replay_lines
from emutrace.trace.uftrace_read import load_recording


class ReplayCommand:
    name = "replay"
    help = "print the call graph of a recording made by `emutrace record`"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("-d", "--data", default="uftrace.data", metavar="DIR",
                       help="data directory (default uftrace.data)")
        options.add_filter_options(p)
        p.add_argument("--start", default="main", metavar="SYM",
                       help="show nothing before SYM is first entered (default: main; "
                            "everything when the recording has no SYM)")

    def __call__(self, args: argparse.Namespace) -> int:
        records, symbolize, isa = load_recording(args.data)
        # the records stream (memory does not grow with the recording); a first pass reads
        # only up to SYM's first entry (the whole file when SYM is never entered)
        probe, _symbolize, _isa = load_recording(args.data)
        entered = any(isinstance(r, Entry) and symbolize(r.func) == args.start for r in probe)
        start = args.start if entered else None
        opts = ReplayOptions(filters=tuple(args.filter), notrace=tuple(args.notrace),
                             depth=args.depth, start=start,
                             word_bits=8 * by_name(isa).identity.word_size if isa else 64)
        sys.stdout.writelines(line + "\n" for line in iter_replay_lines(records, symbolize, opts))
        return 0
