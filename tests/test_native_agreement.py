"""Agreement across targets: the canonical trace of a program run natively
(`--target native`, ptrace) equals its trace under emulation (Unicorn), for every native
backend (int3 lazy and strict, hwbp, btf, entry, step), on x86_64 and i386, over the
committed testbins that run natively.

What is compared: the whole trace of the freestanding programs (counts, edge_callmem,
edge_pcthunk, hello_fs: no libc, so nothing of the host CPU leaks in); for programs linked
with static glibc, the program's own functions — the names its C source defines
(testbins/src/<name>.c, read here with a regular expression, not from emutrace), because
glibc's start-up follows the CPU it runs on (CPUID-driven IFUNC and cache-size code:
`intel_check_word`, `__memcpy_evex…` natively vs Unicorn's model).  The two runs are
independent deliveries of the same backend algorithm (real 0xCC traps, debug registers,
PTRACE_SINGLESTEP/SINGLEBLOCK vs Unicorn hooks); tests/test_native_target.py and
tests/test_native_dynamic.py hold the oracles from outside emutrace (own records, hand
counts).  Dynamic programs: tests/test_native_dynamic.py.

Not here: `threads`/`threadwait` (refused natively: threads), `hard_*` (they probe
emulation's limits: --max-insns, --max-memory), `signals` (it forks; natively the children
run untraced), `calls.stripped` (no names to compare).  Signal handlers natively
(`native_signal_handlers`, target/ptrace_signals.py): `sigctx` for every backend; where the
capability says no, a strict xfail for the backends that need to be told of a handler's
frame."""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Callable

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.native_session import NativeProcess
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_text
from tests.conftest import TESTBINS

BACKENDS = (("int3", "lazy"), ("int3", "strict"), ("hwbp", "lazy"), ("btf", "lazy"),
            ("entry", "lazy"), ("step", "lazy"))
PROGRAMS = {  # program → arguments, per ISA (the testbins each ISA has)
    "x86_64": [("calls", ["recursion"]), ("calls.pie", ["recursion"]), ("counts", []),
               ("edge_callmem", []), ("hello_fs", []), ("fib", ["10"]), ("typed", []),
               ("realcalls", []), ("isadep", [])],
    "i386": [("calls", ["recursion"]), ("calls.pie", ["recursion"]), ("edge_pcthunk", []),
             ("hello_fs", []), ("fib", ["10"]), ("typed", []), ("realcalls", []),
             ("isadep", [])],
}
# a function definition at the start of a line: `type name(` not ending in `;`
DEFINITION = re.compile(r"^[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\s*\([^;]*$", re.M)


def source_functions(program: str) -> set[str]:
    base = program.split(".")[0]
    names: set[str] = set()
    for src in (TESTBINS / "src" / f"{base}.c", TESTBINS / "src" / f"{base}_tail.c"):
        if src.exists():
            names |= set(DEFINITION.findall(src.read_text()))
    return names


def namer(process: Process | NativeProcess) -> Callable[[int], str]:
    table = read_symbols(process.image)

    def name(addr: int) -> str:
        f = table.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


@functools.cache
def traces(isa: str, program: str, args: tuple[str, ...], backend: str,
           cleanup: str) -> tuple[str, str, int, int]:
    """(native text, emulated text, native exit, emulated exit)."""
    path = str(TESTBINS / isa / program)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:  # realcalls writes files into its cwd
        os.chdir(scratch)
        try:
            return _traces(path, program, args, backend, cleanup)
        finally:
            os.chdir(here)


def _traces(path: str, program: str, args: tuple[str, ...], backend: str,
            cleanup: str) -> tuple[str, str, int, int]:
    native = NativeProcess(RunConfig(path, list(args), backend=backend, cleanup=cleanup))
    got = native.run()
    emulated = Process(RunConfig(path, list(args), backend=backend, cleanup=cleanup),
                       warn=lambda m: None)
    want = emulated.run()
    table = read_symbols(native.image)
    keep = None  # freestanding: the whole trace
    if table.by_name("__libc_start_main") is not None:
        keep = source_functions(program) & {f.name for f in table.funcs}
        assert "main" in keep
    return (canonical_text(got.records, namer(native), keep),
            canonical_text(want.records, namer(emulated), keep), got.exit_code,
            want.exit_code)


CASES = [pytest.param(isa, program, tuple(args), backend, cleanup,
                      id=f"{isa}-{program}-{backend}-{cleanup}")
         for isa, programs in PROGRAMS.items() for program, args in programs
         for backend, cleanup in BACKENDS]


@pytest.mark.parametrize(("isa", "program", "args", "backend", "cleanup"), CASES)
def test_native_trace_equals_emulated(isa: str, program: str, args: tuple[str, ...],
                                      backend: str, cleanup: str) -> None:
    native, emulated, native_exit, emulated_exit = traces(isa, program, args, backend,
                                                          cleanup)
    assert native_exit == emulated_exit
    assert native.count("\n") >= 2 and native.startswith(("> main", "> _start", "> "))
    assert native == emulated


def signal_gap(isa: str, backend: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capability(Cap.NATIVE_SIGNAL_HANDLERS)
    if cap.works or backend == "entry":  # entry probes every entry: it needs no telling
        return []
    return [pytest.mark.xfail(reason=cap.reason, strict=True)]


@pytest.mark.parametrize(("isa", "backend", "cleanup"), [
    pytest.param(isa, backend, cleanup, marks=signal_gap(isa, backend))
    for isa in PROGRAMS for backend, cleanup in BACKENDS])
def test_native_signal_handlers_equal_emulated(isa: str, backend: str, cleanup: str) -> None:
    """sigctx's handlers (SIGUSR1/2, SIGSEGV on the altstack, SIGALRM) in the trace of
    its own functions, natively as under emulation (where the Linux layer tells the
    backend of each handler frame)."""
    native, emulated, native_exit, emulated_exit = traces(isa, "sigctx", (), backend,
                                                          cleanup)
    assert native_exit == emulated_exit
    assert "> on_segv" in emulated
    assert native == emulated
