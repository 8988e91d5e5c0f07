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
from typing import Protocol

from emutrace.errors import EXIT_INTERNAL, EmutraceError


class Command(Protocol):
    name: str
    help: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def __call__(self, args: argparse.Namespace) -> int: ...


def commands() -> list[Command]:
    from emutrace.cli.bench import BenchCommand
    from emutrace.cli.info import InfoCommand
    from emutrace.cli.record import RecordCommand
    from emutrace.cli.run import RunCommand

    return [RunCommand(), RecordCommand(), InfoCommand(), BenchCommand()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except EmutraceError as e:
        print(f"emutrace: {e.message}", file=sys.stderr)
        return e.exit_code
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
