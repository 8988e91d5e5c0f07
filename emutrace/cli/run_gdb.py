"""`emutrace run --target gdb --unconfined`: the program runs in qemu-user's GDB remote stub
(emutrace/gdb_session.py) and is traced through the stub's breakpoints, registers and
memory — any ISA whose qemu-user is installed.  QEMU's Linux layer runs the system calls
with the user's rights: no sandbox, so the run must say --unconfined.  Options that only
emulation implements are refused, as for a native run (cli/run_native.py)."""

from __future__ import annotations

import argparse

from emutrace.cli.output import open_output
from emutrace.cli.run_native import RunLike, refused_options
from emutrace.errors import UsageError
from emutrace.trace.spill import SpillSink


def gdb_config_checks(args: argparse.Namespace) -> None:
    """Every refusal a usage error before anything starts."""
    if not args.unconfined:
        raise UsageError("--target gdb: qemu-user runs the program's system calls with your "
                         "rights, unconfined; say so with --unconfined")
    if args.root != "/" or args.allow_write:
        raise UsageError("--target gdb: --root and --allow-write confine a run; the gdb "
                         "target has no sandbox")
    refused = refused_options(args)
    if refused:
        raise UsageError(f"--target gdb: {', '.join(refused)} work(s) under emulation only")


def run_gdb(command: RunLike, args: argparse.Namespace) -> int:
    from emutrace.gdb_session import GdbProcess

    gdb_config_checks(args)
    config = command.config(args)
    tracing = args.backend != "none"
    args.output_file = open_output(args.output) if args.output and tracing else None
    process = GdbProcess(config)  # stopped at its first instruction in the stub
    trace = SpillSink() if tracing else None
    if trace is not None:
        process.sink = trace
    result = process.run()
    return command.finish(result, args, trace)
