"""Cells run in a process apart from the Dask worker's (`python -m emutrace.matrix.cell
--serve`): the task a worker runs.

A worker process hosts Dask's own threads (its event loop, heartbeats, transfers) and runs
tasks on a thread of its pool.  A traced run wants a process to itself: the timeout watcher
works only on the main thread, the guest's standard streams are pointed at /dev/null for the
whole process, and a guest's fork forks the process.  So each worker thread keeps a *cell
process* and hands it one cell at a time (a thread that waits holds no core); the process
serves many cells, so the interpreter's start and emutrace's imports are paid once per
`CELLS_PER_PROCESS` cells, not per cell.  The trace stays in the cell process until it is
returned, packed.

A cell's own failure (a missing program, a bad ELF, a timeout) is its `Outcome`, returned.
A cell process that dies by a signal (the kernel's OOM killer, a crash of the emulator's
library) raises `CellProcessLost`, so that Dask runs the task again (its `retries`); one that
gives no answer `GRACE` seconds past the cell's own timeout is killed, and the cell fails.
A worker that dies takes its cell processes with it: their stdin ends, and they exit.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

from emutrace.matrix.frames import LENGTH, write_frame
from emutrace.matrix.outcome import Outcome
from emutrace.matrix.spec import Cell

GRACE = 60.0  # seconds past the cell's own --timeout before its process is killed
CELLS_PER_PROCESS = 200  # then a fresh process (what one run leaves behind stays bounded)


class CellProcessLost(Exception):
    """The cell's process died by a signal: the task fails and Dask retries it."""


class _Silent(Exception):
    """No answer before the deadline."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    """size bytes from fd (fewer only at its end); _Silent past the deadline."""
    data = b""
    while len(data) < size:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            raise _Silent
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            raise _Silent
        chunk = os.read(fd, size - len(data))
        if not chunk:
            break
        data += chunk
    return data


class CellProcess:
    """One `python -m emutrace.matrix.cell --serve` and the cells it has served."""

    def __init__(self) -> None:
        self.errors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "emutrace.matrix.cell", "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors)
        self.served = 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.errors):
            if stream is not None:
                stream.close()

    def last_error_line(self) -> str:
        self.errors.seek(0)
        lines = self.errors.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def run(self, cell: Cell) -> Outcome:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.served += 1
        limit = cell.options.timeout + GRACE if cell.options.timeout else None
        deadline = None if limit is None else time.monotonic() + limit
        try:
            write_frame(self.proc.stdin, cell)
            fd = self.proc.stdout.fileno()
            head = _read_exact(fd, LENGTH.size, deadline)
            data = _read_exact(fd, LENGTH.unpack(head)[0], deadline) \
                if len(head) == LENGTH.size else b""
        except _Silent:
            self.stop()
            return Outcome.failed(cell, f"no result {limit:.0f} s after the cell began: its "
                                        "process was killed")
        except BrokenPipeError:
            head = data = b""
        if len(head) == LENGTH.size and data:
            outcome: Outcome = pickle.loads(data)
            return outcome
        status = self.proc.wait()
        error = self.last_error_line()
        self.stop()
        if status < 0:
            raise CellProcessLost(f"{cell.key}: its process was killed by "
                                  f"{_signal_name(-status)}")
        return Outcome.failed(cell, f"its process exited {status}"
                                    + (f": {error}" if error else ""))


_mine = threading.local()  # per worker thread: its CellProcess


def run_isolated(cell: Cell) -> Outcome:
    """The cell in this thread's cell process (started, or restarted, as needed)."""
    process: CellProcess | None = getattr(_mine, "process", None)
    if process is None or process.proc.poll() is not None \
            or process.served >= CELLS_PER_PROCESS:
        if process is not None:
            process.stop()
        process = _mine.process = CellProcess()
    try:
        return process.run(cell)
    finally:
        if process.proc.poll() is not None:
            _mine.process = None
