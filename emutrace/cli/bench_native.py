"""`emutrace bench --target native`: the cost model checked against native runs.
Every program × ISA × mechanism runs natively under ptrace beside the untraced
native run (interleaved rounds, medians) and once under emulation for the counters the
model predicts from; writes native-cost.{csv,json,md} into --out
(`emutrace.benchgrid.native_runner`, `.native_report`, `emutrace.cost.check`).

Usage errors (64, before anything runs): no `--unconfined` (the programs run natively with
the user's rights, as `run --target native`), an ISA this host cannot run natively, a
backend with no native meaning, `--machine`.  Ctrl-C or SIGTERM ends the whole bench
(130), not only the run it interrupts.  Exit 2 when a cell could not run (an
exception, a timeout, an exit code unlike the untraced run's); bts is reported unsupported
(no branch-recording PMU), not an error.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emutrace.errors import UsageError

if TYPE_CHECKING:
    from emutrace.benchgrid.native_runner import NativeRow
    from emutrace.benchgrid.spec import Program
    from emutrace.cost.calibrate import Calibration

EXIT_CELL_ERROR = 2
# the calibration program (emutrace.cost.calibrate): a recursion {n} deep, one call and one
# return per level, in a testbin that is none of the checked programs
CALIBRATION = "testbins/{isa}/calls deep {n}"
CALIBRATION_SIZES = "100,2000"


def calibration_sizes(text: str) -> tuple[int, int]:
    try:
        small, large = (int(w) for w in text.split(","))
    except ValueError:
        small = large = 0
    if not 0 < small < large:
        raise UsageError(f"--calibration-sizes {text}: two sizes N,N, the first smaller and "
                         "both positive")
    return small, large


def checked_isas(text: str) -> list[str]:
    from emutrace.benchgrid.spec import parse_arches
    from emutrace.native_session import native_isas

    native = native_isas()
    if text.strip() == "all":
        return native
    isas = parse_arches(text)
    foreign = [isa for isa in isas if isa not in native]
    if foreign:
        raise UsageError(f"--target native: --arch {','.join(foreign)}: this host runs only "
                         f"{', '.join(native)} programs natively")
    return isas


def calibrate(rows: list[NativeRow], isas: list[str], sizes: int
              ) -> tuple[dict[tuple[str, str], tuple[Calibration, float]], list[str]]:
    """Per (ISA, spec) the two-size fit and the untraced base (the small size's untraced
    time); the calibration cells that could not run or fit, as error lines."""
    from emutrace.cost.calibrate import fit

    out: dict[tuple[str, str], tuple[Calibration, float]] = {}
    errors: list[str] = []
    for i, isa in enumerate(isas):
        small, large = rows[i * sizes], rows[i * sizes + sizes - 1]
        for a, b in zip(small.cells, large.cells, strict=True):
            if a.spec.backend == "bts":
                continue
            sa, sb = small.sample(a), large.sample(b)
            where = f"{isa} calibration `{small.program.template}` {a.spec.label}"
            if sa is None or sb is None:
                errors.append(f"{where}: {a.error or b.error or small.baseline.error}")
                continue
            try:
                out[(isa, a.spec.label)] = (fit(a.spec.label, sa, sb), sa.untraced_s)
            except ValueError as e:
                errors.append(f"{where}: {e}")
    return out, errors


def calibration_records(calibrations: dict[tuple[str, str], tuple[Calibration, float]],
                        grid: list[tuple[str, Program]], sizes: int) -> list[dict[str, Any]]:
    programs = {isa: [p.template for i, p in grid if i == isa][::sizes - 1]
                for isa, _ in grid}
    return [{"isa": isa, "programs": programs[isa], "base_s": base, **cal.record()}
            for (isa, _), (cal, base) in calibrations.items()]


def run_native_bench(args: argparse.Namespace, command: str) -> int:
    from rich.console import Console
    from rich.markup import escape

    from emutrace.benchgrid import native_report as report
    from emutrace.benchgrid.machine import git_revision, machine_description
    from emutrace.benchgrid.native_runner import (
        RowPlan,
        native_specs,
        round_times,
        run_native_rows,
    )
    from emutrace.benchgrid.progress import progress_stream
    from emutrace.benchgrid.spec import expand
    from emutrace.cost.check import check
    from emutrace.target import native_probe

    if not args.unconfined:
        raise UsageError("bench --target native runs the programs unconfined (their system "
                         "calls reach this host unchecked); pass --unconfined to accept that")
    if args.machine:
        raise UsageError("--target native: --machine boots a kernel image under emulation only")
    isas = checked_isas(args.arch)
    sizes = calibration_sizes(args.calibration_sizes)
    if "{n}" not in args.calibration:
        raise UsageError(f"--calibration {args.calibration}: needs {{n}}, the size")
    specs = native_specs(args.backend)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    allow_write = args.allow_write or [os.getcwd()]
    facts = native_probe.probe()
    probe = (f"native branch traps: {facts.singleblock}",
             f"native branch records: {facts.branch_records}")
    no_pmu = facts.branch_records
    load_start = os.getloadavg()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    revision = git_revision()  # of the code that runs, read before it runs

    with progress_stream() as err:
        console = Console(file=err, highlight=False, soft_wrap=True)
        grid = [(isa, expand(t, isa)) for isa in isas for t in args.programs]
        calibration_grid = [(isa, expand(args.calibration.replace("{n}", str(n)), isa))
                            for isa in isas for n in sizes]
        total = len(grid) * (len(specs) + args.repeat * (1 + len(specs))) \
            + len(calibration_grid) * args.repeat * (1 + len(specs))
        done = [0]

        def tick(what: str, seconds: float | None, runs: int) -> None:
            done[0] += runs
            took = "" if seconds is None else f": {seconds:.3f} s"
            console.print(f"[{done[0]}/{total}] {escape(what)}{took}")

        plans = [RowPlan(isa, program, emulate=False) for isa, program in calibration_grid]
        plans += [RowPlan(isa, program) for isa, program in grid]
        all_rows = run_native_rows(plans, specs, args.repeat, allow_write, args.timeout,
                                   no_pmu, tick, args.statistic)
        calibration_rows, rows = all_rows[:len(calibration_grid)], all_rows[len(calibration_grid):]
        calibrations, calibration_errors = calibrate(calibration_rows, isas, len(sizes))
        recs, errors, unsupported = [], list(calibration_errors), []
        for row in rows:
            for cell in row.cells:
                measured = row.measured(cell)
                where = f"{row.isa} `{row.program.template}` {cell.spec.label}"
                if measured is not None:
                    cal, base = calibrations.get((row.isa, cell.spec.label), (None, None))
                    recs.append(check(measured, args.ns_per_insn, cal, base).record())
                elif cell.error and cell.error.startswith("unsupported"):
                    unsupported.append(f"{where}: {cell.error}")
                else:
                    errors.append(f"{where}: {cell.error or row.baseline.error}")
        meta = report.NativeMeta(machine_description(), revision, command, started,
                                 args.repeat, args.ns_per_insn, load_start, os.getloadavg(),
                                 probe, calibration_records(calibrations, calibration_grid,
                                                            len(sizes)),
                                 args.statistic)
        report.write_csv(out / "native-cost.csv", recs)
        report.write_json(out / "native-cost.json", meta, recs, [*errors, *unsupported],
                          round_times([*calibration_rows, *rows]))
        report.write_markdown(out / "native-cost.md", meta, recs, [*errors, *unsupported])
        report.print_table(Console(width=None if sys.stdout.isatty() else 160), recs)
        for text in unsupported:
            console.print(f"[yellow]emutrace bench: {escape(text)}[/yellow]")
        for text in errors:
            console.print(f"[red]emutrace bench: error {escape(text)}[/red]")
        console.print(f"emutrace bench: results in {out}/ (native-cost.md, .csv, .json)")
    return EXIT_CELL_ERROR if errors else 0
