"""`emutrace run|record --target qiling --unconfined`: the program is loaded and served by
Qiling's operating-system layer (emutrace/qiling_session.py) and traced through the same
target protocol, on Qiling's own Unicorn engine.  Qiling is no sandbox (its sockets,
signals and process calls act on the host with the user's rights), so the run must say
--unconfined.  Options that only emutrace's Linux layer implements are refused, as for a
gdb run."""

from __future__ import annotations

import argparse

from emutrace.cli.output import open_output
from emutrace.cli.run_native import RunLike, refused_options
from emutrace.cli.run_report import report
from emutrace.errors import UsageError
from emutrace.trace.spill import SpillSink


def qiling_config_checks(args: argparse.Namespace) -> None:
    """Every refusal a usage error before anything starts."""
    if not args.unconfined:
        raise UsageError("--target qiling: Qiling's system calls run with your rights, "
                         "unconfined; say so with --unconfined")
    if args.allow_write:
        raise UsageError("--target qiling: --allow-write confines a run; the qiling target "
                         "has no sandbox (--root is Qiling's root: where a dynamic program's "
                         "libraries are)")
    # (--symbols: a PE's ELF, a DOS program's listing; --max-insns: MCU firmware's end,
    # checked by the session, which knows the program)
    refused = [o for o in refused_options(args) if o not in ("--symbols", "--max-insns")]
    if getattr(args, "syscalls", False):
        refused.append("--syscalls")
    if refused:
        raise UsageError(f"--target qiling: {', '.join(refused)} work(s) under emutrace's "
                         f"own emulation only")


def run_qiling(command: RunLike, args: argparse.Namespace) -> int:
    from emutrace.qiling_session import QilingProcess

    qiling_config_checks(args)
    config = command.config(args)
    tracing = args.backend != "none"
    args.output_file = open_output(args.output) if args.output and tracing else None
    process = QilingProcess(config)  # loaded by Qiling, before its first instruction
    trace = SpillSink() if tracing else None
    if trace is not None:
        process.sink = trace
    result = process.run()
    return command.finish(result, args, trace)


def record_qiling(command: RunLike, args: argparse.Namespace) -> int:
    """`record --target qiling`: the run streamed into a uftrace data directory."""
    from emutrace.cli.recording import prepare_dir, recorded
    from emutrace.qiling_session import QilingProcess

    qiling_config_checks(args)
    process = QilingProcess(command.config(args))  # loaded, before its first instruction
    try:
        path = prepare_dir(args.data)
    except BaseException:
        process.machine.close()
        raise
    result = recorded(process, path, [args.program, *args.args])
    report(result)
    return result.exit_code
