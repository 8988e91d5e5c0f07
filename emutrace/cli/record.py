"""`emutrace record`: run a program under emulation (natively with `--target native`, a
kernel image with `--machine`) and stream its call trace into a uftrace data directory
(Debian's `uftrace replay/report/graph/info/dump -d DIR` read it)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from emutrace.cli import syscalls
from emutrace.cli.forks import recorded_from_here, untraced_from_here
from emutrace.cli.recording import prepare_dir, recorded
from emutrace.cli.run import RunCommand, end_child
from emutrace.cli.run_machine import refuse_board_options
from emutrace.cli.run_native import check_target
from emutrace.cli.run_report import report
from emutrace.errors import UsageError
from emutrace.session import Process


class RecordCommand(RunCommand):
    name = "record"
    help = "run PROGRAM [ARGS...] and record its call trace into DIR (uftrace's format)"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("-d", "--data", default="uftrace.data", metavar="DIR",
                       help="data directory (default uftrace.data; an existing DIR is "
                            "renamed DIR.old first, as uftrace does)")
        super().configure(p)

    def __call__(self, args: argparse.Namespace) -> int:
        check_target(args)
        refuse_board_options(args)
        for option, why in display_options(args):
            raise UsageError(f"record {option}: {why}")
        if args.backend == "none":
            raise UsageError("record needs a tracing backend (--backend)")
        if args.syscalls and (args.machine or args.target == "native"):
            raise UsageError("--syscalls: the system calls of an emulated Linux program "
                             "only (a kernel image makes none of its own; natively, use "
                             "strace)")
        if args.machine:  # a kernel image on a board (`run --machine`)
            from emutrace.cli.run_machine import record_machine

            return record_machine(args)
        if args.target == "gdb":
            raise UsageError("record --target gdb: not built yet (run --target gdb traces "
                             "in the stub)")
        if args.target == "qiling":  # loaded and served by Qiling (`run --target qiling`)
            from emutrace.cli.run_qiling import record_qiling

            return record_qiling(self, args)
        if args.target == "native":  # on this host under ptrace (`run --target native`)
            from emutrace.cli.run_native import record_native

            return record_native(self, args)
        # what a program execve()s runs untraced: the directory holds one image
        process = Process(replace(self.config(args), trace_execs=False))
        path = prepare_dir(args.data)
        extern = syscalls.ExternFile(path) if args.syscalls else None
        if extern is not None:  # each call's line appended as it is made
            syscalls.listen(process, extern.keep)
        # a forked child's events go to the same directory, a task of its own (uftrace's
        # recording of a forking program); with --no-follow-forks the child runs untraced
        kernel = process.kernel
        kernel.fork_listeners.append(
            (lambda pid: untraced_from_here(process)) if args.follow_forks is False
            else (lambda pid: recorded_from_here(process, pid)))
        result = recorded(process, path, [args.program, *args.args],
                          closes=lambda: args.follow_forks is not False
                          or kernel.guest_parent is None)
        while result.next_process is not None:  # execve: the new image runs, not recorded
            print(f"emutrace: record: {result.next_process.config.guest_path} (execve) runs "
                  f"untraced", file=sys.stderr)
            result = result.next_process.run()
        if result.guest_parent is not None:
            end_child(result)
        if extern is not None:
            extern.close()
        report(result)
        return result.exit_code


def display_options(args: argparse.Namespace) -> list[tuple[str, str]]:
    """`run`'s options that shape its text trace or its end, which `record` would accept
    and ignore (it records every call of every thread into -d DIR): each with where it
    belongs."""
    viewer = "record keeps every call: give it to `emutrace replay`"
    given = [("-o", args.output is not None,
              "record writes a directory, not a file: -d DIR names it"),
             ("-F", bool(args.filter), viewer), ("-N", bool(args.notrace), viewer),
             ("-T", bool(args.trigger), viewer), ("-H", bool(args.hide), viewer),
             ("-C", bool(args.caller_filter), viewer), ("--trace", args.trace != "on", viewer),
             ("--max-stack", args.max_stack is not None, viewer),
             ("--no-libcall", args.no_libcall, viewer),
             ("-D", args.depth is not None, viewer), ("--start", args.start is not None, viewer),
             ("--tid", args.tid is not None, viewer),
             ("--stats", args.stats, "the statistics are `emutrace run --stats`'s")]
    return [(option, why) for option, on, why in given if on]
