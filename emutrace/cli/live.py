"""`emutrace live [options] PROGRAM [ARGS]`: `record` into a temporary directory, then
`replay` it (uftrace's `live`): the options of both — `record`'s for the run, `replay`'s
filters and display options for the text — and the directory removed at the end unless
`--keep` or `-d DIR` keeps it."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from emutrace.cli.record import RecordCommand, display_options
from emutrace.cli.replay import ReplayCommand, time_range, time_threshold
from emutrace.errors import UsageError

# run's options that shape the text trace: record refuses them, live hands them to replay
_FOR_REPLAY = {"-F": ("filter", []), "-N": ("notrace", []), "-T": ("trigger", []),
               "-H": ("hide", []), "-C": ("caller_filter", []), "--trace": ("trace", "on"),
               "--max-stack": ("max_stack", None), "--no-libcall": ("no_libcall", False),
               "-D": ("depth", None),
               "--start": ("start", None), "--tid": ("tid", None)}


class LiveCommand(RecordCommand):
    name = "live"
    help = "record PROGRAM [ARGS...] into a temporary directory, then replay it"

    def configure(self, p: argparse.ArgumentParser) -> None:
        super().configure(p)
        p.set_defaults(data=None)
        g = p.add_argument_group("live (the replay after the recording)")
        g.add_argument("--keep", action="store_true",
                       help="keep the temporary data directory (its path is printed on "
                            "stderr); -d DIR keeps DIR")
        g.add_argument("-t", "--time-filter", type=time_threshold, metavar="N",
                       help="hide functions that ran fewer than N instructions, with what "
                            "they called (as replay's -t)")
        g.add_argument("-r", "--time-range", type=time_range, metavar="START~STOP",
                       help="show only the records made from START to STOP (as replay's -r)")
        g.add_argument("--no-args", action="store_true",
                       help="show neither arguments nor return values")
        g.add_argument("--no-retval", action="store_true", help="do not show return values")

    def __call__(self, args: argparse.Namespace) -> int:
        for option, why in display_options(args):
            if option not in _FOR_REPLAY:
                raise UsageError(f"live {option}: {why}")
        record_args = argparse.Namespace(**vars(args))
        for attr, default in _FOR_REPLAY.values():
            setattr(record_args, attr, default)
        record_args.filter_specs = []
        temporary = None
        if args.data is None:
            temporary = tempfile.mkdtemp(prefix="emutrace-live-")
            record_args.data = os.path.join(temporary, "uftrace.data")
        try:
            status = RecordCommand.__call__(self, record_args)  # (a forked child ends in it)
            sys.stdout.flush()
            replay_args = argparse.Namespace(**vars(args))
            replay_args.data = record_args.data
            ReplayCommand()(replay_args)
            sys.stdout.flush()
        finally:
            if temporary is not None:
                if args.keep:
                    print(f"emutrace: live: the recording is kept in {record_args.data}",
                          file=sys.stderr)
                else:
                    shutil.rmtree(temporary, ignore_errors=True)
        return status
