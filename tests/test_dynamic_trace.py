"""Tracing dynamic programs: a program linked against the Debian cross glibc,
run with `--root` the cross sysroot, is traced across its modules.

* Oracle 1, every ISA: `calls.dyn.instr` (the same objects, -finstrument-functions, linked
  dynamically) records its own calls under `qemu-<isa>-static -L ROOT`; the canonical trace
  of our int3 run of the plain `calls.dyn`, over the program's own functions, equals it.
  The `qsort` scenario: libc's qsort calls back into the program (a call from a library
  module into the main one).
* Oracle 2, x86_64: Debian's uftrace records the library calls the program makes (its PLT
  hooks) natively; the functions our trace shows called through the PLT from the program's
  own functions are the same, in the same order.
* PLT names: `func@plt` for every stub equals what the cross binutils name it
  (`objdump -d`; mips: `readelf -A`; tests/plt_oracles.py).
* Backends agree (int3, step, bts, btf) on the whole trace of a dynamic run.

An ISA where tracing dynamic programs does not work is a strict xfail read from the
capability table (`trace_dynamic`)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from emutrace.discover.modules import plt_symbols
from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record
from emutrace.trace.events import Entry
from tests.conftest import ENV, ISAS, REPO, TESTBINS, qemu_binary
from tests.plt_oracles import plt_names
from tests.test_dynamic import sysroot


def gap(isa: str, capability: Cap = Cap.TRACE_DYNAMIC) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capabilities[capability]
    return [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]


def file_namer(path: Path) -> Callable[[int], str]:
    syms = read_symbols(load_image(str(path), dynamic=True))

    def name(addr: int) -> str:
        f = syms.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


def namer(process: Process) -> Callable[[int], str]:
    """Names as the trace shows them: every module's symbols."""
    table = read_symbols(process.image)

    def name(addr: int) -> str:
        f = table.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


@functools.cache
def traced(isa: str, scenario: str, backend: str = "int3", program: str = "calls.dyn",
           **options: object) -> Process:
    """One traced run of a dynamic testbin, shared by the tests that look at it (a dynamic
    run traces ld.so's start-up too: seconds)."""
    config = RunConfig(str(TESTBINS / isa / program), [scenario], root=str(sysroot(isa)),
                       backend=backend, **options)  # type: ignore[arg-type]
    process = Process(config, warn=lambda m: None)
    result = process.run()
    assert result.stop.kind == "exit" and result.stop.status == 0
    return process


@pytest.mark.parametrize("isa", [pytest.param(i, marks=gap(i)) for i in ISAS])
def test_dynamic_trace_equals_self_record(isa: str) -> None:
    instr = TESTBINS / isa / "calls.dyn.instr"
    record = subprocess.run([qemu_binary(isa), "-L", str(sysroot(isa)), str(instr), "qsort"],
                            capture_output=True, timeout=120, env=ENV).stderr.decode()
    instr_name = file_namer(instr)
    program_functions = {instr_name(addr) for _, addr in parse_instr_record(record)}
    assert {"main", "run_scenario", "compare_ints"} <= program_functions
    want = canonical_from_instr(record, instr_name, program_functions)

    process = traced(isa, "qsort")
    name = namer(process)
    got = canonical_text(process.records, name, program_functions)
    assert got == want
    # the program's calls into libc went through its PLT stubs, named
    names = {name(r.func) for r in process.records if isinstance(r, Entry)}
    assert process.image.isa.plt is None or "printf@plt" in names


def plt_calls(process: Process) -> list[str]:
    """The functions the program's own code called through its PLT under `main`, in
    order: stubs entered from a frame of the main module that is not itself a stub."""
    table = read_symbols(process.image)
    assert process.image.modules is not None
    main = process.image.modules.modules[0]

    def name(addr: int) -> str:
        f = table.containing(addr)
        return f.name if f is not None else hex(addr)
    out: list[str] = []
    stack: list[int] = []
    for rec in process.records:
        if isinstance(rec, Entry):
            caller = stack[-1] if stack else None
            callee = name(rec.func)
            if callee.endswith("@plt") and caller is not None and "main" in map(name, stack) \
                    and main.start <= caller < main.end and not name(caller).endswith("@plt"):
                out.append(callee.removesuffix("@plt"))
            stack.append(rec.func)
        else:
            stack.pop()
    return out


@pytest.mark.skipif(shutil.which("uftrace") is None, reason="uftrace not installed")
def test_library_calls_equal_uftrace(tmp_path: Path) -> None:
    """Debian's uftrace (0.13), natively on the same x86_64 binary with `--force` (no
    instrumentation: it hooks the PLT), records every library call the program makes; the
    stubs our trace shows entered from the program's own code under `main` are the same
    calls in the same order."""
    program = TESTBINS / "x86_64" / "calls.dyn"
    data = tmp_path / "uftrace.data"
    subprocess.run(["uftrace", "record", "--force", "-d", str(data), str(program),
                    "qsort"], capture_output=True, timeout=120, check=True, env=ENV,
                   cwd=tmp_path)
    replay = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-f",
                             "none"], capture_output=True, text=True, timeout=60,
                            check=True, env=ENV).stdout
    want = re.findall(r"(\w+)\(\)", replay)
    assert "qsort" in want and "strcmp" in want and "printf" in want
    assert plt_calls(traced("x86_64", "qsort")) == want


@pytest.mark.parametrize("isa", [pytest.param(i, marks=gap(i, Cap.PLT_NAMES)) for i in ISAS])
def test_plt_names_equal_objdump(isa: str) -> None:
    """Each stub we name carries the name the cross binutils give it (tests/plt_oracles.py:
    BFD's synthetic `@plt` symbols read from the PLT, the linker's stub labels checked
    against the slot each stub loads, mips's `readelf -A` GOT); in the programs (non-PIE
    and PIE), every stub is named."""
    triple = by_name(isa).identity.triple
    for path, every in ((TESTBINS / isa / "calls.dyn", True),
                        (TESTBINS / isa / "calls.dynpie", True),
                        (sysroot(isa) / "lib" / triple / "libc.so.6", False),
                        (sysroot(isa) / "lib" / "libc.so.6", False)):
        if not path.exists():
            continue
        want = plt_names(isa, path)
        with open(path, "rb") as fh:
            got = {f.start: f.name for f in plt_symbols(ELFFile(fh), by_name(isa), 0)}
        if every:
            assert got == want and len(got) > 10
        else:  # a library: all its stubs or none (ARM libc's Thumb entry stubs: README)
            assert got == want or not got


def test_mips_calls_through_the_got_reach_libc_directly() -> None:
    """o32 code calls a library function through its GOT slot, which holds the lazy stub
    until ld.so binds it (SYSV MIPS psABI): the first printf shows as `printf@plt` (the
    resolver under it enters printf), every later one as printf called straight from the
    program's own function."""
    process = traced("mips", "qsort")
    name = namer(process)
    stack: list[str] = []
    calls: list[tuple[str, str]] = []  # (callee, caller) of every printf / printf@plt
    for rec in process.records:
        if isinstance(rec, Entry):
            callee = name(rec.func)
            if callee in ("printf", "printf@plt"):
                calls.append((callee, stack[-1]))
            stack.append(callee)
        else:
            stack.pop()
    program = {"run_scenario", "scenario_qsort", "print_ints"}
    assert calls[0] == ("printf@plt", "run_scenario") and calls[1][0] == "printf"
    assert len(calls) > 20 and all(c == "printf" and p in program for c, p in calls[2:])


@pytest.mark.parametrize("isa", ["ppc64le", "mipsel"])
def test_stripped_modules_stubs_named(isa: str) -> None:
    """Debian's libraries and programs are stripped: no linker stub symbols.  ppc64le's
    ELFv2 call stubs are found by their code, each named by the PLT slot it loads — every
    one the disassembly shows (the oracle takes the TOC from a global entry's own
    computation of it); mipsel's from .dynsym — every one `readelf -A` lists.  Debian's
    `sort` (.cache/rootfs, scripts/setup.sh) and the cross sysroot's libc and ld.so."""
    triple = by_name(isa).identity.triple
    paths = [REPO / ".cache" / "rootfs" / isa / "usr" / "bin" / "sort",
             sysroot(isa) / "lib" / "libc.so.6",
             next(p for p in (sysroot(isa) / "lib").glob("ld*.so.*"))]
    assert paths[0].exists(), "run scripts/setup.sh"
    for path in paths:
        want = plt_names(isa, path)
        with open(path, "rb") as fh:
            assert ELFFile(fh).get_section_by_name(".symtab") is None, triple
            got = {f.start: f.name for f in plt_symbols(ELFFile(fh), by_name(isa), 0)}
        assert got == want and (len(got) >= 4 or path.name.startswith("ld")), path


def test_backends_agree_on_a_dynamic_program() -> None:
    """N-version agreement across every module, on ARM (Thumb-2 libc, ARM program): int3
    (lazy and strict cleanup) and step (the ground truth) give the same whole call trace —
    ld.so's start-up, libc, the program — names included.  (bts, btf and hwbp agree too:
    tests/test_dynamic_backends.py, with entry.)"""
    int3 = canonical_text(traced("arm", "qsort").records, namer(traced("arm", "qsort")))
    step = traced("arm", "qsort", "step")
    assert int3.count("\n") > 1000 and "> compare_ints" in int3
    assert canonical_text(step.records, namer(step)) == int3
    # strict cleanup re-arms each caller from the chain: glibc's A32 veneer `add pc, ip, pc`
    # must be a jump site there, or the code after it is never armed again
    strict = traced("arm", "qsort", "int3", cleanup="strict")
    assert canonical_text(strict.records, namer(strict)) == int3
