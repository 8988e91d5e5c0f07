"""`emutrace` command line: one module per subcommand, each a small Command.

`main(argv) -> int` runs in-process (the tests call it); `entry()` is the console script.
Every EmutraceError becomes one line on stderr and its exit code; nothing else leaks a
traceback unless --debug is given.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn, Protocol, cast

from emutrace import stdio
from emutrace.errors import EXIT_INTERNAL, EXIT_USAGE, EmutraceError


class Command(Protocol):
    name: str
    help: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def __call__(self, args: argparse.Namespace) -> int: ...


# every subcommand: its name and the module and class that implement it.  Only the one
# named on the command line is imported (a subcommand's module pulls in what it runs: the
# emulator, the backends, rich...; importing all ten cost ~0.3 s of every run's start-up).
COMMANDS = {
    "run": ("emutrace.cli.run", "RunCommand"),
    "record": ("emutrace.cli.record", "RecordCommand"),
    "live": ("emutrace.cli.live", "LiveCommand"),
    "replay": ("emutrace.cli.replay", "ReplayCommand"),
    "report": ("emutrace.cli.report", "ReportCommand"),
    "graph": ("emutrace.cli.graph", "GraphCommand"),
    "dump": ("emutrace.cli.dump", "DumpCommand"),
    "info": ("emutrace.cli.info", "InfoCommand"),
    "bench": ("emutrace.cli.bench", "BenchCommand"),
    "diff": ("emutrace.cli.diff", "DiffCommand"),
    "ci": ("emutrace.cli.ci", "CiCommand"),
    "rootfs": ("emutrace.cli.rootfs", "RootfsCommand"),
}


def command(name: str) -> Command:
    module, cls = COMMANDS[name]
    return cast(Command, getattr(importlib.import_module(module), cls)())


def commands() -> list[Command]:
    return [command(name) for name in COMMANDS]


def named_command(argv: Sequence[str]) -> str | None:
    """The subcommand argv names, when it names one before anything else but --debug
    (then only that subcommand's parser is built); None: build them all (--help, a
    mistyped name: argparse's own messages)."""
    for arg in argv:
        if arg == "--debug":
            continue
        return arg if arg in COMMANDS else None
    return None


class UsageExit(Exception):
    """argparse found a bad command line: main() returns EXIT_USAGE."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit 64 (sysexits EX_USAGE, as the README's exit
    table promises) instead of eight lines of usage and exit 2; subparsers are built with the
    same class (argparse's add_subparsers defaults parser_class to type(self))."""

    def error(self, message: str) -> NoReturn:
        first = message.splitlines()[0] if message else "bad command line"
        print(f"emutrace: usage: {self.prog}: {first} (see {self.prog} --help)",
              file=sys.stderr)
        raise UsageExit(first)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every subcommand's, or `only` that one's."""
    parser = Parser(
        prog="emutrace",
        description="Run and trace programs of any instruction set under CPU emulation.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in [command(only)] if only is not None else commands():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(handler=cmd)
    return parser


def main(argv: Sequence[str] | None = None, freeze: bool = False) -> int:
    """Run the command line argv (default: sys.argv's).  freeze (the `emutrace` process
    itself, never a caller that runs main again): once the subcommand is imported, its
    modules' objects are moved out of the garbage collector's sight (gc.freeze: they live
    as long as the process), so the collections that the run's allocations set off do not
    traverse them again each time (a tenth of a small traced run's CPU); and the youngest
    generation is collected every 7,000 allocations, not 700: a traced run keeps most of
    what it makes (decoded functions, sites, armed sites), and with CPython's default a
    Debian program's `record` spent ~5 % of its CPU in collections that freed next to
    nothing (`python3 -c`, aarch64: 500 collections, 0.21 s; 45 at 7,000, 0.09 s)."""
    parser = build_parser(named_command(sys.argv[1:] if argv is None else argv))
    if freeze:
        gc.freeze()
        gc.set_threshold(7000, 10, 10)
    try:
        args = parser.parse_args(argv)
    except UsageExit:
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except EmutraceError as e:
        say(f"emutrace: {e.message}")
        return e.exit_code
    except KeyboardInterrupt:  # Ctrl-C outside emulation and output: no traceback
        print("emutrace: interrupted", file=sys.stderr)
        return 128 + 2  # 128 + SIGINT
    except BrokenPipeError:
        return 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away
    except Exception as e:  # a bug of ours: one line, the traceback only with --debug
        if args.debug:
            traceback.print_exc()
        print(f"emutrace: internal error: {type(e).__name__}: {e} (rerun with --debug)",
              file=sys.stderr)
        return EXIT_INTERNAL


def say(line: str) -> None:
    """One line on stderr, where it can still be written: an error about writing the trace
    to stderr (a full disk) must still end with its exit status, not a second error."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        try:  # what the text layer kept goes nowhere
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass


def entry() -> None:
    stdio.hold_closed()  # before anything is opened: see emutrace/stdio.py
    sys.exit(main(freeze=True))
