"""Progress of `emutrace bench`: a rich bar on a terminal (on our copy of stderr), else one
line per run, so a log shows every cell as it finishes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from emutrace.benchgrid.runner import Cell


class Reporter:
    """Progress: a rich bar on a terminal, else one line per run."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total, self.done = console, total, 0
        self.bar: Progress | None = None
        if console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                transient=True)
            self.task = self.bar.add_task("bench", total=total)

    def __enter__(self) -> Reporter:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, cell: Cell, seconds: float | None, runs: int) -> None:
        self.done += runs
        what = f"{cell.isa} {cell.program.template}" + ("" if runs > 1 else f" {cell.spec.label}")
        result = f"{seconds:.3f} s" if seconds is not None else (cell.error or "skipped")
        if self.bar is not None:
            self.bar.update(self.task, advance=runs, description=escape(what))
        else:
            self.console.print(f"[{self.done}/{self.total}] {escape(what)}: {escape(result)}")


@contextmanager
def progress_stream() -> Iterator[TextIO]:
    """Our own copy of stderr: the runs point fd 2 at /dev/null while the guest runs."""
    sys.stderr.flush()
    stream = os.fdopen(os.dup(2), "w", buffering=1)
    try:
        yield stream
    finally:
        stream.close()
