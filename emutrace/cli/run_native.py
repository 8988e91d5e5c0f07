"""`emutrace run --target native`: the program runs on this host under ptrace instead of
under emulation (emutrace/native_session.py).

A native run is confined like an emulated one: the same file sandbox (--root,
--allow-write, emutrace/sandbox.py), applied by a seccomp filter whose checked calls
stop for the tracer (target/seccomp_filter.py, target/ptrace_confine.py).  `--unconfined`
is the explicit opt-out (the program then runs with the user's rights, seeing their files;
--root and --allow-write have nothing to apply to and are refused with it).
Options that only emulation implements are refused rather than ignored.

Every `emutrace run` imports this module for its options: the ptrace side
(native_session.py) is imported only when a native run starts."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Protocol

from emutrace.cli.output import open_output
from emutrace.cli.run_report import report
from emutrace.errors import UsageError
from emutrace.machine.linux.memory import DEFAULT_MAX_MEMORY
from emutrace.session import RunConfig, RunResult
from emutrace.trace.spill import SpillSink

if TYPE_CHECKING:
    from emutrace.native_session import NativeProcess

TARGETS = ("emulation", "native", "gdb", "qiling")


class DefaultTarget(str):
    """The --target a command line left unset (equal to "emulation"): `pick_target` may
    change it to the one engine that runs the program's ISA."""


DEFAULT_TARGET = DefaultTarget("emulation")


def pick_target(args: argparse.Namespace) -> None:
    """--target unset: emulation, or gdb where the program is of an ISA that only the gdb
    target runs (`emutrace info`'s engines; the run still needs --unconfined)."""
    if args.target is not DEFAULT_TARGET or not os.path.isfile(args.program):
        return
    from emutrace.elf import load_image
    from emutrace.isa.base import Cap

    try:
        isa = load_image(args.program).isa
    except Exception:  # not a program we run: the emulated path says why
        return
    if not isa.capability(Cap.RUN_STATIC).works and isa.capability(Cap.GDB_TARGET).works:
        args.target = "gdb"


class RunLike(Protocol):
    def config(self, args: argparse.Namespace) -> RunConfig: ...

    def finish(self, result: RunResult, args: argparse.Namespace,
               trace: SpillSink | None = None) -> int: ...


def add_native_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("native runs (x86_64 and i386 programs on this host)")
    g.add_argument("--target", choices=TARGETS, default=DEFAULT_TARGET,
                   help="where PROGRAM runs: emulation (the default: Unicorn, confined) or "
                        "native (on this host's CPU under ptrace; backends none, int3, hwbp, "
                        "btf, entry, step; confined by --root/--allow-write as under "
                        "emulation) or gdb (in qemu-user's gdb stub, the ISAs `emutrace info` "
                        "names: backends none, int3, hwbp; static programs; needs "
                        "--unconfined) or qiling (loaded and served by Qiling's Linux or "
                        "UEFI layer, the ISAs `emutrace info` names; every backend; "
                        "needs --unconfined)")
    g.add_argument("--unconfined", action="store_true",
                   help="--target native, gdb or qiling: no sandbox: the program runs "
                        "with your rights and sees and may change your files")


def check_target(args: argparse.Namespace) -> None:
    """--unconfined names a native run's sandbox: without --target native it would be
    silently ignored (an emulated run is always confined)."""
    if args.unconfined and args.target == "emulation":
        raise UsageError("--unconfined: only with --target native, gdb or qiling (an "
                         "emulated program is always confined by --root and --allow-write)")


def refused_options(args: argparse.Namespace) -> list[str]:
    """Options given that only emulation implements (silently ignoring them would lie)."""
    out = []
    if args.max_insns:
        out.append("--max-insns")
    if args.max_memory != DEFAULT_MAX_MEMORY:
        out.append("--max-memory")
    if args.symbols:
        out.append("--symbols")
    if args.stats:
        out.append("--stats")
    if args.follow_forks is True:  # a native run's children run untraced
        out.append("--follow-forks")
    return out


def native_config(command: RunLike, args: argparse.Namespace) -> RunConfig:
    """The native run's configuration; every refusal a usage error before anything
    starts (`run` and `record` share it)."""
    if args.unconfined and (args.root != "/" or args.allow_write):
        raise UsageError("--unconfined: --root and --allow-write confine a run; they do not "
                         "go with --unconfined")
    refused = refused_options(args)
    if refused:
        raise UsageError(f"--target native: {', '.join(refused)} work(s) under emulation "
                         f"only")
    return command.config(args)


def run_native(command: RunLike, args: argparse.Namespace) -> int:
    from emutrace.native_session import NativeProcess

    config = native_config(command, args)
    tracing = args.backend != "none"
    args.output_file = open_output(args.output) if args.output and tracing else None
    process = NativeProcess(config, unconfined=args.unconfined)  # stopped at its start
    # the records go to a temporary file as they are made, not a list (cli/run.py's
    # spill_trace): memory stays bounded whatever the trace's length
    trace = SpillSink() if tracing else None
    if trace is not None:
        process.sink = trace
    result = process.run()
    code = command.finish(result, args, trace)
    report_native(process, result)
    return code


def record_native(command: RunLike, args: argparse.Namespace) -> int:
    """`record --target native`: the native run streamed into a uftrace data directory."""
    from emutrace.cli.recording import prepare_dir, recorded
    from emutrace.native_session import NativeProcess

    config = native_config(command, args)
    process = NativeProcess(config, unconfined=args.unconfined)  # stopped at its start
    try:
        if not process.addresses_known:
            raise UsageError(f"record --target native: {args.program} is a PIE that the "
                             f"root's ld.so loads, at an address known only once it has run; "
                             f"run it with `run --target native` or record it emulated")
        path = prepare_dir(args.data)
    except BaseException:
        process.close()
        raise
    result = recorded(process, path, [args.program, *args.args])
    report(result)
    report_native(process, result)
    return result.exit_code


def report_native(process: NativeProcess, result: RunResult) -> None:
    """What the native run left out or changed, said after its report."""
    report_degraded(result, getattr(process.backend, "degraded_at", None))
    target = process.target
    if target.untraced_children:
        confined = "; their sandboxed calls failed with ENOSYS" if process.confinement else ""
        print(f"emutrace: native: {len(target.untraced_children)} forked child process(es) "
              f"ran untraced (following forks natively is not built){confined}",
              file=sys.stderr)
    if target.exec_untraced:
        how = "not traced (still confined)" if process.confinement else "untraced"
        print(f"emutrace: native: the program called execve; the new image ran {how}",
              file=sys.stderr)


def report_degraded(result: RunResult, at: int | None) -> None:
    """btf: say when the branch traps were single-steps (backends/btf_native.py)."""
    if at is None:
        return
    s = result.backend_stats
    print(f"emutrace: btf: PTRACE_SINGLEBLOCK degraded to single-stepping (a trap after the "
          f"non-branch instruction at {at:#x}: DEBUGCTL.BTF is ignored here, as under KVM); "
          f"{s['stops']} traps taken for {s['traps']} taken branches", file=sys.stderr)
