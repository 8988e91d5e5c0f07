"""`emutrace bench`: run program templates on a grid of ISAs × tracing backends, compare the
backends' traces, time them against the untraced run, and predict their native cost.

    emutrace bench --arch all --backend all --repeat 3 'testbins/{isa}/calls recursion'

Every cell runs in this process (no subprocess start-up in the times), the guest's standard
streams on /dev/null.  Parts, one module each under `emutrace.benchgrid`: `spec` (arguments),
`runner` (rounds, medians, agreement), `results` (flat records and predictions from
`emutrace.cost`), `report` (csv, json, markdown, terminal), `plots`, `machine`, `progress`.
They are imported when the command runs, not when the parser is built (matplotlib alone
takes a second or more to import, and every `emutrace` command builds every parser).

`--target native --unconfined` (x86_64, i386) checks the cost model instead: every
mechanism run natively under ptrace beside the untraced native run, its measured slowdown
against the model's prediction from the same program's emulated counts
(`emutrace.cli.bench_native`; native-cost.{csv,json,md}).

Exit status: 0 every tracing backend agreed; 1 a disagreement (a different canonical trace,
or a guest exit code unlike the `none` run's) — printed on stderr and marked FAIL; 2 no
disagreement but a cell could not run (an exception: see the error column); 64 bad
arguments.  A program file missing for an ISA is not an error: its row reads "n/a"; nor is a
backend declaring it cannot trace a program (`Unsupported`): "unsupported", printed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from emutrace import quantities
from emutrace.benchgrid.spec import (
    ALL_SPECS,
    expand,
    parse_arches,
    parse_backends,
    parse_template,
)
from emutrace.cli.bench_native import CALIBRATION, CALIBRATION_SIZES
from emutrace.cost import DEFAULT_NS_PER_INSN
from emutrace.errors import UsageError
from emutrace.machine.board.presets import BOARDS

if TYPE_CHECKING:
    from emutrace.benchgrid.board import BoardRun
    from emutrace.benchgrid.runner import Row

EXIT_DISAGREEMENT = 1
EXIT_CELL_ERROR = 2


class BenchCommand:
    name = "bench"
    help = "time and cross-check tracing backends on a grid of ISAs and programs"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.epilog = (f"exit status: 0 all backends agree; {EXIT_DISAGREEMENT} a backend's "
                    "trace or exit code disagreed (FAIL); "
                    f"{EXIT_CELL_ERROR} a cell raised an error; 64 bad arguments")
        p.add_argument("--arch", default="all", metavar="all|ISA,...",
                       help="ISAs to run (default all)")
        p.add_argument("--backend", default="all", metavar="all|SPEC,...",
                       help="backend specs: int3, int3:strict, int3:native, hwbp, hwbp:N "
                            "(N slots), bts, bts:N (buffer records), bts:native, btf, "
                            "btf:native, entry, step, step:native; all = "
                            f"{','.join(ALL_SPECS)}; `none` always runs as the baseline")
        p.add_argument("--repeat", type=quantities.positive_count, default=1, metavar="N",
                       help="rounds; each round runs every cell of a row in turn, times are "
                            "medians (default 1)")
        p.add_argument("--out", default="bench-out", metavar="DIR",
                       help="directory for results.{csv,json,md} and plots (default "
                            "bench-out/)")
        p.add_argument("--timeout", type=quantities.seconds, default=0.0, metavar="S",
                       help="stop a run after S seconds (it then disagrees with `none`)")
        p.add_argument("--allow-write", action="append", default=[], metavar="DIR",
                       help="directory the guest may write in (default: the current one)")
        p.add_argument("--ns-per-insn", type=quantities.positive_float,
                       default=DEFAULT_NS_PER_INSN, metavar="NS",
                       help="cost model: untraced native time per instruction "
                            f"(default {DEFAULT_NS_PER_INSN})")
        g = p.add_argument_group("kernel images (rows of one board; see run --machine)")
        g.add_argument("--machine", metavar="BOARD",
                       help="every PROGRAM is an image run on BOARD (its ISA: --arch is not "
                            "taken); a row's times are its boot to --until, power-off or idle")
        g.add_argument("--bios", metavar="FILE", help="firmware started first (as run)")
        g.add_argument("--dtb", metavar="FILE", help="device tree blob (as run)")
        g.add_argument("--until", metavar="TEXT", default="",
                       help="a run ends (exit 0) once the console printed TEXT (as run)")
        g.add_argument("--input", metavar="TEXT", default="", help="typed input (as run)")
        g.add_argument("--input-after", metavar="TEXT", default="",
                       help="offer --input once the console printed TEXT (as run)")
        n = p.add_argument_group("the cost model against native runs (x86_64, i386 on this "
                                 "host; see run --target native)")
        n.add_argument("--target", choices=("emulation", "native"), default="emulation",
                       help="native: run every mechanism natively under ptrace beside the "
                            "untraced native run and compare with the cost model's prediction "
                            "from emulated counts; writes native-cost.{csv,json,md} "
                            "(needs --unconfined)")
        n.add_argument("--unconfined", action="store_true",
                       help="--target native: the programs run with your rights (no sandbox)")
        n.add_argument("--statistic", choices=("median", "min"), default="median",
                       help="--target native: a cell's time over its rounds: the median "
                            "(default) or the least disturbed round (for a loaded machine)")
        n.add_argument("--calibration", default=CALIBRATION, metavar="PROGRAM",
                       help="--target native: the program whose two sizes measure the "
                            "tracer's per-run and per-stop costs, {n} its size (default "
                            f"'{CALIBRATION}')")
        n.add_argument("--calibration-sizes", default=CALIBRATION_SIZES, metavar="N,N",
                       help="--target native: the small and the large {n} (default "
                            f"{CALIBRATION_SIZES})")
        p.add_argument("programs", nargs="+", metavar="PROGRAM",
                       help="command line template with {isa}, e.g. "
                            "'testbins/{isa}/fib 20' (one argument, quoted)")

    def __call__(self, args: argparse.Namespace) -> int:
        # imported here: every `emutrace` command builds this parser, and matplotlib and the
        # runner take seconds to import
        from rich.console import Console
        from rich.markup import escape

        from emutrace.benchgrid import plots, report, results
        from emutrace.benchgrid.machine import git_revision, machine_description
        from emutrace.benchgrid.progress import Reporter, progress_stream
        from emutrace.benchgrid.runner import run_row

        for template in args.programs:
            parse_template(template)
        if args.repeat < 1:
            raise UsageError(f"--repeat {args.repeat}: at least 1")
        if args.ns_per_insn <= 0:
            raise UsageError(f"--ns-per-insn {args.ns_per_insn}: must be positive")
        if args.timeout < 0:
            raise UsageError(f"--timeout {args.timeout}: must not be negative")
        if args.target == "native":
            from emutrace.cli.bench_native import run_native_bench
            return run_native_bench(args, command_line(args))
        if args.unconfined:
            raise UsageError("--unconfined: only with --target native")
        board = board_run(args)
        isas = parse_arches(args.arch) if board is None else [BOARDS[board.board].isa]
        specs = parse_backends(args.backend)
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        allow_write = args.allow_write or [os.getcwd()]
        meta = results.Meta(machine_description(), git_revision(), command_line(args),
                            datetime.datetime.now().isoformat(timespec="seconds"),
                            args.repeat, args.ns_per_insn)

        with progress_stream() as err:
            console = Console(file=err, highlight=False, soft_wrap=True)
            grid = [(isa, expand(t, isa)) for isa in isas for t in args.programs]
            total = len(grid) * args.repeat * (1 + len(specs))
            rows: list[Row] = []
            with Reporter(console, total) as tick:
                for isa, program in grid:
                    rows.append(run_row(isa, program, specs, args.repeat, allow_write,
                                        args.timeout, tick, board))
            recs = results.records(rows, args.ns_per_insn)
            problems = [f"{c.isa} `{c.program.template}` {c.spec.label}: {p}"
                        for row in rows for c in row.cells for p in c.problems]
            assumptions = results.assumptions(rows, args.ns_per_insn)
            report.write_csv(out / "results.csv", recs)
            report.write_json(out / "results.json", meta, recs, assumptions)
            report.write_markdown(out / "results.md", meta, recs, assumptions, isas, problems)
            plots.plot_all(recs, out, meta.revision)
            report.print_table(Console(width=None if sys.stdout.isatty() else 160), recs)
            for text in problems:
                console.print(f"[bold red]emutrace bench: FAIL {escape(text)}[/bold red]")
            errors = [c for row in rows for c in row.cells if c.agreement == "error"]
            missing = [row for row in rows if row.missing]  # never n/a and exit 0
            for row in missing:
                console.print(f"[red]emutrace bench: error {row.isa}: program missing: "
                              f"{escape(str(row.program.path))}[/red]")
            for c in (c for row in rows for c in row.cells if c.agreement == "unsupported"):
                console.print(f"[yellow]emutrace bench: {c.isa} {escape(c.program.template)} "
                              f"{c.spec.label}: {escape(c.error or '')}[/yellow]")
            for c in errors:
                console.print(f"[red]emutrace bench: error {c.isa} {escape(c.program.template)}"
                              f" {c.spec.label}: {escape(c.error or '')}[/red]")
            console.print(f"emutrace bench: results in {out}/ (results.md, results.csv, "
                          "results.json, slowdown/events/predicted .png .svg)")
        if problems:
            return EXIT_DISAGREEMENT
        return EXIT_CELL_ERROR if errors or missing else 0


def board_run(args: argparse.Namespace) -> BoardRun | None:
    """The board options, checked before anything runs; None without --machine."""
    from emutrace.benchgrid.board import BoardRun
    from emutrace.board_session import board_named
    from emutrace.cli.run_machine import refuse_board_options, unescape

    refuse_board_options(args)
    if not args.machine:
        return None
    board_named(args.machine)  # an unknown board: a usage error now
    if args.arch != "all":
        raise UsageError(f"--arch {args.arch}: --machine {args.machine} gives the ISA")
    return BoardRun(args.machine, args.dtb, args.bios, unescape(args.until, "--until"),
                    unescape(args.input, "--input"),
                    unescape(args.input_after, "--input-after"))


def command_line(args: argparse.Namespace) -> str:
    native = ["--target", "native", "--unconfined"] if args.target == "native" else []
    words = ["emutrace", "bench", *native, "--arch", args.arch, "--backend", args.backend,
             "--repeat", str(args.repeat), "--out", args.out]
    if args.timeout:
        words += ["--timeout", str(args.timeout)]
    for d in args.allow_write:
        words += ["--allow-write", d]
    if args.ns_per_insn != DEFAULT_NS_PER_INSN:
        words += ["--ns-per-insn", str(args.ns_per_insn)]
    if args.target == "native":  # (the native bench's own options, as given)
        words += ["--statistic", args.statistic, "--calibration", args.calibration,
                  "--calibration-sizes", args.calibration_sizes]
    for option in ("machine", "bios", "dtb", "until", "input", "input_after"):
        if getattr(args, option):
            words += [f"--{option.replace('_', '-')}", getattr(args, option)]
    return shlex.join([*words, *args.programs])
