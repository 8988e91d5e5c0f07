"""Running the grid: one row per (ISA, program), one cell per backend spec plus the `none`
baseline, every cell in this process.

Timing: wall clock (perf_counter) around building the Process and running it, since a
backend's start-up work (probes written at start, discovery) is part of what it costs.  This
machine is noisy, so with N rounds every cell of a row runs once per round, in turn, and a
cell's time is the median of its rounds; its slowdown is that median over the median of the
row's `none` cell, never over a time taken at another moment.

A tracing backend that refuses a program it declares it cannot trace (`Unsupported`, e.g.
`entry` on a binary without a symbol table) gives an "unsupported" cell: reported, not a
failure.  Any other exception is an "error" cell.

Checks, per row: the guest's exit code must equal the `none` run's, and the canonical call
trace (`trace.agreement.agreement_text`: names from the symbol table, `name+0xOFF` for a
frame entered inside a function) of every tracing cell must equal the reference cell's:
`step` when it ran, else the first tracing cell.  `entry` sees function entries only: on the
ISAs whose capability table says so it is compared with frames not entered at a named entry
dropped on both sides (the documented exception in `trace/agreement.py`).  The trace of the
first round is the one compared; later rounds only time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from emutrace.benchgrid.board import BoardRun, run_on_board
from emutrace.benchgrid.machine import guest_stdio_silenced
from emutrace.benchgrid.spec import NONE_SPEC, BackendSpec, Program
from emutrace.discover.symbols import read_symbols
from emutrace.errors import EXIT_UNSUPPORTED, EmutraceError
from emutrace.isa import by_name
from emutrace.mechanisms.settings import settings_of
from emutrace.session import Process, RunConfig, RunResult
from emutrace.trace.agreement import agreement_text, entries_only
from emutrace.trace.events import Entry, Record
from emutrace.trace.uftrace_read import load_recording
from emutrace.trace.uftrace_write import sink_for_image

REFERENCE_BACKEND = "step"


@dataclass
class Cell:
    isa: str
    program: Program
    spec: BackendSpec
    seconds: list[float] = field(default_factory=list)
    exit_code: int | None = None
    guest_insns: int | None = None
    calls: int | None = None  # Entry records: calls traced
    stats: dict[str, int] = field(default_factory=dict)
    trace: str | None = None  # canonical trace of the first round (tracing cells)
    entry_trace: str | None = None  # the same, frames entered at named entries only
    error: str | None = None  # the run raised: what
    # "ok", "FAIL", "error", "unsupported" (the backend refuses the program), "n/a" (missing
    # program); the baseline: "baseline"
    agreement: str = "ok"
    problems: list[str] = field(default_factory=list)  # why FAIL
    recorded_records: int | None = None  # `:record` cells: records written, bytes of .dat
    recorded_bytes: int | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


@dataclass
class Row:
    isa: str
    program: Program
    cells: list[Cell]  # baseline first
    missing: bool = False

    @property
    def baseline(self) -> Cell:
        return self.cells[0]

    def slowdown(self, cell: Cell) -> float | None:
        base, mine = self.baseline.median, cell.median
        if base is None or mine is None or base <= 0 or cell.error or self.baseline.error:
            return None
        return mine / base


def run_once(isa: str, program: Program, spec: BackendSpec, allow_write: list[str],
             timeout: float, board: BoardRun | None = None
             ) -> tuple[float, RunResult, Recorded | None]:
    if board is not None:
        return run_on_board(board, program, spec, timeout)
    config = RunConfig(program.path, list(program.argv[1:]), arch=isa, backend=spec.backend,
                       **settings_of(spec),
                       allow_write=allow_write, timeout=timeout, engine=spec.engine)
    if spec.record:
        return record_once(config)
    with guest_stdio_silenced():
        start = time.perf_counter()
        result = Process(config, warn=lambda m: None).run()
        seconds = time.perf_counter() - start
    return seconds, result, None


@dataclass
class Recorded:
    """What a `:record` run wrote: records, bytes of `1.dat`, and the records read back."""
    records: int
    bytes: int
    read_back: list[Record]


def record_once(config: RunConfig) -> tuple[float, RunResult, Recorded]:
    """The run streaming into a data directory as `emutrace record` does (the time includes
    writing and closing it); the records are read back afterwards (not timed) for the
    agreement check, so a `:record` cell also checks the writer and the reader."""
    with tempfile.TemporaryDirectory(prefix="emutrace-bench-") as tmp, guest_stdio_silenced():
        start = time.perf_counter()
        process = Process(config, warn=lambda m: None)
        sink = sink_for_image(tmp, process.image, [config.program, *config.args])
        process.sink = sink
        status = 0
        try:
            result = process.run()
            status = result.exit_code
        finally:
            sink.close(status)
        seconds = time.perf_counter() - start
        records, _symbolize, _isa = load_recording(tmp)
        recorded = Recorded(sink.count, sink.size, list(records))
    return seconds, result, recorded


def record_first(cell: Cell, result: RunResult, recorded: Recorded | None = None) -> None:
    cell.exit_code = result.exit_code
    cell.guest_insns = result.guest_insns
    cell.stats = dict(result.backend_stats)
    if recorded is not None:
        cell.recorded_records, cell.recorded_bytes = recorded.records, recorded.bytes
    if cell.spec.traces:
        records = recorded.read_back if recorded is not None else result.records
        cell.calls = sum(1 for r in records if isinstance(r, Entry))
        symbols, mask = read_symbols(result.image), result.image.isa.code_mask
        cell.trace = agreement_text(records, symbols, mask)
        cell.entry_trace = agreement_text(records, symbols, mask, entries_only=True)


# after every run: the cell, its seconds (None: not run), how many runs that accounts for
Progress = Callable[[Cell, float | None, int], None]


def run_row(isa: str, program: Program, specs: list[BackendSpec], rounds: int,
            allow_write: list[str], timeout: float, progress: Progress,
            board: BoardRun | None = None) -> Row:
    cells = [Cell(isa, program, spec) for spec in (NONE_SPEC, *specs)]
    row = Row(isa, program, cells, missing=program.missing)
    if row.missing:
        for cell in cells:
            cell.agreement = "n/a"
            cell.error = f"n/a (missing {program.path})"
        progress(cells[0], None, len(cells) * rounds)
        return row
    for round_no in range(rounds):
        for cell in cells:
            if cell.error:
                progress(cell, None, 1)
                continue
            try:
                seconds, result, recorded = run_once(isa, program, cell.spec, allow_write,
                                                     timeout, board)
            except EmutraceError as e:
                # a backend that declares it cannot trace this program (entry on a stripped
                # binary) is reported as such; any other refusal is an error
                unsupported = e.exit_code == EXIT_UNSUPPORTED and cell.spec.traces
                cell.error = f"{'unsupported: ' if unsupported else ''}{e.message}"
                cell.agreement = "unsupported" if unsupported else "error"
                progress(cell, None, 1)
                continue
            except Exception as e:  # noqa: BLE001 - one broken cell must not stop the grid
                cell.error = f"{type(e).__name__}: {getattr(e, 'message', e)}"
                cell.agreement = "error"
                progress(cell, None, 1)
                continue
            cell.seconds.append(seconds)
            if round_no == 0:
                record_first(cell, result, recorded)
            progress(cell, seconds, 1)
    check(row)
    return row


def check(row: Row) -> None:
    """Mark cells FAIL whose exit code or canonical trace disagrees (see the module doc)."""
    base = row.baseline
    base.agreement = "error" if base.error else "baseline"
    tracing = [c for c in row.cells[1:] if not c.error]
    for cell in tracing:
        if base.error is None and cell.exit_code != base.exit_code:
            cell.agreement = "FAIL"
            cell.problems.append(f"exit code {cell.exit_code}, `none` exited {base.exit_code}")
    reference = next((c for c in tracing if c.spec.label == REFERENCE_BACKEND),
                     tracing[0] if tracing else None)
    if reference is None:
        return
    for cell in tracing:
        isa = by_name(row.isa)
        only = entries_only(cell.spec.backend, isa) or entries_only(reference.spec.backend, isa)
        want = reference.entry_trace if only else reference.trace
        got = cell.entry_trace if only else cell.trace
        if cell is reference or got == want:
            continue
        cell.agreement = "FAIL"
        cell.problems.append(f"trace differs from {reference.spec.label}'s: "
                             + first_difference(want or "", got or ""))


def first_difference(want: str, got: str) -> str:
    a, b = want.splitlines(), got.splitlines()
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"line {i + 1}: expected {x.strip()!r}, got {y.strip()!r}"
    if len(a) != len(b):
        i = min(len(a), len(b))
        extra = (a if len(a) > len(b) else b)[i].strip()
        which = "expected" if len(a) > len(b) else "got extra"
        return f"line {i + 1}: {which} {extra!r} ({len(a)} vs {len(b)} lines)"
    return "identical lines, different text"
