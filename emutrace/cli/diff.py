"""`emutrace diff`: the same program on several ISAs (or several recordings) must give the
same call trace; show where it does not.

    emutrace diff [--arch all|LIST] [options] 'testbins/{isa}/isadep char'
    emutrace diff DIR DIR [DIR...]

The program form runs the template once per ISA (`{isa}` substituted, as `emutrace bench`
does), in-process with the int3 backend, the guest's stdio silenced; an ISA emulation does
not run goes to the gdb target (qemu-user's stub, gdb_session.py), which needs
`--unconfined`, and then `--arch all` takes those ISAs too.  What is compared:
`trace/diff.py` (tokens, value normalisation); which functions: `Selection` below.  Exit 0
when every trace is equal, 1 when some differ, 64 on bad usage.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from emutrace.benchgrid.machine import guest_stdio_silenced
from emutrace.benchgrid.spec import expand, parse_arches
from emutrace.cli import options
from emutrace.cli.viewing import shown_names
from emutrace.discover.demangle import demangled, demangling, filter_names
from emutrace.discover.prototypes import read_prototypes
from emutrace.discover.symbols import read_symbols
from emutrace.errors import EXIT_NO_INPUT, EmutraceError, UsageError
from emutrace.gdb_session import GdbProcess
from emutrace.isa import MODULES, by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.trace.diff import Trace, classes, describe, first_divergence, matrix, normalise
from emutrace.trace.events import Record
from emutrace.trace.uftrace_read import load_recording, recorded_program

EXIT_EQUAL, EXIT_DIFFERENT = 0, 1


@dataclass(frozen=True)
class Selection:
    """Which functions are compared.  Default: the program's own — defined in a DWARF
    compile unit whose source is not a system path (`prototypes.is_system_source`); a
    program without DWARF: every function with a symbol.  `--keep` adds names matching a
    regex, `--drop` removes them (drop wins), `--all-functions` takes every named one."""

    own: frozenset[str]
    keep: re.Pattern[str] | None = None
    drop: re.Pattern[str] | None = None
    all_functions: bool = False

    def __call__(self, name: str) -> bool:
        if self.drop is not None and self.drop.search(name):
            return False
        if self.keep is not None and self.keep.search(name):
            return True
        if name.startswith("0x"):
            return False  # no symbol: a PLT slot, a stub
        return self.all_functions or not self.own or name in self.own


def _regex(text: str | None, option: str) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        raise UsageError(f"{option} {text!r}: {e}") from None


def _load_recording(path: str, demangle: str) -> tuple[Iterable[Record], Callable[[int], str],
                                                     str]:
    """(records, symbolize, ISA name) of a data directory written by `emutrace record`, its
    names demangled by `demangle` and safe to print (control characters escaped)."""
    records, symbolize, isa = load_recording(path)
    return records, shown_names(symbolize, demangle), isa


def _types(path: str, demangle: str) -> tuple[frozenset[str], dict[str, bool]]:
    """The program's own functions (`Selection.own`) and whether each function with a
    DWARF prototype returns a value (not `void`: `normalise`'s `returns`), by name as the
    trace shows it."""
    types = read_prototypes(path)
    returns = {demangled(name, demangle): proto.ret.kind != "void"
               and not _structor(demangled(name, "simple"))
               for name, proto in types.by_name.items()}
    return frozenset(filter_names(types.own, demangle)), returns


def _structor(name: str) -> bool:
    """A C++ constructor or destructor (`geo::Rect::Rect`, `geo::Rect::~Rect`): compared as
    returning nothing, as on most ISAs; the Arm C++ ABI (IHI 0041, §3.1.5) has them return
    `this`, and GCC's DWARF for arm says so."""
    parts = name.split("::")
    return len(parts) > 1 and parts[-1].lstrip("~") == parts[-2]


PROGRAM_CAP = 1 << 30  # the largest program file whose DWARF `diff` reads for its functions


def _a_program(path: str) -> bool:
    """The program a recording names (`exename:`, any text): read only when it is a
    regular file of a program's size (not a FIFO, a device, /proc/kcore)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and 0 < st.st_size <= PROGRAM_CAP


class DiffCommand:
    name = "diff"
    help = "compare the call traces of one program built for several ISAs (or recordings)"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.epilog = ("exit status: 0 all traces equal; 1 some differ; 64 bad usage.  "
                    "Compared by default: the program's own functions (DWARF compile units "
                    "not under a system path; without DWARF every named function), entered "
                    "under --start, with their nesting, arguments and return values "
                    "(integers by value, pointers as 'ptr'); each thread apart, threads "
                    "matched by their order of creation; a GCC part (f.cold, f.part.N) "
                    "as its function f; a void function's return without a value.")
        p.add_argument("--arch", default="all", metavar="all|ISA,...",
                       help="ISAs to run the template for (default all)")
        p.add_argument("--keep", metavar="REGEX",
                       help="also compare functions whose name matches REGEX")
        p.add_argument("--drop", metavar="REGEX",
                       help="do not compare functions whose name matches REGEX (wins over "
                            "--keep)")
        p.add_argument("--all-functions", action="store_true",
                       help="compare every named function (libc internals included)")
        p.add_argument("--no-values", action="store_true",
                       help="compare names and nesting only, not argument or return values")
        p.add_argument("--start", default="main", metavar="SYM",
                       help="compare nothing before SYM is first entered (default: main)")
        p.add_argument("--unconfined", action="store_true",
                       help="run the ISAs emulation does not run in qemu-user's gdb stub "
                            "(with your rights, no sandbox); --arch all then takes them too")
        options.add_demangle_option(p)
        p.add_argument("--max-insns", type=int, default=0, metavar="N",
                       help="stop each run after N guest instructions")
        p.add_argument("--timeout", type=float, default=0.0, metavar="S",
                       help="stop each run after S seconds")
        p.add_argument("what", nargs="+", metavar="PROGRAM|DIR",
                       help="a command line template with {isa}, e.g. "
                            "'testbins/{isa}/isadep char' (quoted), or two or more "
                            "recording directories")

    def __call__(self, args: argparse.Namespace) -> int:
        keep = _regex(args.keep, "--keep")
        drop = _regex(args.drop, "--drop")
        values = not args.no_values
        traces: dict[str, Trace] = {}
        if all(Path(w).is_dir() for w in args.what):
            if len(args.what) < 2:
                raise UsageError("diff: give two or more recordings, or one program template")
            for path in args.what:
                records, symbolize, _isa = _load_recording(path, args.demangle)
                # the program's own functions, when the recorded program is still there
                exe = recorded_program(path)
                own, returns = _types(exe, args.demangle) if exe and _a_program(exe) \
                    else (frozenset(), {})
                select = Selection(own, keep, drop, args.all_functions)
                traces[path] = normalise(records, symbolize, select,
                                         demangled(args.start, args.demangle),
                                         values=values, returns=returns)
        else:
            template = args.what[0] if len(args.what) == 1 else shlex.join(args.what)
            if "{isa}" not in template:
                raise UsageError(f"diff: the program template {template!r} has no {{isa}}")
            arches = _arches(args.arch, args.unconfined)
            programs = {isa: expand(template, isa) for isa in arches}
            for isa, prog in programs.items():
                if prog.missing:
                    raise EmutraceError(f"{prog.path}: no such file (--arch {isa})",
                                        EXIT_NO_INPUT)
            for isa, prog in programs.items():
                traces[isa] = self._trace(isa, prog.argv, keep, drop, args, values)
        return report(traces, sys.stdout)

    @staticmethod
    def _trace(isa: str, argv: tuple[str, ...], keep: re.Pattern[str] | None,
               drop: re.Pattern[str] | None, args: argparse.Namespace, values: bool) -> Trace:
        config = RunConfig(program=argv[0], args=argv[1:], arch=isa, backend="int3",
                           max_insns=args.max_insns, timeout=args.timeout)
        with guest_stdio_silenced():
            if _emulated(isa):
                result = Process(config, warn=lambda m: None).run()
            else:
                result = GdbProcess(config).run()
        name = demangling(read_symbols(result.image).namer(result.image.isa.code_mask),
                          args.demangle)
        own, returns = _types(result.image.path, args.demangle)
        select = Selection(own, keep, drop, args.all_functions)
        return normalise(result.records, name, select, demangled(args.start, args.demangle),
                         result.exit_code, values,
                         8 * result.image.isa.identity.word_size, returns)


def _emulated(isa: str) -> bool:
    return by_name(isa).capability(Cap.RUN_STATIC).works


def _arches(text: str, unconfined: bool) -> list[str]:
    """--arch's ISAs: `all` is every ISA emulation runs, and with --unconfined every one
    the gdb target runs too; an ISA only the gdb target runs asks for --unconfined."""
    if text.strip() == "all" and unconfined:
        return [m for m in MODULES if _emulated(m)
                or by_name(m).capability(Cap.GDB_TARGET).works]
    arches = parse_arches(text)
    for isa in arches:
        if not _emulated(isa) and not unconfined:
            raise UsageError(f"diff --arch {isa}: {isa} runs in qemu-user's gdb stub only "
                             f"(emulation: {by_name(isa).capability(Cap.RUN_STATIC).reason}); "
                             f"say --unconfined")
    return arches


def report(traces: dict[str, Trace], out: object) -> int:
    """Print the verdict; the exit status."""
    write = out.write  # type: ignore[attr-defined]
    names = list(traces)
    groups = classes(traces)
    if len(groups) == 1:
        calls = sum(1 for t in traces[names[0]].tokens if t.kind == "call")
        write(f"equal: {len(names)} traces ({' '.join(names)}), {calls} compared calls each\n")
        return EXIT_EQUAL
    write(f"different: {len(groups)} distinct traces over {len(names)}\n")
    labels = [chr(ord("A") + i) if i < 26 else f"#{i}" for i in range(len(groups))]
    for label, group in zip(labels, groups, strict=True):
        write(f"  {label}: {' '.join(group)}\n")
    ref = groups[0][0]
    for label, group in zip(labels[1:], groups[1:], strict=True):
        other = group[0]
        at = first_divergence(traces[ref], traces[other])
        assert at is not None
        width = max(len(ref), len(other))
        write(f"first divergence, {labels[0]} vs {label} (event {at + 1}):\n")
        write(f"  {ref:<{width}}  {describe(traces[ref], at)}\n")
        write(f"  {other:<{width}}  {describe(traces[other], at)}\n")
    if len(names) > 2:
        write("\n".join(matrix(names, groups)) + "\n")
    return EXIT_DIFFERENT
