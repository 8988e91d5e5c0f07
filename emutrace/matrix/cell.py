"""One cell traced in this process, its compared trace made exactly as `emutrace diff` makes
it (`cli/diff.py`: the program's own functions by DWARF, `trace/diff.py`'s `normalise`), the
run on Unicorn or, for a cell of target gdb, in qemu-user's gdb stub (`gdb_session.py`).

    python -m emutrace.matrix.cell --serve

is a *cell process* (`isolated.py`): it reads cells from its stdin and writes their outcomes
to its stdout, one after another, each a length-prefixed pickle (`frames.py`), until its
stdin ends.  A traced run is then the process's main thread, as `--timeout` and the Ctrl-C
watcher need (`target/unicorn_run.py`), and its standard streams, signal mask and forks are
its own, not those of the Dask worker that asked; one process serves many cells, so the
interpreter's start and emutrace's imports are paid once, not per cell (as in `--workers 0`,
where this process runs every cell).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from emutrace.benchgrid.machine import guest_stdio_silenced
from emutrace.cli.diff import Selection, _types
from emutrace.discover.demangle import DEFAULT, demangled, demangling
from emutrace.discover.symbols import read_symbols
from emutrace.errors import EmutraceError
from emutrace.matrix.frames import read_frame, write_frame
from emutrace.matrix.outcome import Outcome
from emutrace.matrix.spec import GDB, Cell
from emutrace.matrix.tracefile import trace_text
from emutrace.session import Process, RunConfig, RunResult
from emutrace.trace.diff import normalise

# how a run may end and still be compared; any other end is the cell's error
_COMPARED_ENDS = ("exit", "max_insns", "signal")


def where() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def _working_directory(path: str) -> Iterator[None]:
    here = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(here)


def trace_cell(cell: Cell) -> Outcome:
    """The cell's outcome: its compared trace, or the one line of why there is none."""
    try:
        with _working_directory(cell.cwd):
            return _trace(cell)
    except EmutraceError as e:
        return Outcome.failed(cell, e.message, where())
    except OSError as e:
        return Outcome.failed(cell, f"{e.filename or cell.cwd}: {e.strerror or e}", where())


def _trace(cell: Cell) -> Outcome:
    opts = cell.options
    program = Path(cell.argv[0])
    if not program.is_file():
        return Outcome.failed(cell, f"{program}: no such file", where())
    config = RunConfig(program=cell.argv[0], args=cell.argv[1:], arch=cell.isa,
                       backend=cell.backend_name, **cell.settings, max_insns=opts.max_insns,
                       timeout=opts.timeout, engine=cell.engine, env=dict(cell.env))
    start = time.perf_counter()
    with guest_stdio_silenced():
        result = _run(config, cell.target)
    seconds = time.perf_counter() - start
    if result.stop.kind not in _COMPARED_ENDS:
        return Outcome.failed(cell, f"the run ended by {result.stop.kind} (exit status "
                                    f"{result.exit_code})", where())
    name = demangling(read_symbols(result.image).namer(result.image.isa.code_mask), DEFAULT)
    own, returns = _types(result.image.path, DEFAULT)
    select = Selection(own, re.compile(opts.keep) if opts.keep else None,
                       re.compile(opts.drop) if opts.drop else None, opts.all_functions)
    trace = normalise(result.records, name, select, demangled(opts.start, DEFAULT),
                      result.exit_code, opts.values,
                      8 * result.image.isa.identity.word_size, returns)
    calls = sum(1 for t in trace.tokens if t.kind == "call")
    return Outcome.traced(cell, trace_text(trace), calls, result.exit_code, seconds, where())


def _run(config: RunConfig, target: str) -> RunResult:
    """The traced run on the cell's target: Unicorn, or qemu-user's gdb stub (its process
    shares this one's standard streams, silenced by the caller)."""
    if target == GDB:
        from emutrace.gdb_session import GdbProcess
        return GdbProcess(config).run()
    return Process(config, warn=lambda m: None).run()


def serve() -> int:
    """Cells from stdin, outcomes to stdout, until stdin ends.  The two pipes are moved off
    descriptors 0 and 1 first (a guest's run points those at /dev/null: `trace_cell`)."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    while (cell := read_frame(requests)) is not None:
        assert isinstance(cell, Cell)
        try:
            outcome = trace_cell(cell)
        except Exception as e:  # a bug of ours: the cell's error, one line
            outcome = Outcome.failed(cell, f"internal error: {type(e).__name__}: {e}",
                                     where())
        write_frame(replies, outcome)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: python -m emutrace.matrix.cell --serve")
    sys.exit(serve())
