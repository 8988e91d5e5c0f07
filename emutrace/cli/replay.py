"""`emutrace replay -d DIR`: the call graph of a recording, in the layout `emutrace run`
prints (trace/format.py), with uftrace's filter options."""

from __future__ import annotations

import argparse
import sys

from emutrace.cli import options
from emutrace.isa import by_name
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
        lines = list(records)  # read whole first: a damaged file fails before any output
        names = {symbolize(r.func) for r in lines}
        start = args.start if args.start in names else None
        opts = ReplayOptions(filters=tuple(args.filter), notrace=tuple(args.notrace),
                             depth=args.depth, start=start,
                             word_bits=8 * by_name(isa).identity.word_size if isa else 64)
        sys.stdout.writelines(line + "\n" for line in iter_replay_lines(lines, symbolize, opts))
        return 0
