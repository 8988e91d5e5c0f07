"""`emutrace dump -d DIR`: a recording converted for other tools — Chrome trace JSON
(`--chrome`: Perfetto UI, chrome://tracing), Perfetto TrackEvent protobuf (`--perfetto`),
folded stacks for flame graphs (`--flame-graph`) — or, by default, its raw records one per
line (as uftrace's plain `dump`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO

from emutrace import quantities
from emutrace.cli.viewing import add_data_option, add_task_option, open_data, shown_names
from emutrace.errors import UsageError
from emutrace.trace.events import Entry, Record
from emutrace.trace.flame import folded_stacks
from emutrace.trace.timeline import Track, chrome_json, write_perfetto
from emutrace.trace.uftrace_read import load_tasks


class DumpCommand:
    name = "dump"
    help = "convert a recording: Chrome JSON, Perfetto protobuf, folded stacks, raw records"

    def configure(self, p: argparse.ArgumentParser) -> None:
        add_data_option(p)
        add_task_option(p)
        how = p.add_mutually_exclusive_group()
        how.add_argument("--chrome", action="store_true",
                         help="Chrome trace JSON (opens in Perfetto UI and chrome://tracing)")
        how.add_argument("--perfetto", action="store_true",
                         help="Perfetto TrackEvent protobuf (binary: use -o FILE or a pipe)")
        how.add_argument("--flame-graph", action="store_true",
                         help="folded stacks (flamegraph.pl): calls per call path, or self "
                              "time with --sample-time (a path past 64 frames is cut in "
                              "the middle, a name past 512 characters at its end)")
        p.add_argument("--sample-time", type=quantities.positive_count, default=0,
                       metavar="INSNS",
                       help="--flame-graph counts self time in samples of INSNS guest "
                            "instructions instead of calls")
        p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default stdout)")
        p.add_argument("--no-args", action="store_true",
                       help="leave arguments and return values out")

    def __call__(self, args: argparse.Namespace) -> int:
        if args.sample_time and not args.flame_graph:
            raise UsageError("--sample-time only applies to --flame-graph")
        if args.perfetto and not args.output and sys.stdout.isatty():
            raise UsageError("--perfetto writes binary data: use -o FILE or a pipe")
        if not (args.perfetto or args.chrome or args.flame_graph):
            # task after task (one task's files open at a time: any number of tasks)
            streams, raw_names, _isa = load_tasks(args.data, True, args.tid,
                                                  side_by_side=False)
            out = open_output(args.output)
            try:
                _write_text(out, raw_lines(streams, shown_names(raw_names, args.demangle)))
                out.flush()
            finally:
                if out is not sys.stdout.buffer:
                    out.close()
            return 0
        records, symbolize, program, bits, tasks = open_data(args.data, args.tid, args.demangle)
        track = Track(program, bits, not args.no_args, tasks)
        out = open_output(args.output)
        try:
            if args.perfetto:
                write_perfetto(records, symbolize, track, out)
            elif args.chrome:
                _write_text(out, chrome_json(records, symbolize, track))
            else:
                _write_text(out, (line + "\n" for line in
                                  folded_stacks(records, symbolize, args.sample_time)))
            out.flush()
        finally:
            if out is not sys.stdout.buffer:
                out.close()
        return 0


def open_output(path: str | None) -> IO[bytes]:
    """FILE opened before anything is read (a bad -o is a usage error, 64), or stdout."""
    if path is None:
        return sys.stdout.buffer
    try:
        return open(path, "wb")
    except OSError as e:
        raise UsageError(f"-o {path}: {e.strerror}") from e


def _write_text(out: IO[bytes], pieces: Iterable[str]) -> None:
    for piece in pieces:
        out.write(piece.encode())


def raw_lines(tasks: Iterable[tuple[int, Iterable[Record]]],
              symbolize: Callable[[int], str]) -> Iterator[str]:
    """One line per record: time (guest instructions), task id, kind, function, address,
    depth; as uftrace's plain `dump`, task after task, each after `reading <tid>.dat`."""
    for task, records in tasks:
        yield f"reading {task}.dat\n"
        for r in records:
            kind = "entry" if isinstance(r, Entry) else "exit "
            yield (f"{r.time:>12} {task:>6}: [{kind}] {symbolize(r.func)}({r.func:x}) "
                   f"depth: {r.depth}\n")
