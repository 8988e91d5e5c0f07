"""`emutrace run --machine BOARD IMAGE`: a kernel image or firmware on a board (the options
and the run; `run.py` hands over when --machine is given).

Every `emutrace run` imports this module for its options, and few of them have --machine:
the board (board_session.py, machine/board/: a fifth of a run's import time) is imported only by the
functions that load one."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from emutrace.cli.deferred import stop_signals_deferred
from emutrace.cli.options import parse_arg_formats, parse_arg_specs, settings_from
from emutrace.cli.output import open_output
from emutrace.cli.run_report import report
from emutrace.errors import UsageError
from emutrace.trace.spill import SpillSink

if TYPE_CHECKING:
    from emutrace.board_session import BoardMachine
    from emutrace.session import RunResult
    from emutrace.trace.events import Record


class WriteTrace(Protocol):
    """run's `write_trace`: the text trace of a result, from `records`."""

    def __call__(self, result: RunResult, args: argparse.Namespace,
                 records: Iterable[Record] | None = None) -> None: ...


def add_machine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("kernel images (--machine; see `emutrace info --machines`)")
    g.add_argument("--machine", metavar="BOARD",
                   help="run PROGRAM as a kernel image or firmware on BOARD (an ELF loads at "
                        "its physical addresses, anything else where QEMU's -bios puts it)")
    g.add_argument("--bios", metavar="FILE",
                   help="firmware started first (loaded as QEMU's -bios); PROGRAM is its "
                        "payload, loaded as QEMU's -kernel (e.g. OpenSBI fw_jump + U-Boot)")
    g.add_argument("--dtb", metavar="FILE",
                   help="device tree blob passed to the image in place of the one the board "
                        "makes (as qemu-system's -dtb)")
    g.add_argument("--append", metavar="ARGS",
                   help="kernel command line: the device tree's /chosen bootargs (as "
                        "qemu-system's -append)")
    g.add_argument("--initrd", metavar="FILE",
                   help="initrd/initramfs loaded where QEMU loads it, its range in the "
                        "device tree's /chosen (as qemu-system's -initrd)")
    g.add_argument("--until", metavar="TEXT",
                   help="end the run (exit 0) once the console has printed TEXT "
                        "(\\n, \\r, \\t, \\xNN escapes)")
    g.add_argument("--input", metavar="TEXT", default="",
                   help="type TEXT into the console as the guest reads it (escapes as --until)")
    g.add_argument("--input-after", metavar="TEXT", default="",
                   help="offer --input only once the console has printed TEXT (a prompt)")
    g.add_argument("--trace-after", metavar="TEXT",
                   help="trace from the first exception or interrupt the image takes once "
                        "the console has printed TEXT (escapes as --until): what runs "
                        "before it runs untraced, at --backend none's speed")
    g.add_argument("--reloc", metavar="OFFSET", type=offset,
                   help="the image copies itself OFFSET bytes up and runs there (U-Boot's "
                        "relocation): trace and name that copy too (a run that ends in such "
                        "a copy prints the OFFSET to give)")


BOARD_OPTIONS = ("bios", "dtb", "append", "initrd", "until", "input", "input_after",
                 "trace_after", "reloc")


def refuse_board_options(args: argparse.Namespace) -> None:
    """The kernel-image options given without --machine: a usage error (they would be
    ignored)."""
    given = [f"--{name.replace('_', '-')}" for name in BOARD_OPTIONS
             if getattr(args, name, None) not in (None, "")]
    if given and not args.machine:
        raise UsageError(f"{', '.join(given)}: only with --machine (a kernel image on a board)")


def offset(text: str) -> int:
    """A byte offset as C writes it (0x47ef7000, 1048576)."""
    return int(text, 0)


def unescape(text: str, option: str) -> bytes:
    """`version\\n` → b"version\\n": the C escapes a shell user types."""
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape") \
            .encode("latin-1")
    except (UnicodeDecodeError, UnicodeEncodeError) as e:
        raise UsageError(f"{option} {text!r}: bad escape ({e.reason})") from None


def board_machine(args: argparse.Namespace) -> BoardMachine:
    """The board and image of the command line, loaded (every bad value a usage error
    before anything runs); `run` and `record` share it."""
    from emutrace.board_session import BoardConfig, BoardMachine

    if args.args:
        raise UsageError(f"--machine {args.machine}: an image takes no arguments "
                         f"(got {' '.join(args.args)})")
    if args.follow_forks is not None:
        raise UsageError("--machine: a kernel image forks no host processes; "
                         "--follow-forks/--no-follow-forks are for programs")
    if len(args.symbols) > 1:
        raise UsageError("--machine takes one --symbols FILE (a System.map or `nm` listing, "
                         "or an unstripped ELF of the same build)")
    config = BoardConfig(
        board=args.machine, image=args.program, dtb=args.dtb, append=args.append,
        initrd=args.initrd, bios=args.bios,
        symbols=args.symbols[0] if args.symbols else None,
        until=unescape(args.until or "", "--until"), typed=unescape(args.input, "--input"),
        trace_after=unescape(args.trace_after or "", "--trace-after"),
        input_after=unescape(args.input_after, "--input-after"),
        max_insns=args.max_insns, timeout=args.timeout, backend=args.backend,
        engine=args.engine,
        **settings_from(args),
        arg_counts=parse_arg_specs(args.argument),
        arg_formats=parse_arg_formats(args.argument, args.retval), reloc=args.reloc)
    args.arg_counts = config.arg_counts
    return BoardMachine(config)


def record_machine(args: argparse.Namespace) -> int:
    """`record --machine`: the board's run streamed into a uftrace data directory."""
    from emutrace.cli.recording import prepare_dir, recorded

    machine = board_machine(args)
    result = recorded(machine, prepare_dir(args.data), [args.program])
    report(result)
    return result.exit_code


def run_machine(args: argparse.Namespace, write_trace: WriteTrace) -> int:
    """`run --machine`: the board's run, its trace written by `write_trace` (run's)."""
    machine = board_machine(args)
    tracing = args.backend != "none"
    args.output_file = open_output(args.output) if args.output and tracing else None
    # the records go to a temporary file as they are made, not a list (as `run`'s)
    trace = SpillSink() if tracing else None
    if trace is not None:
        machine.sink = trace
    result = machine.run()
    with stop_signals_deferred() as late:
        if trace is not None:
            write_trace(result, args, trace)
        report(result)
        if machine.reloc_hint is not None and args.backend != "none":
            print(f"emutrace: the run ended in a copy of the image {machine.reloc_hint:#x} "
                  f"bytes up, which was not traced: trace it with --reloc "
                  f"{machine.reloc_hint:#x}", file=sys.stderr)
    if late.signal:
        return late.exit_code
    if args.stats:
        traps = ", ".join(f"{k}={v}" for k, v in sorted(result.syscall_counts.items()))
        print(f"emutrace: {result.syscalls} traps: {traps}", file=sys.stderr)
        if result.stop.detail:
            print(f"emutrace: stopped: {result.stop.detail}", file=sys.stderr)
        if result.backend_stats:
            mech = ", ".join(f"{k}={v}" for k, v in result.backend_stats.items())
            print(f"emutrace: {args.backend}: {mech}", file=sys.stderr)
    return result.exit_code
