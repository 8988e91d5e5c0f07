"""`emutrace` command line: one module per subcommand, each a small Command.

`main(argv) -> int` runs in-process (the tests call it); `entry()` is the console script.
Every EmutraceError becomes one line on stderr and its exit code; nothing else leaks a
traceback unless --debug is given.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn, Protocol

from emutrace.errors import EXIT_INTERNAL, EXIT_USAGE, EmutraceError


class Command(Protocol):
    name: str
    help: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def __call__(self, args: argparse.Namespace) -> int: ...


def commands() -> list[Command]:
    from emutrace.cli.bench import BenchCommand
    from emutrace.cli.diff import DiffCommand
    from emutrace.cli.dump import DumpCommand
    from emutrace.cli.graph import GraphCommand
    from emutrace.cli.info import InfoCommand
    from emutrace.cli.record import RecordCommand
    from emutrace.cli.replay import ReplayCommand
    from emutrace.cli.report import ReportCommand
    from emutrace.cli.rootfs import RootfsCommand
    from emutrace.cli.run import RunCommand

    return [RunCommand(), RecordCommand(), ReplayCommand(), ReportCommand(), GraphCommand(),
            DumpCommand(), InfoCommand(), BenchCommand(), DiffCommand(), RootfsCommand()]


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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="emutrace",
        description="Run and trace programs of any instruction set under CPU emulation.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in commands():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(handler=cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageExit:
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except EmutraceError as e:
        print(f"emutrace: {e.message}", file=sys.stderr)
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


def entry() -> None:
    sys.exit(main())
