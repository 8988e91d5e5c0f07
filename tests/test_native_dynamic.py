"""`run --target native` on dynamic programs (with the module map):
`testbins/x86_64/calls.dyn` (linked at a fixed address) and `calls.dynpie` (a PIE) run on
this host under ptrace with the host's ld.so and libc; ld.so's libraries are learnt from
/proc/PID/maps after each system call (target/native_modules.py).

Oracles:
* the program's own `-finstrument-functions` record (`calls.dyn.instr`, `calls.dynpie.instr`
  run directly on this host, no emutrace): the canonical trace of the program's own
  functions, for every native backend;
* hand counts derived from testbins/src/calls.c (tests/test_dynamic_backends.py's COUNTS:
  the program's functions and its PLT stubs `strcmp@plt`, `printf@plt`);
* the emulated run of the same program with the same backend (Unicorn, root / — the same
  host libraries): equal over the program's module (its functions and PLT stubs).  Not
  over ld.so and libc: glibc chooses code by the CPU it runs on (ld.so's
  init_cpu_features and cache-size probing by CPUID, IFUNC variants such as
  `__strcmp_sse42` under Unicorn vs `__strcmp_evex` here, the glibc-hwcaps directories
  searched for the host's x86-64 level), and unnamed code (libc's IRELATIVE PLT stubs)
  prints as addresses, which differ because the host kernel and emulation place the
  libraries differently;
* supporting: the whole native trace (every module) is the same for int3 lazy and strict,
  hwbp, btf and step (step sees every instruction).  entry is left out of that one, as
  under emulation (tests/test_dynamic_backends.py test_entry_on_a_dynamic_program).

i386: the host has no i386 ld.so (/lib/ld-linux.so.2) nor libc: the Debian root of i386
(.cache/rootfs/i386, scripts/setup.sh) has, and its ld.so is run explicitly with its library
directories (target/native_interp.py); the program is then mapped by ld.so, not the kernel.
The same oracles: the `.instr` twin run directly through that ld.so, the hand counts, and
the emulated run with that root (`--root .cache/rootfs/i386`: the same libraries).  Without
the root the capability table says so (`native_dynamic`) and the tests of i386 are strict
xfails reading it."""

from __future__ import annotations

import functools
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from emutrace.discover.modules import short_name
from emutrace.discover.symbols import read_symbols
from emutrace.errors import UsageError
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.native_session import NativeProcess
from emutrace.rootfs import setup_root
from emutrace.session import Process, RunConfig, RunResult
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record
from emutrace.trace.events import Entry
from tests.conftest import ENV, TESTBINS, run_emutrace
from tests.test_dynamic_backends import COUNTS
from tests.test_dynamic_pie import record_namer

PROGRAMS = ("calls.dyn", "calls.dynpie")
BACKENDS = (("int3", "lazy"), ("int3", "strict"), ("hwbp", "lazy"), ("btf", "lazy"),
            ("entry", "lazy"), ("step", "lazy"))
SCENARIO = "recursion"


def native_dynamic_gap(isa: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capability(Cap.NATIVE_DYNAMIC)
    return [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]


ISAS = [pytest.param(i, marks=native_dynamic_gap(i)) for i in ("x86_64", "i386")]


def strict_works(isa: str) -> bool:
    return by_name(isa).capability(Cap.NATIVE_DYNAMIC_STRICT).works


def strict_gap(isa: str, cleanup: str) -> list[pytest.MarkDecorator]:
    """int3 --cleanup strict where `native_dynamic_strict` says no: a strict xfail (the
    run is refused before it starts: a usage error)."""
    cap = by_name(isa).capability(Cap.NATIVE_DYNAMIC_STRICT)
    return [pytest.mark.xfail(reason=cap.reason, strict=True, raises=UsageError)] \
        if cleanup == "strict" and not cap.works else []


CASES = [pytest.param(isa, backend, cleanup, id=f"{isa}-{backend}-{cleanup}",
                      marks=native_dynamic_gap(isa) + strict_gap(isa, cleanup))
         for isa in ("x86_64", "i386") for backend, cleanup in BACKENDS]


def direct(program: Path, isa: str) -> list[str]:
    """The command line running `program` as a direct run does: the host's kernel and
    ld.so for x86_64; for i386 the Debian root's ld.so, explicitly, with its libraries."""
    if isa == "x86_64":
        return [str(program)]
    root = setup_root(isa)
    assert root is not None
    return [str(root / "lib" / "ld-linux.so.2"), "--library-path",
            f"{root}/lib/i386-linux-gnu:{root}/usr/lib/i386-linux-gnu", str(program)]


def emulation_root(isa: str) -> str:
    """The root an emulated run of the same program takes its libraries from."""
    return "/" if isa == "x86_64" else str(setup_root(isa))


def ld_so_name(isa: str) -> str:
    return short_name("/lib64/ld-linux-x86-64.so.2" if isa == "x86_64" else "/lib/ld-linux.so.2")


def namer(process: Process | NativeProcess) -> Callable[[int], str]:
    table = read_symbols(process.image)

    def name(addr: int) -> str:
        f = table.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


@functools.cache
def native(program: str, backend: str, cleanup: str,
           isa: str = "x86_64") -> tuple[NativeProcess, RunResult]:
    process = NativeProcess(RunConfig(str(TESTBINS / isa / program), [SCENARIO],
                                      backend=backend, cleanup=cleanup))
    result = process.run()
    assert result.stop.kind == "exit" and result.exit_code == 0
    return process, result


@functools.cache
def own_record(program: str, isa: str = "x86_64") -> tuple[str, set[str]]:
    """The canonical trace of the .instr twin's own record, run directly, and its
    function names."""
    instr = TESTBINS / isa / f"{program}.instr"
    text = subprocess.run([*direct(instr, isa), SCENARIO], capture_output=True, timeout=60,
                          env=ENV).stderr.decode()
    record = parse_instr_record(text)
    name = record_namer(instr, record)
    functions = {name(addr) for _, addr in record}
    assert {"main", "run_scenario", "fact", "fib"} <= functions
    return canonical_from_instr(text, name, functions), functions


def program_names(process: Process | NativeProcess) -> frozenset[str]:
    """The program module's functions and PLT stubs (its `Module.names`)."""
    modules = process.image.modules
    assert modules is not None
    return next(m.names for m in modules.modules if m.path == process.config.program)


# The backends that single-step or block-step (PTRACE_SINGLESTEP/SINGLEBLOCK: a stop per
# instruction or block, measured at ~65-115 µs each on CI's kind of machine; ld.so's and
# libc's start-up alone is ~120,000 steps, 10-20 s a run) trace the PIE only: where the
# program lies reaches them through discovery, which the int3 and entry cells check on
# both programs.
STEPPED = ("hwbp", "btf", "step")
RECORD_CASES = [pytest.param(*case.values, program, id=f"{case.id}-{program}",
                             marks=case.marks)
                for case in CASES for program in PROGRAMS
                if program == "calls.dynpie" or case.values[1] not in STEPPED]


@pytest.mark.parametrize(("isa", "backend", "cleanup", "program"), RECORD_CASES)
def test_native_dynamic_equals_own_record_and_hand_counts(isa: str, program: str,
                                                          backend: str, cleanup: str) -> None:
    process, result = native(program, backend, cleanup, isa)
    name = namer(process)
    want, functions = own_record(program, isa)
    assert canonical_text(result.records, name, functions) == want
    got = Counter(n for r in result.records if isinstance(r, Entry)
                  and (n := name(r.func)) in COUNTS)
    assert got == COUNTS
    assert {m.name for m in process.image.modules.modules} >= {  # type: ignore[union-attr]
        "libc", ld_so_name(isa), program}


@pytest.mark.parametrize(("isa", "backend", "cleanup"), CASES)
def test_native_dynamic_equals_emulated_over_the_program(isa: str, backend: str,
                                                         cleanup: str) -> None:
    """calls.dynpie, natively and under emulation with the same backend: the same trace of
    the program's functions and PLT stubs (the library part differs: the docstring)."""
    process, result = native("calls.dynpie", backend, cleanup, isa)
    emulated = Process(RunConfig(str(TESTBINS / isa / "calls.dynpie"), [SCENARIO],
                                 root=emulation_root(isa), backend=backend, cleanup=cleanup),
                       warn=lambda m: None)
    emulated_result = emulated.run()
    keep = program_names(process)
    assert keep == program_names(emulated) and "printf@plt" in keep
    text = canonical_text(result.records, namer(process), keep)
    assert text.count("\n") > 1000
    assert text == canonical_text(emulated_result.records, namer(emulated), keep)


@pytest.mark.parametrize("isa", ISAS)
def test_native_dynamic_backends_agree_on_every_module(isa: str) -> None:
    """(On the PIE, where every backend runs: STEPPED above.)"""
    program = "calls.dynpie"
    truth = canonical_text(native(program, "step", "lazy", isa)[1].records,
                           namer(native(program, "step", "lazy", isa)[0]))
    assert truth.count("\n") > 2000 and "> __libc_start_main" in truth
    for backend, cleanup in BACKENDS:
        if backend in ("step", "entry") or cleanup == "strict" and not strict_works(isa):
            continue  # (strict where refused: the strict xfails above)
        process, result = native(program, backend, cleanup, isa)
        assert canonical_text(result.records, namer(process)) == truth, (backend, cleanup)


@pytest.mark.parametrize("isa", ISAS)
def test_libraries_are_known_before_their_first_instruction(isa: str) -> None:
    """Every instruction calls.dyn executes natively (a range hook over everything: the
    tracee is single-stepped) lies in a module the map holds at that moment: libc is
    learnt at ld.so's mmap, before relocation runs its IFUNC resolvers.  (ld.so's
    debugger hook `_dl_debug_state` would be too late: glibc calls it with RT_CONSISTENT
    after relocation.)  i386: the program too is mapped by ld.so (run explicitly), and
    known before its first instruction; i386 glibc enters the kernel through the vDSO's
    __kernel_vsyscall (no file behind it, so no module): those instructions are the ones
    outside, and all lie in the [vdso] mapping."""
    process = NativeProcess(RunConfig(str(TESTBINS / isa / "calls.dyn"), [SCENARIO],
                                      backend="int3"))
    modules = process.image.modules
    assert modules is not None
    outside: list[int] = []
    first_in: dict[str, int] = {}

    def each(_uc: object, pc: int, _size: int, _data: object) -> None:
        module = modules.module_of(pc)
        if module is None:
            outside.append(pc)
        else:
            first_in.setdefault(module.name, pc)
    with open(f"/proc/{process.pid}/maps") as f:
        vdso = [range(*(int(x, 16) for x in line.split()[0].split("-")))
                for line in f if line.rstrip().endswith("[vdso]")]
    process.target.hook_code(each, 1, 0)
    assert process.run().exit_code == 0
    if isa == "x86_64":
        assert outside == []
    else:
        assert outside and all(pc in vdso[0] for pc in outside)
    assert set(first_in) == {ld_so_name(isa), "calls.dyn", "libc"}


@pytest.mark.parametrize("confined", [False, True])
@pytest.mark.parametrize("isa", ISAS)
def test_native_dynamic_cli_output_equals_a_direct_run(tmp_path: Path, isa: str,
                                                       confined: bool) -> None:
    """Through the CLI, confined (the root's files are readable: they lie under /) or
    not: stdout and status as the program run directly; the trace names the program's
    calls into libc through its PLT."""
    program = TESTBINS / isa / "calls.dynpie"
    want = subprocess.run([*direct(program, isa), SCENARIO], capture_output=True,
                          timeout=60, env=ENV)
    r = run_emutrace("run", "--target", "native", *(() if confined else ("--unconfined",)),
                     "--backend", "int3", program, SCENARIO, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (want.returncode, want.stdout) == (0, want.stdout)
    assert "printf@plt(" in r.stderr.decode()
    assert "sandbox" not in r.stderr.decode()


@pytest.mark.parametrize("isa", ISAS)
def test_native_dynamic_by_capability(isa: str) -> None:
    """What the capability table claims: calls.dyn runs natively and traces its own
    functions as its own record shows them (i386: through the Debian root's ld.so; a
    strict xfail without that root, refused before anything runs)."""
    try:
        process, result = native("calls.dyn", "int3", "lazy", isa)
    except UsageError as e:
        pytest.fail(str(e))
    want, functions = own_record("calls.dyn", isa)
    assert canonical_text(result.records, namer(process), functions) == want


@pytest.mark.parametrize("isa", [pytest.param("i386", marks=native_dynamic_gap("i386"))])
def test_native_dynamic_confined_in_its_root(isa: str) -> None:
    """Debian's own `echo` run natively from inside its root with `--root .`, confined: the
    root's ld.so is given guest paths (the sandbox resolves them in the root); echo prints
    its arguments (echo(1)).  A program outside a confined --root is refused (64): the
    root's ld.so, opening it as the guest, could not reach it."""
    root = setup_root(isa)
    assert root is not None
    r = run_emutrace("run", "--target", "native", "--root", ".", "--backend", "int3",
                     "bin/echo", "hi", "there", cwd=root)
    assert (r.returncode, r.stdout) == (0, b"hi there\n")
    assert "__libc_start_main" in r.stderr.decode()
    r = run_emutrace("run", "--target", "native", "--root", str(root), "--backend", "int3",
                     TESTBINS / isa / "calls.dyn", SCENARIO)
    assert r.returncode == 64 and b"outside --root" in r.stderr
