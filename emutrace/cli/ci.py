"""`emutrace ci MATRIX.toml`: cross-ISA regression CI — every cell of a matrix of programs ×
ISAs × backends traced, each cell's compared trace checked against its baseline and against
the other ISAs', reported as JUnit XML and a Markdown summary (docs/ci.md).

The work is in `emutrace.matrix` (spec, cells, engine, verdicts, reports).  The cells run on
Dask: a local cluster of `--workers` processes by default, an existing cluster with
`--scheduler ADDRESS`, or in this process with `--workers 0`.  A cell traces its program on
Unicorn, or in qemu-user's gdb stub where the matrix's `target` says gdb: that one runs
unconfined, and only with `--unconfined` (as `run --target gdb` asks).

Exit status: 0 every cell passed; 1 a cell differs (from its baseline or the other ISAs) or
has no baseline; 2 no difference but a cell could not run; 64 bad usage; 65 a bad matrix
file; 66 no matrix file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from emutrace.environment import user_environment
from emutrace.errors import OutputError, UsageError
from emutrace.matrix.engine import run_here, run_on_dask
from emutrace.matrix.junit import junit_xml
from emutrace.matrix.outcome import Outcome
from emutrace.matrix.spec import GDB, Cell, read_matrix
from emutrace.matrix.summary import headline, summary_markdown
from emutrace.matrix.verdict import ERROR, FAIL, TraceStore, verdicts

EXIT_PASSED, EXIT_DIFFERENT, EXIT_CELL_ERROR = 0, 1, 2


class Progress:
    """One line per finished cell; on a terminal, one line rewritten in place."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream, self.done = total, stream, 0
        self.tty = stream.isatty()

    def __call__(self, cell: Cell, outcome: Outcome) -> None:
        self.done += 1
        result = f"{outcome.calls} calls, {outcome.seconds:.2f} s" if outcome.ok else \
            f"could not run: {outcome.error}"
        line = f"[{self.done}/{self.total}] {cell.key}: {result}"
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r\x1b[K" + line[:width])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.tty and self.done:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


class CiCommand:
    name = "ci"
    help = "run a matrix of programs x ISAs x backends against baselines (JUnit, Markdown)"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.epilog = ("exit status: 0 every cell passed; 1 a cell differs from its baseline "
                    "or from the other ISAs (or has no baseline); 2 no difference but a cell "
                    "could not run; 64 bad usage; 65 bad matrix file; 66 no matrix file.  "
                    "The matrix file's format: docs/ci.md.")
        p.add_argument("matrix", metavar="MATRIX.toml", help="the matrix file")
        p.add_argument("-o", "--output", default="emutrace-ci", metavar="DIR",
                       help="where junit.xml, summary.md and traces/ are written "
                            "(default emutrace-ci)")
        p.add_argument("--workers", type=int, default=None, metavar="N",
                       help="local Dask worker processes (default: one per core); 0: run "
                            "the cells in this process, one after another, without Dask")
        p.add_argument("--scheduler", metavar="ADDRESS",
                       help="run on the Dask cluster of this scheduler (tcp://host:8786); "
                            "its workers need emutrace and the programs at the same paths")
        p.add_argument("--update-baselines", action="store_true",
                       help="write every traced cell's trace as its baseline")
        p.add_argument("--unconfined", action="store_true",
                       help="let the cells of target gdb run: qemu-user runs their system "
                            "calls with your rights, as `run --target gdb --unconfined`")

    def __call__(self, args: argparse.Namespace) -> int:
        if args.workers is not None and args.workers < 0:
            raise UsageError(f"--workers {args.workers}: expected 0 or more")
        if args.workers is not None and args.scheduler is not None:
            raise UsageError("--workers and --scheduler: give one (a cluster has its own "
                             "workers)")
        matrix = read_matrix(Path(args.matrix))
        if args.update_baselines and matrix.baselines is None:
            raise UsageError(f"--update-baselines: {args.matrix} names no baselines "
                             "directory ([matrix] baselines)")
        cells = matrix.cells(user_environment())
        unconfined = sorted({c.isa for c in cells if c.target == GDB})
        if unconfined and not args.unconfined:
            raise UsageError(f"{args.matrix}: the cells of target gdb ({', '.join(unconfined)}) "
                             "run unconfined (qemu-user runs their system calls with your "
                             "rights); say so with --unconfined")
        out = Path(args.output)
        store = TraceStore(out / "traces")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"{out}: {e.strerror or e}") from None
        outcomes: dict[str, Outcome] = {}
        progress = Progress(len(cells), sys.stderr)

        def on_done(cell: Cell, outcome: Outcome) -> None:
            if outcome.ok:
                try:
                    store.save(cell, outcome.text)
                except OSError as e:
                    raise OutputError(f"{store.path(cell)}: {e.strerror or e}") from None
            outcomes[cell.key] = outcome.slim()
            progress(cell, outcome)

        start = time.perf_counter()
        try:
            if args.workers == 0:
                from emutrace.matrix.cell import trace_cell
                run_here(cells, trace_cell, on_done)
                how = "in one process"
            else:
                from emutrace.matrix.isolated import run_isolated
                workers = args.workers or os.cpu_count() or 1
                run_on_dask(cells, run_isolated, on_done, workers, args.scheduler)
                how = f"Dask scheduler {args.scheduler}" if args.scheduler else \
                    f"Dask local cluster, {workers} worker{'s' if workers > 1 else ''}"
        finally:
            progress.end()
        seconds = time.perf_counter() - start
        try:
            results = verdicts(cells, outcomes, store, matrix.baselines, args.update_baselines)
            (out / "junit.xml").write_bytes(junit_xml(results, seconds))
            (out / "summary.md").write_text(
                summary_markdown(args.matrix, results, f"{how}, {seconds:.1f} s"))
        except OSError as e:
            raise OutputError(f"{getattr(e, 'filename', None) or out}: {e.strerror or e}") \
                from None
        written = " (baselines written)" if args.update_baselines else ""
        print(f"ci: {headline(results)}{written}; {out / 'junit.xml'}, {out / 'summary.md'}")
        if any(v.status == FAIL for v in results):
            return EXIT_DIFFERENT
        return EXIT_CELL_ERROR if any(v.status == ERROR for v in results) else EXIT_PASSED
