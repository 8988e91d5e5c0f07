"""A traced run streamed into a uftrace data directory, as `emutrace record` does it for
each of its three wirings (an emulated program: record.py; `--target native`: run_native.py;
`--machine`: run_machine.py): the directory prepared by uftrace's rule, the tracer's sink
replaced by the directory's (with a progress line on a terminal) before the run, and the
directory closed after it, whatever the stop."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from emutrace.cli.progress import ProgressSink, with_progress
from emutrace.errors import UsageError
from emutrace.trace.uftrace_write import RecordSink, sink_for_image

if TYPE_CHECKING:
    from emutrace.elf import Image
    from emutrace.session import RunResult


class Recordable(Protocol):
    """A wiring loaded and ready to run (session.Process, NativeProcess, BoardMachine)."""

    image: Image
    sink: RecordSink

    def run(self) -> RunResult: ...


def prepare_dir(path: str) -> str:
    """Create DIR empty before the program runs; an existing one becomes DIR.old (uftrace's
    rule; an older DIR.old is replaced)."""
    if os.path.lexists(path):
        old = path.rstrip("/") + ".old"
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old)
        try:
            os.replace(path, old)
        except OSError as e:
            raise UsageError(f"-d {path}: cannot rename to {old}: {e.strerror}") from e
    try:
        os.mkdir(path)
    except OSError as e:
        raise UsageError(f"-d {path}: {e.strerror}") from e
    return path


def recorded(run: Recordable, path: str, cmdline: list[str],
             closes: Callable[[], bool] = lambda: True) -> RunResult:
    """`run` run with its records streamed into the prepared directory `path`; the directory
    is closed after every stop (an internal error too leaves a readable DIR) when `closes()`
    says this process owns it (a forked child leaves it to its parent)."""
    sink = with_progress(sink_for_image(path, run.image, cmdline), sys.stderr)
    run.sink = sink
    status = 0
    try:
        result = run.run()
        status = result.exit_code
        if result.stop.kind == "crash":  # the directory says it is cut short, and why
            target = sink.sink if isinstance(sink, ProgressSink) else sink
            target.stopped = f"the emulator (Unicorn) crashed with {result.stop.signal}"
    finally:
        if closes():
            sink.close(status)
    return result
