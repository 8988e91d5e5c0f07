"""`emutrace run`: run a program under emulation, passing its stdio and exit status through."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import NoReturn, TextIO

from emutrace import quantities
from emutrace.backends import ENGINES, NATIVE_BACKENDS
from emutrace.cli import options, syscalls
from emutrace.cli.deferred import stop_signals_deferred
from emutrace.cli.forks import untraced_from_here
from emutrace.cli.options import (
    filter_rules,
    parse_arg_formats,
    parse_arg_specs,
    settings_from,
)
from emutrace.cli.output import OutputPlace, open_output, whole_writes
from emutrace.cli.patterns import unmatched
from emutrace.cli.program import Program, find_program
from emutrace.cli.run_machine import add_machine_options, refuse_board_options, run_machine
from emutrace.cli.run_native import add_native_options, check_target, pick_target, run_native
from emutrace.cli.run_report import report
from emutrace.discover.demangle import demangled, demangling, shown_by
from emutrace.discover.symbols import SymbolTable, read_symbols
from emutrace.environment import user_environment, with_changes
from emutrace.errors import EXIT_MAX_INSNS, EXIT_TIMEOUT, OutputError, UsageError
from emutrace.machine.linux.memory import DEFAULT_MAX_MEMORY
from emutrace.mechanisms import BACKENDS, all_descriptors, backend_settings
from emutrace.native.replaytext import write_replay
from emutrace.session import Process, RunConfig, RunResult
from emutrace.trace.events import Record
from emutrace.trace.filters import caller_kept
from emutrace.trace.format import ReplayOptions, iter_replay_lines
from emutrace.trace.spill import SpillSink
from emutrace.trace.syscall_events import merged

BACKEND_CHOICES = (*BACKENDS, "none")


class RunCommand:
    name = "run"
    help = "run PROGRAM [ARGS...] under emulation"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--arch", help="ISA of PROGRAM (default: from its ELF header; a "
                                      "disagreeing value is an error)")
        p.add_argument("--backend", choices=BACKEND_CHOICES, default="int3",
                       help="instrumentation mechanism (default int3): " + "; ".join(
                           f"{d.name}: {d.help}" for d in all_descriptors()) + "; none: just run")
        for setting, owners in backend_settings():  # --cleanup, --hw-slots, --bts-buffer
            setting.add_to(p, owners)
        p.add_argument("--engine", choices=ENGINES, default="auto",
                       help="where the per-event work runs: native (the C hot path; "
                            f"{', '.join(NATIVE_BACKENDS)}, see README; with --target "
                            "native: the ptrace loop in C), python (the reference), or auto "
                            "(the default: native where it exists and is built, else "
                            "python)")
        g = p.add_argument_group("trace output (with a tracing backend; uftrace's names)")
        g.add_argument("-o", "--output", metavar="FILE",
                       help="write the call trace to FILE (default: stderr)")
        options.add_filter_options(g)
        options.add_demangle_option(g)
        g.add_argument("-A", "--argument", action="append", default=[], metavar="FUNC@argN",
                       help="show the first N arguments of FUNC (default: its prototype from "
                            "DWARF or the libc table, else 4 integer words; repeatable); "
                            "uftrace's formats: FUNC@arg1/i32,arg2/x64,arg3/s,fparg1/f64")
        g.add_argument("-R", "--retval", action="append", default=[],
                       metavar="FUNC@retval/FMT",
                       help="FUNC's return value in uftrace's format: i32, u64, x64, c, s, "
                            "p, f64... (repeatable)")
        g.add_argument("-a", "--auto-args", action="store_true",
                       help="show the arguments and return values of every function with a "
                            "known prototype (uftrace's -a: emutrace's default, so it "
                            "changes nothing)")
        g.add_argument("-e", "--estimate-return", action=_NotNeeded, nargs=0,
                       help="uftrace's: refused, as emutrace never replaces a return address "
                            "(every return is seen where it happens)")
        g.add_argument("--start", metavar="SYM",
                       help="show nothing before SYM is first entered (default: main)")
        g.add_argument("--tid", type=tid_list, metavar="TID[,TID...]",
                       help="show only these tasks (threads as the trace numbers them: the "
                            "main thread 0, then 1, 2... in creation order), as `replay "
                            "--tid` does")
        g.add_argument("--symbols", action="append", default=[], metavar="FILE[@BIAS]",
                       help="function names from FILE: an ELF with .symtab (a separate debug "
                            "file) or an nm/System.map listing, at BIAS (default: the "
                            "program's load bias; repeatable)")
        p.add_argument("--follow-forks", action=argparse.BooleanOptionalAction,
                       help="trace the processes the program forks, each into its own trace "
                            "(-o FILE: FILE.<pid>; record: a task of DIR; the default, as "
                            "uftrace); "
                            "--no-follow-forks: only the first process is traced, its "
                            "children and what they execve run untraced (strace's default)")
        syscalls.add_option(p)
        p.add_argument("--root", default="/", metavar="DIR",
                       help="host directory the guest sees as / (default: /)")
        p.add_argument("--allow-write", action="append", default=[], metavar="DIR",
                       help="directory the guest may create or change files in (repeatable; "
                            "default: the current directory, unless it is /, $HOME or "
                            "holds the root: then nothing)")
        p.add_argument("--max-insns", type=quantities.count, default=0, metavar="N",
                       help=f"stop after N guest instructions (exit {EXIT_MAX_INSNS})")
        p.add_argument("--timeout", type=quantities.seconds, default=0.0, metavar="S",
                       help=f"stop after S seconds of wall time (exit {EXIT_TIMEOUT})")
        p.add_argument("--max-memory", type=quantities.size, default=DEFAULT_MAX_MEMORY,
                       metavar="SIZE", help="guest memory cap, e.g. 512M or 8G; mmap and brk "
                       "beyond it fail with ENOMEM (default 4G)")
        p.add_argument("--env", action="append", default=[], type=options.env_assignment,
                       metavar="NAME=VALUE", help="set NAME in the guest's environment, "
                       "which is otherwise exactly the user's (repeatable)")
        p.add_argument("--unset-env", action="append", default=[], type=options.env_name,
                       metavar="NAME", help="remove NAME from the guest's environment "
                       "(repeatable; applied before --env)")
        p.add_argument("--stats", action="store_true",
                       help="print syscall counts to stderr at the end")
        add_machine_options(p)
        add_native_options(p)
        p.add_argument("program", metavar="PROGRAM")
        p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

    def config(self, args: argparse.Namespace) -> RunConfig:
        """The run's configuration from the command line; every bad value is a usage error
        here, before anything runs."""
        args.arg_counts = parse_arg_specs(args.argument)  # bad -A: refuse before running
        args.arg_formats = parse_arg_formats(args.argument, args.retval)
        program = Program(args.program, list(args.args))
        if args.target == "emulation":  # (a native, gdb or qiling run starts the file itself)
            program = find_program(args.program, list(args.args), args.root)
        return RunConfig(program=program.path, args=program.args, argv0=program.argv0,
                         execfn=program.execfn, arch=args.arch, root=args.root,
                         allow_write=args.allow_write, max_insns=args.max_insns,
                         timeout=args.timeout, backend=args.backend, **settings_from(args),
                         arg_counts=args.arg_counts, arg_formats=args.arg_formats,
                         max_memory=args.max_memory,
                         engine=args.engine,
                         env=with_changes(user_environment(), args.env, args.unset_env),
                         symbols=args.symbols, host_fork=True)

    def __call__(self, args: argparse.Namespace) -> int:
        pick_target(args)
        check_target(args)
        refuse_board_options(args)
        if args.backend == "none":
            untraced = trace_options(args)
            if untraced:
                raise UsageError(f"{', '.join(untraced)}: shape(s) the trace, and --backend "
                                 f"none traces nothing (choose a tracing --backend)")
        if args.syscalls and (args.machine or args.target != "emulation"):
            raise UsageError("--syscalls: the system calls of an emulated Linux program "
                             "only (a kernel image makes none of its own; natively, use "
                             "strace)")
        if args.machine:
            return run_machine(args, write_trace)
        if args.target == "native":
            return run_native(self, args)
        if args.target == "gdb":
            from emutrace.cli.run_gdb import run_gdb

            return run_gdb(self, args)
        if args.target == "qiling":
            from emutrace.cli.run_qiling import run_qiling

            return run_qiling(self, args)
        process = Process(self.config(args))  # loaded, not yet run
        # the trace file is opened before the guest runs and never looked up again: a bad
        # -o is a usage error now, and a guest cannot swap a symlink in under its name
        args.traced = args.backend != "none"  # (False in a child --no-follow-forks leaves)
        args.output_place = OutputPlace(args.output) if args.output and args.traced else None
        args.output_file = open_output(args.output) if args.output and args.traced else None
        while True:  # one pass per image: the program, then what it execve()s
            trace = spill_trace(process) if args.traced else None
            args.syscall_events = []  # this image's (--syscalls)
            if args.syscalls and args.traced:
                syscalls.listen(process, args.syscall_events.append)
            follow_forks(process, args, trace)
            result = process.run()
            code = self.finish(result, args, trace)
            if result.next_process is None:
                break
            process = result.next_process
            if args.output and args.traced:  # the next image's trace: FILE.exec (.exec.exec…)
                args.output = f"{args.output}.exec"
                args.output_file = args.output_place.open(args.output)
        if result.guest_parent is not None:
            end_child(result)
        return code

    def finish(self, result: RunResult, args: argparse.Namespace,
               trace: SpillSink | None = None) -> int:
        """The trace (`trace`, or the result's records), the report line and the statistics
        of one image's run."""
        records: Sequence[Record] | SpillSink = trace if trace is not None else result.records
        write_error = None
        with stop_signals_deferred() as late:  # a Ctrl-C now must not lose the trace
            if args.backend != "none" and getattr(args, "traced", True):
                try:  # before the report: a crash keeps what was recorded
                    write_trace(result, args, records)
                except OutputError as e:
                    write_error = e  # after the report: how the guest ended is still said
            # a child's end is for its parent to report; an emulator crash is emutrace's
            if result.guest_parent is None or result.stop.kind == "crash":
                report(result)
        if write_error is not None:
            raise write_error
        if late.signal:
            print(f"emutrace: {late.signal} while writing the output (complete)", file=sys.stderr)
            return late.exit_code
        if args.stats:
            counts = ", ".join(f"{k}={v}" for k, v in sorted(result.syscall_counts.items()))
            print(f"emutrace: {result.syscalls} syscalls: {counts}", file=sys.stderr)
            if result.backend_stats:
                mech = ", ".join(f"{k}={v}" for k, v in result.backend_stats.items())
                print(f"emutrace: {args.backend}: {mech}", file=sys.stderr)
                print(f"emutrace: {len(records) // 2} calls traced", file=sys.stderr)
        return result.exit_code


class _NotNeeded(argparse.Action):
    """An option of uftrace's that has no use here: a usage error that says why."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        parser.error(f"{option_string}: not needed: emutrace never replaces a return "
                     "address, so every return is recorded where it happens")


def trace_options(args: argparse.Namespace) -> list[str]:
    """The trace's options given on the command line (what `--backend none` would ignore)."""
    given = [("-o", args.output is not None), ("-F", args.filter), ("-N", args.notrace),
             ("-T", args.trigger), ("-H", args.hide), ("-C", args.caller_filter),
             ("--trace", args.trace != "on"), ("--max-stack", args.max_stack is not None),
             ("--no-libcall", args.no_libcall),
             ("-D", args.depth is not None), ("-A", args.argument), ("-R", args.retval),
             ("--start", args.start is not None), ("--symbols", args.symbols),
             ("--tid", args.tid is not None), ("--syscalls", args.syscalls)]
    return [option for option, on in given if on]


def spill_trace(process: Process) -> SpillSink:
    """The run's records go to a temporary file, not a list: memory stays bounded whatever
    the trace's length (trace/spill.py)."""
    trace = SpillSink()
    process.sink = trace
    return trace


def follow_forks(process: Process, args: argparse.Namespace,
                 trace: SpillSink | None = None) -> None:
    """A forked child writes its own trace: to FILE.<pid> with -o FILE, else to stderr
    like its parent (each process's whole trace at its end).  With --no-follow-forks it
    writes none: it runs on untraced (cli/forks.py), and so do the images it execve()s."""
    def in_child(pid: int) -> None:
        if args.follow_forks is False:  # (None: not given, the default: followed)
            args.traced = False
            untraced_from_here(process)
            process.config = replace(process.config, trace_execs=False)
            if args.output_file is not None:
                args.output_file.close()  # the parent's file: nothing buffered yet
                args.output_file = None
            return
        if trace is not None:
            trace.for_child()
        args.syscall_events.clear()  # (the parent's)
        if args.output_file is not None:
            args.output_file.close()  # the parent's file: nothing buffered yet
            args.output = f"{args.output}.{pid}"
            args.output_file = args.output_place.open(args.output)

    process.kernel.fork_listeners.append(in_child)


def end_child(result: RunResult) -> NoReturn:
    """A forked child ends as the guest process ended, for its parent's wait4: with the
    guest's exit status, or killed by the guest's signal (no core: _become_child)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if result.stop.kind == "exit":
        os._exit(result.stop.status)
    # a stop without a signal of its own (--timeout, --max-insns): as if killed
    sig = int(getattr(signal, result.stop.signal or "SIGKILL", signal.SIGKILL))
    if sig != signal.SIGKILL:  # (SIGKILL's action cannot be set, nor blocked)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # a signal whose host action is not to end the process


def write_trace(result: RunResult, args: argparse.Namespace,
                records: Iterable[Record] | None = None) -> None:
    symbols = read_symbols(result.image)
    mode = args.demangle
    name = demangling(symbols.namer(result.image.isa.code_mask), mode)
    modules = result.image.modules

    def shown(spec: str) -> str:
        """A dynamic program's `lib:func` (libc:malloc, libc.so.6:malloc) → the name the
        trace shows for it (`malloc`, or `libc:malloc` where two modules define one)."""
        return (modules.resolve_name(spec) or spec) if modules is not None else spec

    start = shown_start(symbols, shown(args.start or "main"), mode)
    show = shown_by(mode)
    rules = filter_rules(args, lambda n: demangled(shown(n), mode),
                         (show(f.name) for f in symbols.funcs))
    options = ReplayOptions(rules=rules, depth=args.depth, start=start,
                            word_bits=8 * result.image.isa.identity.word_size,
                            arg_counts={demangled(f, mode): n for f, n in
                                        args.arg_counts.items()})  # the backend read the rest
    if result.guest_parent is None:  # (a forked child's image is its parent's: said once)
        for warning in unmatched_names(args, symbols, shown, result.image.path):
            print(f"emutrace: {warning}", file=sys.stderr)
    source = result.records if records is None else records
    events = getattr(args, "syscall_events", None)
    if events:  # --syscalls: each a call of linux:NAME where it was made
        source, name = merged(source, events, name)
    if args.tid is not None:
        source = only_threads(source, args.tid)
    if rules.callers:  # -C: the records that lead to a match, on a spill file of their own
        kept = SpillSink()
        kept.write(caller_kept(source, name, rules))
        source = kept
    if args.output_file is not None:
        try:
            with args.output_file as out:
                write_lines(source, name, options, out)
        except OSError as e:  # disk full, I/O error: the lines written so far stay in FILE
            raise OutputError(f"-o {args.output}: cannot write the trace "
                              f"({e.strerror or e}); it is cut short") from None
    else:  # stderr through a stream of its own whose writes are whole (cli/output.py)
        sys.stderr.flush()
        try:
            err = whole_writes(sys.stderr.fileno(), owned=False,
                               encoding=sys.stderr.encoding or "utf-8",
                               errors=sys.stderr.errors or "backslashreplace")
        except (OSError, ValueError):  # a stderr without a descriptor (an embedding's)
            err = sys.stderr
        try:
            write_lines(source, name, options, err)
            err.flush()
        except OSError as e:  # stderr redirected to a full disk, a file too large
            raise OutputError(f"cannot write the trace to stderr ({e.strerror or e}); it "
                              f"is cut short") from None
        finally:
            if err is not sys.stderr:
                with contextlib.suppress(OSError, ValueError):  # (said above, if it failed)
                    err.close()  # the stream only: descriptor 2 stays open


def unmatched_names(args: argparse.Namespace, symbols: SymbolTable,
                    shown: Callable[[str], str], program: str) -> list[str]:
    """A warning for each function pattern of the command line (-F, -N, -A, --start)
    that names no function of the program (cli/patterns.py)."""
    given = [*(getattr(args, "filter_specs", None) or ()),
             *(("-A", f) for f in args.arg_counts),
             *(("-A", f) for f in getattr(args, "arg_formats", {})),
             *([("--start", args.start)] if args.start is not None else [])]
    return unmatched(given, (f.name for f in symbols.funcs), args.demangle, program, shown,
                     args.match)


def only_threads(records: Iterable[Record], tids: frozenset[int]) -> SpillSink:
    """`--tid`: the records of these threads only, on a spill file of their own."""
    kept = SpillSink()
    kept.write(rec for rec in records if rec.tid in tids)
    return kept


def tid_list(text: str) -> frozenset[int]:
    """`--tid TID[,TID...]`: threads as `run`'s trace numbers them (0: the main thread)."""
    try:
        tids = frozenset(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TID[,TID...]") from None
    if any(t < 0 for t in tids):
        raise argparse.ArgumentTypeError(f"{text!r}: a thread number is 0 or more")
    return tids


def shown_start(symbols: SymbolTable, start: str, mode: str) -> str | None:
    """`--start SYM` as the trace shows it, or None where no function has that name
    (everything is shown)."""
    if symbols.by_name(start) is not None:
        return demangled(start, mode)
    show = shown_by(mode)
    return start if any(show(f.name) == start for f in symbols.funcs) else None


def write_lines(records: Iterable[Record], name: Callable[[int], str], options: ReplayOptions,
                out: TextIO) -> None:
    """The text trace into `out`: formatted in C where it can be (native/replaytext.py,
    the same bytes), else by the reference, line by line (a trace of depth d is O(d^2) text,
    uftrace's indentation: built as one string, emutrace's memory grew with its square)."""
    if not write_replay(records, name, options, out):
        out.writelines(line + "\n" for line in iter_replay_lines(records, name, options))
