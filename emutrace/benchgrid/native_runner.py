"""`emutrace bench --target native`: every mechanism run natively (ptrace, this host) beside
the untraced native run, and once under emulation for the counters the cost model predicts
from (`emutrace.cost.check` does the arithmetic).

Rounds as in `runner.py`: every cell of a row runs once per round, in turn, times are
medians.  A native cell's time is measured in two parts: `NativeProcess(...)` (fork, execve,
stopped at the first instruction, the backend armed: entry's probes are written here) and
`run()` (the program to its end, reaped).  The fork of this large Python process is not the
program's cost, so the untraced time is the median `run()` of `none`, and a traced time is
its median `run()` plus its arming: its median start-up minus `none`'s.

The guest's exit code must equal the untraced run's, natively and under emulation; a cell
that differs, raises or times out is an error cell (reported, no prediction).  `bts` has no
native delivery (no branch-recording PMU in this VM: `emutrace info --native`): its cells
say so.  Traces are not compared here: natively glibc's start-up follows the host's CPUID
(README, "Native runs"); tests/test_native_target.py checks the traces.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from emutrace.benchgrid.machine import guest_stdio_silenced
from emutrace.benchgrid.runner import run_once
from emutrace.benchgrid.spec import BackendSpec, Program, parse_spec
from emutrace.cost.calibrate import Sample
from emutrace.cost.check import NativeCell
from emutrace.errors import EXIT_UNSUPPORTED, EmutraceError
from emutrace.mechanisms import BACKENDS, all_descriptors, bench_specs, runs_on
from emutrace.mechanisms.settings import PTRACE_PYTHON
from emutrace.native_session import NATIVE_TARGET_BACKENDS, NativeProcess
from emutrace.session import RunConfig, RunResult


def _native_specs() -> tuple[str, ...]:
    """The bench columns natively: the mechanisms the native target runs, with the variants
    that choose a policy ("int3:strict"; a slot count is the CPU's), then those it cannot
    run (an error cell saying why: bts)."""
    def policy(spec: str) -> bool:
        name, _, variant = spec.partition(":")
        return not variant or any(variant in s.choices for s in BACKENDS[name].settings)

    runs = runs_on(PTRACE_PYTHON)
    native = tuple(s for s in bench_specs() if policy(s) and s.split(":")[0] in runs)
    return native + tuple(d.name for d in all_descriptors() if not d.runs_on(PTRACE_PYTHON))


NATIVE_SPECS = _native_specs()
# a cell's time over its rounds: the median, or the least disturbed round (the minimum: on a
# loaded machine a round waits for a CPU at every ptrace stop, never less than it costs)
STATISTICS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median,
                                                         "min": min}


@dataclass
class Timed:
    spec: BackendSpec
    start_s: list[float] = field(default_factory=list)
    run_s: list[float] = field(default_factory=list)
    exit_code: int | None = None
    stats: dict[str, int] = field(default_factory=dict)
    insns: int | None = None
    emulated_stats: dict[str, int] = field(default_factory=dict)
    emulated_insns: int | None = None
    emulated_exit: int | None = None
    error: str | None = None
    statistic: str = "median"  # a key of STATISTICS

    @property
    def start(self) -> float:
        return STATISTICS[self.statistic](self.start_s)

    @property
    def run(self) -> float:
        return STATISTICS[self.statistic](self.run_s)


@dataclass
class NativeRow:
    isa: str
    program: Program
    baseline: Timed
    cells: list[Timed]
    missing: bool = False

    def measured(self, cell: Timed) -> NativeCell | None:
        """The cell as the cost check takes it; None for an error cell."""
        base = self.baseline
        if cell.error or base.error or not cell.run_s or not base.run_s \
                or not cell.emulated_insns:
            return None
        arming = max(0.0, cell.start - base.start)
        return NativeCell(self.isa, self.program.template, cell.spec.label, base.run,
                          cell.run + arming, dict(cell.stats), dict(cell.emulated_stats),
                          cell.emulated_insns, cell.insns, len(cell.run_s))


    def sample(self, cell: Timed) -> Sample | None:
        """The cell as a calibration point (no emulated run needed); None for an error cell."""
        base = self.baseline
        if cell.error or base.error or not cell.run_s or not base.run_s:
            return None
        return Sample(base.run, cell.run + max(0.0, cell.start - base.start), dict(cell.stats))


def round_times(rows: list[NativeRow]) -> list[dict[str, object]]:
    """Every cell's per-round start-up and run times and its native counters."""
    return [{"isa": row.isa, "program": row.program.template,
             "argv": list(row.program.argv[1:]), "backend": t.spec.label,
             "start_s": list(t.start_s), "run_s": list(t.run_s), "stats": dict(t.stats),
             "error": t.error}
            for row in rows for t in (row.baseline, *row.cells)]


# after every run: a description, its seconds (None: not run), how many runs it accounts for
Tick = Callable[[str, float | None, int], None]


def native_specs(text: str) -> list[BackendSpec]:
    """--backend for the native target: `all` is NATIVE_SPECS; `:record` and `:native`
    (emulation's engine) have no meaning natively (usage errors, like unknown names)."""
    from emutrace.benchgrid.spec import parse_backends
    from emutrace.errors import UsageError

    if text.strip() == "all":
        return [parse_spec(s) for s in NATIVE_SPECS]
    specs = parse_backends(text)
    for s in specs:
        if s.backend not in (*NATIVE_TARGET_BACKENDS, "bts") or s.record \
                or s.engine != "python":
            raise UsageError(f"--target native: --backend {s.label}: natively "
                             f"{', '.join(NATIVE_SPECS)} and hwbp:N")
    return specs


def run_native_once(program: Program, spec: BackendSpec, timeout: float
                    ) -> tuple[float, float, RunResult]:
    config = RunConfig(program.path, list(program.argv[1:]), backend=spec.backend,
                       cleanup=spec.cleanup, hw_slots=spec.hw_slots, timeout=timeout)
    with guest_stdio_silenced():
        t0 = time.perf_counter()
        process = NativeProcess(config)
        t1 = time.perf_counter()
        result = process.run()
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, result


@dataclass(frozen=True)
class RowPlan:
    """One row to run: a checked program (emulated once for its counters) or a calibration
    size (`emulate=False`: native runs only)."""
    isa: str
    program: Program
    emulate: bool = True


def run_native_rows(plans: list[RowPlan], specs: list[BackendSpec], rounds: int,
                    allow_write: list[str], timeout: float, no_pmu: str, tick: Tick,
                    statistic: str = "median") -> list[NativeRow]:
    """Every row's emulated runs first, then `rounds` rounds, each running every cell of
    every row in turn: the calibration sizes and the checked programs side by side, so a
    change of the machine's load over the bench falls on all of them alike."""
    rows: list[NativeRow] = []
    for plan in plans:
        baseline = Timed(parse_spec("none"), statistic=statistic)
        cells = [Timed(s, statistic=statistic) for s in specs]
        row = NativeRow(plan.isa, plan.program, baseline, cells, missing=plan.program.missing)
        rows.append(row)
        label = f"{plan.isa} {plan.program.template}"
        if row.missing:
            for t in (baseline, *cells):
                t.error = f"n/a (missing {plan.program.path})"
            tick(label, None, (1 + len(cells)) * rounds + (1 + len(cells) if plan.emulate
                                                          else 0))
            continue
        for t in cells:
            if t.spec.backend == "bts":
                t.error = f"unsupported natively: {no_pmu}"
        for t in cells if plan.emulate else ():  # the counters the model predicts from
            if t.error is None:
                _emulated(plan.isa, plan.program, t, allow_write, timeout)
            tick(f"{label} {t.spec.label} (emulated)", None, 1)
    for _ in range(rounds):
        for row in rows:
            if row.missing:
                continue
            label = f"{row.isa} {row.program.template}"
            for t in (row.baseline, *row.cells):
                if t.error is None:
                    _native(row.program, t, row.baseline, timeout)
                tick(f"{label} {t.spec.label}",
                     t.run_s[-1] if t.run_s and not t.error else None, 1)
    for plan, row in zip(plans, rows, strict=True):
        for t in row.cells:
            if plan.emulate and t.error is None and t.emulated_exit != row.baseline.exit_code:
                t.error = (f"emulated exit code {t.emulated_exit}, native untraced "
                           f"{row.baseline.exit_code}")
    return rows


def _emulated(isa: str, program: Program, t: Timed, allow_write: list[str],
              timeout: float) -> None:
    try:
        _, result, _ = run_once(isa, program, t.spec, allow_write, timeout)
    except EmutraceError as e:  # entry on a stripped program: the backend declines it
        unsupported = "unsupported: " if e.exit_code == EXIT_UNSUPPORTED else "emulated: "
        t.error = unsupported + e.message
        return
    if result.stop.kind == "interrupted":
        raise KeyboardInterrupt  # Ctrl-C or SIGTERM ends the bench, not only this run
    if result.stop.kind != "exit":
        t.error = f"emulated: ended by {result.stop.kind}"
        return
    t.emulated_stats, t.emulated_insns = dict(result.backend_stats), result.guest_insns
    t.emulated_exit = result.exit_code


def _native(program: Program, t: Timed, baseline: Timed, timeout: float) -> None:
    try:
        start, run, result = run_native_once(program, t.spec, timeout)
    except EmutraceError as e:
        t.error = e.message
        return
    if result.stop.kind == "interrupted":
        raise KeyboardInterrupt
    if result.stop.kind != "exit":
        t.error = f"ended by {result.stop.kind}" + (
            f" after {timeout:g} s" if result.stop.kind == "timeout" else "")
        return
    if t is not baseline and result.exit_code != baseline.exit_code:
        t.error = f"exit code {result.exit_code}, untraced {baseline.exit_code}"
        return
    t.start_s.append(start)
    t.run_s.append(run)
    if t.exit_code is None:
        t.exit_code, t.stats, t.insns = result.exit_code, dict(result.backend_stats), \
            result.guest_insns
