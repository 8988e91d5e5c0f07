"""What the viewers of a data directory share (`report`, `graph`, `dump`, `info -d`): the
`-d DIR` option and opening the recording (trace/uftrace_read.py: the directory is untrusted
input), with every name shown escaped (`shown_names`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

from emutrace.isa import by_name
from emutrace.trace.events import Record
from emutrace.trace.uftrace_names import printable
from emutrace.trace.uftrace_read import load_recording, recorded_program

DEFAULT_DIR = "uftrace.data"


class Recording(NamedTuple):
    records: Iterator[Record]  # read as they are consumed
    symbolize: Callable[[int], str]
    program: str  # the recorded program's file name
    word_bits: int  # the guest's word width (64 when the directory does not name its ISA)


def add_data_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("-d", "--data", default=DEFAULT_DIR, metavar="DIR",
                   help=f"data directory written by `emutrace record` (default {DEFAULT_DIR})")


def open_data(path: str) -> Recording:
    """DIR opened for reading; a bad directory is one EmutraceError naming the file."""
    records, symbolize, isa = load_recording(path, as_uftrace=True)
    program = printable(os.path.basename(recorded_program(path) or "") or "program")
    bits = 8 * by_name(isa).identity.word_size if isa else 64
    return Recording(records, shown_names(symbolize), program, bits)


def shown_names(symbolize: Callable[[int], str]) -> Callable[[int], str]:
    """`symbolize` whose names are safe on a terminal (control characters escaped)."""
    return lambda addr: printable(symbolize(addr))
