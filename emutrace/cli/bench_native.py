"""`emutrace bench --target native`: the cost model checked against native runs (issue 13
item 4).  Every program × ISA × mechanism runs natively under ptrace beside the untraced
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

from emutrace.errors import UsageError

EXIT_CELL_ERROR = 2


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


def run_native_bench(args: argparse.Namespace, command: str) -> int:
    from rich.console import Console
    from rich.markup import escape

    from emutrace.benchgrid import native_report as report
    from emutrace.benchgrid.machine import git_revision, machine_description
    from emutrace.benchgrid.native_runner import native_specs, run_native_row
    from emutrace.benchgrid.spec import expand
    from emutrace.cli.bench import progress_stream
    from emutrace.cost.check import check
    from emutrace.target import native_probe

    if not args.unconfined:
        raise UsageError("bench --target native runs the programs unconfined (their system "
                         "calls reach this host unchecked); pass --unconfined to accept that")
    if args.machine:
        raise UsageError("--target native: --machine boots a kernel image under emulation only")
    isas = checked_isas(args.arch)
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
        total = len(grid) * (len(specs) + args.repeat * (1 + len(specs)))
        done = [0]

        def tick(what: str, seconds: float | None, runs: int) -> None:
            done[0] += runs
            took = "" if seconds is None else f": {seconds:.3f} s"
            console.print(f"[{done[0]}/{total}] {escape(what)}{took}")

        rows = [run_native_row(isa, program, specs, args.repeat, allow_write, args.timeout,
                               no_pmu, tick) for isa, program in grid]
        recs, errors, unsupported = [], [], []
        for row in rows:
            for cell in row.cells:
                measured = row.measured(cell)
                where = f"{row.isa} `{row.program.template}` {cell.spec.label}"
                if measured is not None:
                    recs.append(check(measured, args.ns_per_insn).record())
                elif cell.error and cell.error.startswith("unsupported"):
                    unsupported.append(f"{where}: {cell.error}")
                else:
                    errors.append(f"{where}: {cell.error or row.baseline.error}")
        meta = report.NativeMeta(machine_description(), revision, command, started,
                                 args.repeat, args.ns_per_insn, load_start, os.getloadavg(),
                                 probe)
        report.write_csv(out / "native-cost.csv", recs)
        report.write_json(out / "native-cost.json", meta, recs, [*errors, *unsupported])
        report.write_markdown(out / "native-cost.md", meta, recs, [*errors, *unsupported])
        report.print_table(Console(width=None if sys.stdout.isatty() else 160), recs)
        for text in unsupported:
            console.print(f"[yellow]emutrace bench: {escape(text)}[/yellow]")
        for text in errors:
            console.print(f"[red]emutrace bench: error {escape(text)}[/red]")
        console.print(f"emutrace bench: results in {out}/ (native-cost.md, .csv, .json)")
    return EXIT_CELL_ERROR if errors else 0
