"""A cell run in a process of its own (`python -m emutrace.matrix.cell`): the task a Dask
worker runs.

A worker process hosts Dask's own threads (its event loop, heartbeats, transfers) and runs
tasks on a thread of its pool.  A traced run wants the process to itself: the timeout
watcher works only on the main thread, the guest's standard streams are pointed at
/dev/null for the whole process, and a guest's fork forks the process.  So the worker's
thread starts the cell's process and waits (a thread that waits holds no core); the trace
stays in the worker's temporary directory until it is returned, packed.

A cell's own failure (a missing program, a bad ELF, a timeout) is its `Outcome`, returned.
A cell process killed by a signal (the kernel's OOM killer, a crash of the emulator's
library) raises `CellProcessLost`, so that Dask runs the task again (its `retries`).
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from emutrace.matrix.outcome import Outcome
from emutrace.matrix.spec import Cell

GRACE = 60.0  # seconds past the cell's own --timeout before its process is killed


class CellProcessLost(Exception):
    """The cell's process died by a signal: the task fails and Dask retries it."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_isolated(cell: Cell) -> Outcome:
    limit = cell.options.timeout + GRACE if cell.options.timeout else None
    with tempfile.TemporaryDirectory(prefix="emutrace-cell-") as tmp:
        cell_file, outcome_file = Path(tmp, "cell"), Path(tmp, "outcome")
        cell_file.write_bytes(pickle.dumps(cell, protocol=pickle.HIGHEST_PROTOCOL))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "emutrace.matrix.cell", str(cell_file),
                 str(outcome_file)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                timeout=limit, cwd=cell.cwd, check=False)
        except subprocess.TimeoutExpired:
            return Outcome.failed(cell, f"no result {limit:.0f} s after the cell began: "
                                        "its process was killed")
        if done.returncode < 0:
            raise CellProcessLost(f"{cell.key}: its process was killed by "
                                  f"{_signal_name(-done.returncode)}")
        if done.returncode != 0 or not outcome_file.exists():
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            return Outcome.failed(cell, f"its process exited {done.returncode}"
                                        + (f": {lines[-1]}" if lines else ""))
        outcome: Outcome = pickle.loads(outcome_file.read_bytes())
        return outcome
