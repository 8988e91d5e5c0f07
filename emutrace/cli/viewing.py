"""What the viewers of a data directory share (`replay`, `report`, `graph`, `dump`,
`info -d`): the `-d DIR` and `--tid` options and opening the recording
(trace/uftrace_read.py: the directory is untrusted input; every task is read unless
`--tid` chooses some), with every name shown escaped (`shown_names`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection, Iterator
from typing import NamedTuple

from emutrace.cli.options import add_demangle_option
from emutrace.discover.demangle import DEFAULT, demangling
from emutrace.isa import by_name
from emutrace.trace.events import Record
from emutrace.trace.uftrace_names import printable
from emutrace.trace.uftrace_read import load_recording, recorded_program, recording_tasks

DEFAULT_DIR = "uftrace.data"


class Recording(NamedTuple):
    records: Iterator[Record]  # read as they are consumed; every chosen task, in time order
    symbolize: Callable[[int], str]
    program: str  # the recorded program's file name
    word_bits: int  # the guest's word width (64 when the directory does not name its ISA)
    tasks: tuple[int, ...]  # the recording's task ids: `Record.tid` indexes them


def add_data_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("-d", "--data", default=DEFAULT_DIR, metavar="DIR",
                   help=f"data directory written by `emutrace record` (default {DEFAULT_DIR})")
    add_demangle_option(p)


def task_ids(text: str) -> frozenset[int]:
    """`--tid TID[,TID...]`, as uftrace spells it."""
    try:
        tids = frozenset(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TID[,TID...]") from None
    if any(t <= 0 for t in tids):
        raise argparse.ArgumentTypeError(f"{text!r}: a task id is a positive number")
    return tids


def add_task_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tid", type=task_ids, metavar="TID[,TID...]",
                   help="only these tasks (threads; `emutrace info -d DIR` lists them); a "
                        "task the recording does not have shows nothing, as in uftrace")


def open_data(path: str, tids: Collection[int] | None = None,
              demangle: str = DEFAULT) -> Recording:
    """DIR opened for reading; a bad directory is one EmutraceError naming the file.
    Names are shown by `--demangle`'s mode."""
    records, symbolize, isa = load_recording(path, as_uftrace=True, tids=tids)
    program = printable(os.path.basename(recorded_program(path) or "") or "program")
    bits = 8 * by_name(isa).identity.word_size if isa else 64
    return Recording(records, shown_names(symbolize, demangle), program, bits,
                     recording_tasks(path))


def shown_names(symbolize: Callable[[int], str],
                demangle: str = DEFAULT) -> Callable[[int], str]:
    """`symbolize` whose names are demangled by `demangle`'s mode (discover/demangle.py;
    the recording keeps them mangled) and safe on a terminal (control characters
    escaped)."""
    named = demangling(symbolize, demangle)
    return lambda addr: printable(named(addr))
