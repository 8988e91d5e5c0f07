"""Where the cells run: in this process one after another, or as Dask tasks — on a
`LocalCluster` of worker processes on this machine's cores (nothing to start beforehand) or
on an existing cluster given by its scheduler's address.

Each cell is one task (`Client.submit` with `retries`: a task whose cell process was lost
runs again); a worker that dies takes its tasks back to the scheduler, which gives them to
another worker (up to `distributed.scheduler.allowed-failures` deaths per task).  Results
arrive as cells finish (`as_completed`); each is handed to `on_done` once and its future
released, so this process holds one outcome at a time, not the matrix's traces.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence

from emutrace.errors import EXIT_UNSUPPORTED, EmutraceError, Unsupported
from emutrace.matrix.outcome import Outcome
from emutrace.matrix.spec import Cell

Task = Callable[[Cell], Outcome]
OnDone = Callable[[Cell, Outcome], None]

RETRIES = 2  # runs of a task beyond the first when it raises (its cell process was lost)


def run_here(cells: Sequence[Cell], task: Task, on_done: OnDone) -> None:
    """Every cell in this process, in order."""
    for cell in cells:
        on_done(cell, task(cell))


def run_on_dask(cells: Sequence[Cell], task: Task, on_done: OnDone, workers: int,
                scheduler: str | None = None) -> None:
    """Every cell as a Dask task: on `scheduler`'s cluster, or on a local cluster of
    `workers` worker processes (one thread each: a cell's run occupies a core)."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise Unsupported("ci: running cells on Dask needs the packages dask and distributed "
                          "(pip install 'emutrace[ci]'); --workers 0 runs them in this "
                          "process") from None
    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            try:
                client = stack.enter_context(Client(scheduler, timeout="20s"))
            except (OSError, TimeoutError, ValueError) as e:
                raise EmutraceError(f"--scheduler {scheduler}: {' '.join(str(e).split())}",
                                    EXIT_UNSUPPORTED) from None
        else:
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True,
                dashboard_address=":0",  # its HTTP server on a free port, not 8787
                silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        run = uuid.uuid4().hex[:12]
        cell_of = {}
        futures = []
        for number, cell in enumerate(cells):
            future = client.submit(task, cell, key=f"emutrace-cell-{run}-{number}",
                                   retries=RETRIES, pure=False)
            cell_of[future.key] = cell
            futures.append(future)
        done: set[str] = set()
        for future in as_completed(futures):
            cell = cell_of[future.key]
            try:
                outcome = future.result()
            except Exception as e:  # retries spent, or the task's worker died too often
                outcome = Outcome.failed(cell, f"{type(e).__name__}: {e}")
            future.release()
            if cell.key in done:  # as_completed yields each future once: never reached
                raise AssertionError(f"{cell.key}: finished twice")
            done.add(cell.key)
            on_done(cell, outcome)
        futures.clear()
