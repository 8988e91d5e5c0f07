"""`--target qiling` (target/qiling_os.py, qiling_session.py): the committed testbins loaded
and served by Qiling's Linux layer, traced through the target protocol, equal to the
program's own `-finstrument-functions` record (run under qemu-user) and to emutrace's own
Linux layer's trace of the same program — calls, and the arguments and return values of
the program's functions (stack addresses aside: the two layers place the stack
differently); the program's output and status equal qemu-user's; a UEFI application
(testbins/uefi) under Qiling's UEFI layer equal to its own record, read from its memory
after a run under Qiling alone; the refusals; `emutrace info`'s rows.  Where the Qiling
table (target/qiling_table.py) says an ISA does not run, or Qiling is not installed, the
test is a strict xfail with that reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.isa import all_isas
from emutrace.rootfs import setup_root
from emutrace.session import Process, RunConfig
from emutrace.target.qiling_os import missing_reason
from emutrace.target.qiling_table import LINUX, linux_row, os_row
from emutrace.trace.canonical import canonical_from_instr, canonical_text, trace_key
from emutrace.trace.events import Entry, Record
from emutrace.trace.uftrace_read import load_recording
from emutrace.trace.values import Value

from .conftest import bin_path, run_emutrace, run_qemu
from .test_native_agreement import source_functions
from .test_trace_oracle import namer, own_record

MISSING = missing_reason()


def qiling_isas(isas: Iterable[str] = LINUX) -> list:
    """Each ISA as a parameter; a strict xfail with the table's reason where Qiling's Linux
    layer does not run it (or Qiling is not installed)."""
    out = []
    for isa in isas:
        row = linux_row(isa)
        reason = MISSING or (None if row.works else row.reason)
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        out.append(pytest.param(isa, marks=marks, id=isa))
    return out


def needs_qiling() -> list:
    return [pytest.mark.xfail(reason=MISSING, strict=True)] if MISSING else []


def qiling_run(isa: str, scenario: str, backend: str = "int3", engine: str = "auto"):  # type: ignore[no-untyped-def]
    from emutrace.qiling_session import QilingProcess

    config = RunConfig(str(bin_path(isa, "calls")), [scenario], backend=backend,
                       engine=engine)
    process = QilingProcess(config)
    regions = process.cpu.memory_regions()
    sp = process.cpu.reg_read(process.cpu.isa.registers.sp)
    result = process.run()
    assert result.stop.kind == "exit", result.stop
    return result, stack_of(regions, sp)


def stack_of(regions: list[tuple[int, int, int]], sp: int) -> tuple[int, int]:
    return next((b, e) for b, e, _p in regions if b <= sp <= e)


def calls_of(records: list[Record], name, keep: frozenset[str],  # type: ignore[no-untyped-def]
             stack: tuple[int, int]) -> list[tuple]:
    """The program's own functions' entries and exits with their values; a value that
    points into the stack is `stack` (where the layer put the stack is its own choice)."""
    def value(v: Value | int | None) -> object:
        raw = v.raw if isinstance(v, Value) else v
        if isinstance(raw, int) and stack[0] <= raw <= stack[1]:
            return "stack"
        return v.text if isinstance(v, Value) and v.text is not None else raw

    out: list[tuple] = []
    for rec in records:
        if name(rec.func) not in keep:
            continue
        if isinstance(rec, Entry):
            out.append((">", name(rec.func), tuple(value(a) for a in rec.args)))
        else:
            out.append(("<", name(rec.func), value(rec.retval), rec.unwound))
    return out


def equal_to_oracle_and_linux_layer(isa: str, scenario: str) -> None:
    want, program_functions = own_record(isa, scenario)
    plain = str(bin_path(isa, "calls"))
    name = namer(plain)
    result, qiling_stack = qiling_run(isa, scenario)
    got = trace_key(canonical_text(result.records, name, program_functions))
    assert got.count("\n") > 3
    assert got == want
    process = Process(RunConfig(plain, [scenario], backend="int3"), warn=lambda m: None)
    sp = process.cpu.reg_read(process.cpu.isa.registers.sp)
    own_regions = process.cpu.memory_regions()
    linux = process.run()
    assert got == trace_key(canonical_text(linux.records, name, program_functions))
    assert calls_of(result.records, name, program_functions, qiling_stack) \
        == calls_of(linux.records, name, program_functions, stack_of(own_regions, sp))


@pytest.mark.parametrize("isa", qiling_isas())
def test_qiling_linux_trace_equals_own_record_and_linux_layer(isa: str) -> None:
    """Calls through a function pointer on every ISA in the table."""
    equal_to_oracle_and_linux_layer(isa, "fnptr")


# other testbins with no record of their own: the Linux layers compared with each other
OTHER_PROGRAMS = (("typed", ()), ("isadep", ()), ("hello_fs", ()))


@pytest.mark.parametrize(("program", "args"), OTHER_PROGRAMS, ids=[p for p, _ in OTHER_PROGRAMS])
@pytest.mark.parametrize("isa", qiling_isas())
def test_qiling_linux_other_testbins_equal_linux_layer(isa: str, program: str,
                                                       args: tuple[str, ...]) -> None:
    """The program's own functions (its source's definitions), with their arguments
    (typed from DWARF) and return values, as emutrace's own Linux layer traces them."""
    from emutrace.qiling_session import QilingProcess

    path = str(bin_path(isa, program))
    keep = frozenset(source_functions(program))
    name = namer(path)
    qiling = QilingProcess(RunConfig(path, list(args), backend="int3"))
    regions = qiling.cpu.memory_regions()
    qiling_sp = qiling.cpu.reg_read(qiling.cpu.isa.registers.sp)
    got = qiling.run()
    linux_process = Process(RunConfig(path, list(args), backend="int3"), warn=lambda m: None)
    sp = linux_process.cpu.reg_read(linux_process.cpu.isa.registers.sp)
    own_regions = linux_process.cpu.memory_regions()
    want = linux_process.run()
    assert got.stop.kind == want.stop.kind == "exit" and got.stop.status == want.stop.status
    got_calls = calls_of(got.records, name, keep, stack_of(regions, qiling_sp))
    assert len(got_calls) > 4
    assert got_calls == calls_of(want.records, name, keep, stack_of(own_regions, sp))


def dynamic_root(isa: str) -> str:
    """Where a dynamic program's libraries come from, for both Linux layers: the host's
    for x86_64, the set-up's Debian root otherwise (scripts/setup.sh)."""
    root = "/" if isa == "x86_64" else setup_root(isa)
    assert root is not None, f"no Debian root of {isa}: run make setup"
    return str(root)


@pytest.mark.parametrize("isa", qiling_isas(("x86_64", "aarch64")))
def test_qiling_dynamic_program_equals_own_record_and_linux_layer(isa: str) -> None:
    """calls.dyn: Qiling's loader runs ld.so, which maps libc (told to the module map from
    Qiling's mmap); the program's functions as its own record has them and, with their
    arguments and return values, as emutrace's Linux layer traces them from the same
    root; libc's functions are named (printf), ld.so and libc are modules."""
    from emutrace.qiling_session import QilingProcess

    want, keep = own_record(isa, "fnptr")
    path, root = str(bin_path(isa, "calls.dyn")), dynamic_root(isa)
    config = RunConfig(path, ["fnptr"], backend="int3", root=root)
    qiling = QilingProcess(config)
    stack = stack_of(qiling.cpu.memory_regions(),
                     qiling.cpu.reg_read(qiling.cpu.isa.registers.sp))
    got = qiling.run()
    assert got.stop.kind == "exit" and got.stop.status == 0
    table = read_symbols(load_image(path, dynamic=True))

    def name(addr: int) -> str:
        f = table.containing(addr)
        return f.name if f is not None else hex(addr)

    assert trace_key(canonical_text(got.records, name, keep)) == want
    linux_process = Process(config, warn=lambda m: None)
    own_stack = stack_of(linux_process.cpu.memory_regions(),
                         linux_process.cpu.reg_read(linux_process.cpu.isa.registers.sp))
    linux = linux_process.run()
    assert calls_of(got.records, name, keep, stack) == \
        calls_of(linux.records, name, keep, own_stack)
    symbols = read_symbols(got.image)
    named = {f.name for r in got.records if (f := symbols.containing(r.func)) is not None}
    assert "printf" in named  # (libc's, mapped by ld.so)
    assert got.image.modules is not None
    module_names = {m.name for m in got.image.modules.modules}
    assert "libc" in module_names and any(n.startswith("ld-linux") for n in module_names)


@pytest.mark.parametrize("scenario", ("recursion", "longjmp", "tail", "varargs", "args9"))
@pytest.mark.parametrize("isa", qiling_isas(("x86_64", "aarch64")))
def test_qiling_linux_scenarios(isa: str, scenario: str) -> None:
    equal_to_oracle_and_linux_layer(isa, scenario)


@pytest.mark.parametrize("engine", ("python", "native"))
@pytest.mark.parametrize("backend", ("int3", "step", "hwbp", "entry", "bts", "btf"))
@pytest.mark.parametrize("isa", qiling_isas(("x86_64", "riscv64")))
def test_qiling_every_backend_and_engine(isa: str, backend: str, engine: str) -> None:
    """Every backend on both engines over Qiling's Uc (the C engines through the same
    `UnicornCpu.c_port`): the program's own record.  x86_64's breakpoints trap through
    Qiling's interrupt dispatcher; riscv64's are delivered by code hooks (Unicorn does not
    trap EBREAK as declared).  (All six on all eight ISAs agreed when the table was made.)"""
    want, program_functions = own_record(isa, "recursion")
    result, _ = qiling_run(isa, "recursion", backend, engine)
    got = trace_key(canonical_text(result.records, namer(str(bin_path(isa, "calls"))),
                                   program_functions))
    assert got == want


@pytest.mark.parametrize("isa", qiling_isas(("x86_64", "arm")))
def test_qiling_output_and_status_equal_qemu(isa: str) -> None:
    program = bin_path(isa, "calls")
    for scenario in ("recursion", "exit42"):
        want = run_qemu(isa, program, scenario)
        got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "int3",
                           "-o", "/dev/null", program, scenario)
        assert got.returncode == want.returncode, got.stderr
        assert got.stdout == want.stdout and got.stdout
        assert got.stderr == b""  # nothing of Qiling's log on the guest's stderr


@pytest.mark.parametrize("isa", qiling_isas(("x86_64",)))
def test_qiling_timeout_ends_the_run(isa: str) -> None:
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--timeout", "1",
                       "--backend", "int3", "-o", "/dev/null", bin_path(isa, "fib"), "40")
    assert got.returncode == 124 and b"--timeout reached" in got.stderr


@pytest.mark.parametrize("isa", qiling_isas(("x86_64",)))
def test_qiling_own_failure_is_one_line(isa: str) -> None:
    """realcalls asks Qiling's Linux layer for getpeername on a standard descriptor, which
    Qiling 1.4.6 does not serve (an AttributeError inside it): one line naming Qiling,
    exit 71 (the emulator failed, not the guest), no traceback; the program's output up
    to there passed through."""
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "none",
                       bin_path(isa, "realcalls"))
    assert got.returncode == 71 and b"Traceback" not in got.stderr
    assert got.stderr.startswith(b"emutrace: Qiling: AttributeError") \
        and got.stderr.count(b"\n") == 1
    assert got.stdout.startswith(b"sysinfo = ")


@pytest.mark.parametrize("isa", qiling_isas(("x86_64", "mips")))
def test_record_qiling_equals_own_record(isa: str, tmp_path: Path) -> None:
    """`record --target qiling`: the directory read back names the program's calls as its
    own -finstrument-functions record does."""
    want, program_functions = own_record(isa, "fnptr")
    data = tmp_path / "d"
    done = run_emutrace("record", "--target", "qiling", "--unconfined", "--backend", "int3",
                        "-d", data, bin_path(isa, "calls"), "fnptr")
    assert done.returncode == 0, done.stderr
    records, _name, recorded_isa = load_recording(str(data))
    assert recorded_isa == isa
    got = canonical_text(records, namer(str(bin_path(isa, "calls"))), program_functions)
    assert got.count("\n") > 3 and trace_key(got) == want


@pytest.mark.parametrize(("argv", "says"), [
    (("run", "--target", "qiling", bin_path("x86_64", "calls")), b"--unconfined"),
    (("run", "--target", "qiling", "--unconfined", "--max-insns", "5",
      bin_path("x86_64", "calls")), b"--max-insns"),
    (("run", "--target", "qiling", "--unconfined", "--allow-write", "/tmp",
      bin_path("x86_64", "calls")), b"--allow-write"),
    (("run", "--target", "qiling", "--unconfined", bin_path("ppc64le", "calls")),
     LINUX["ppc64le"].reason.encode()),
    (("record", "--target", "qiling", "--unconfined", "--syscalls", "-d",
      "/tmp/nowhere.data", bin_path("x86_64", "calls")), b"--syscalls"),
])
def test_qiling_refusals_are_usage_errors(argv: tuple, says: bytes) -> None:
    got = run_emutrace(*argv)
    assert got.returncode == 64 and says in got.stderr and b"Traceback" not in got.stderr
    assert got.stderr.count(b"\n") == 1


def test_info_lists_qiling_rows() -> None:
    text = run_emutrace("info").stdout.decode()
    section = text.split("Qiling (run --target qiling)\n")[1].split("\n\n")[0]
    rows = {tuple(line.split()[:2]): line for line in section.splitlines()}
    for isa in all_isas():  # every ISA has its row: tried, or why not
        row = linux_row(isa.name)
        line = rows[("linux", isa.name)]
        assert (MISSING or row.reason) in line if MISSING or not row.works else "works" in line
    assert ("dos", "x86_16") in rows and "works" in rows[("dos", "x86_16")]


# ------------------------------------------------------------------ a UEFI application
# testbins/uefi: calls.efi (PE32+, gnu-efi) and calls.so, the ELF it was copied from
UEFI = Path(__file__).parent.parent / "testbins" / "uefi" / "x86_64"


def uefi_marks() -> list:
    row = os_row("uefi", "x86_64")
    reason = MISSING or (None if row.works else row.reason)
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


def uefi_own_record() -> tuple[int, list[tuple[str, int]]]:
    """The application's own -finstrument-functions record, read from its memory after a
    run under Qiling alone (no emutrace hook): its load base and [(">" or "<", function)].
    Symbol values from the ELF with pyelftools; the PE keeps the ELF's relative
    addresses (objcopy)."""
    from elftools.elf.elffile import ELFFile
    from qiling import Qiling
    from qiling.const import QL_VERBOSE

    with open(UEFI / "calls.so", "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        syms = {s.name: s["st_value"] for s in symtab.iter_symbols()}
    with tempfile.TemporaryDirectory() as root:
        shutil.copy(UEFI / "calls.efi", root)
        ql = Qiling([os.path.join(root, "calls.efi")], root, verbose=QL_VERBOSE.DISABLED)
        ql.run()
        base = ql.loader.images[0].base
        pairs = int.from_bytes(ql.mem.read(base + syms["instr_len"], 8), "little")
        raw = bytes(ql.mem.read(base + syms["instr_record"], 16 * pairs))
    words = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
    kinds, functions = words[::2], words[1::2]
    return base, [({1: ">", 2: "<"}[kind], fn)
                  for kind, fn in zip(kinds, functions, strict=True)]


@pytest.mark.parametrize("engine", ("python", "native"))
@pytest.mark.parametrize("backend", ("int3", "step"))
@pytest.mark.parametrize("os_isa", [pytest.param("uefi-x86_64", marks=uefi_marks())])
def test_qiling_uefi_trace_equals_its_own_record(os_isa: str, backend: str,
                                                 engine: str) -> None:
    """The UEFI application under Qiling's UEFI layer: every call of its own record, in
    order and nesting (fact's recursion, apply's calls through a pointer, a chain),
    and the run's status is EFI_SUCCESS (its results were right)."""
    from emutrace.qiling_session import QilingProcess

    base, record = uefi_own_record()
    # efi_main, fact 6 times, apply, twice twice, chain1-3
    assert sum(kind == ">" for kind, _ in record) == 13
    config = RunConfig(str(UEFI / "calls.efi"), backend=backend, engine=engine,
                       symbols=[str(UEFI / "calls.so")])
    process = QilingProcess(config)
    result = process.run()
    assert result.stop.kind == "exit" and result.stop.status == 0
    name = process.image.symbolize
    keep = frozenset(name(fn).split("+")[0] for _, fn in record)
    text = "".join(f"{kind} {fn:#x}\n" for kind, fn in record)

    def short(addr: int) -> str:
        return name(addr).split("+")[0]

    want = canonical_from_instr(text, short, keep)
    got = canonical_text(result.records, short, keep)
    assert got.count("\n") == 26 and got == want


def test_qiling_uefi_cli_and_refusals() -> None:
    efi, elf = UEFI / "calls.efi", UEFI / "calls.so"
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "int3", efi)
    assert got.returncode == 64 and b"--symbols" in got.stderr and got.stderr.count(b"\n") == 1
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "int3",
                       "--symbols", bin_path("aarch64", "calls"), efi)
    assert got.returncode == 64 and b"aarch64" in got.stderr
    if uefi_marks():
        return
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "int3",
                       "--symbols", elf, efi)
    assert got.returncode == 0, got.stderr
    assert b"chain3(10)" in got.stderr and b"} = 720; /* fact" in got.stderr


# ------------------------------------------------------------------ a DOS .COM program
# testbins/dos/calls.com (nasm): prints its own count of calls, "calls N"; calls.map names
# its functions (nasm's map, in nm form).  The counts per function are read from its source
# (they sum to the count it prints).
DOS = Path(__file__).parent.parent / "testbins" / "dos" / "calls.com"
DOS_MAP = DOS.with_name("calls.map")
DOS_CALLS = {"fact": 5, "apply": 1, "twice": 2, "chain1": 1, "chain2": 1, "chain3": 1}


def dos_marks() -> list:
    row = os_row("dos", "x86_16")
    reason = MISSING or (None if row.works else row.reason)
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


@pytest.fixture(scope="module")
def dos_alone() -> subprocess.CompletedProcess:
    """The .COM under Qiling's DOS layer alone (its default profile, no emutrace): what
    it prints, its own count of its calls."""
    code = (
        "import shutil, sys, tempfile\n"
        "from qiling import Qiling\n"
        "from qiling.const import QL_VERBOSE\n"
        "root = tempfile.mkdtemp()\n"
        "shutil.copy(sys.argv[1], root + '/calls.DOS_COM')\n"
        "Qiling([root + '/calls.DOS_COM'], root, verbose=QL_VERBOSE.DISABLED).run()\n"
        "shutil.rmtree(root)\n")
    return subprocess.run([sys.executable, "-c", code, str(DOS)], capture_output=True,
                          timeout=120)


@pytest.mark.parametrize("os_isa", [pytest.param("dos-x86_16", marks=needs_qiling())])
def test_dos_program_counts_its_calls_under_qiling_alone(
        os_isa: str, dos_alone: subprocess.CompletedProcess) -> None:
    """The input: Qiling's DOS layer alone runs it and it prints its count (the oracle the
    trace is held to)."""
    assert dos_alone.returncode == 0, dos_alone.stderr
    assert dos_alone.stdout.split() == [b"calls", str(sum(DOS_CALLS.values())).encode()]


@pytest.mark.parametrize("backend", ("int3", "step", "bts"))
@pytest.mark.parametrize("os_isa", [pytest.param("dos-x86_16", marks=dos_marks())])
def test_dos_trace_counts_equal_the_programs_own(
        os_isa: str, backend: str, dos_alone: subprocess.CompletedProcess) -> None:
    """The .COM traced under Qiling's DOS layer (x86_16, loaded at 0000:0100): each
    function's calls as its source makes them, summing to the count the program prints;
    the console as Qiling alone prints it; status 0 (int 21h AH=4Ch, AL=0).  A breakpoint
    backend, a stepping one and a branch-record one."""
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", backend,
                       "--symbols", DOS_MAP, DOS)
    assert got.returncode == 0, got.stderr
    assert got.stdout == dos_alone.stdout
    printed = int(dos_alone.stdout.split()[1])
    text = got.stderr.decode()
    counts = {function: text.count(f" {function}(") for function in DOS_CALLS}
    assert counts == DOS_CALLS and sum(counts.values()) == printed
    assert text.count(" print_number(") == 1  # (not counted by the program)


# testbins/dos/boot.mbr (nasm): a boot sector that prints its own count of calls ("boot 7")
MBR = DOS.with_name("boot.mbr")


def mbr_marks() -> list:
    row = os_row("mbr", "x86_16")
    reason = MISSING or (None if row.works else row.reason)
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


@pytest.mark.parametrize("os_isa", [pytest.param("mbr-x86_16", marks=mbr_marks())])
def test_mbr_counts_its_calls_under_qiling_alone(os_isa: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The boot sector under Qiling's MBR loader alone prints its own count (fact 4,
    apply 1, twice 2): the oracle a trace of it would be held to."""
    from qiling import Qiling
    from qiling.const import QL_VERBOSE

    with tempfile.TemporaryDirectory() as root:
        shutil.copy(MBR, os.path.join(root, "boot.DOS_MBR"))
        Qiling([os.path.join(root, "boot.DOS_MBR")], root, verbose=QL_VERBOSE.DISABLED).run()
    assert capsys.readouterr().out.split() == ["boot", "7"]


def test_mbr_is_refused_with_the_tables_reason() -> None:
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "int3",
                       "--symbols", MBR.with_name("boot.map"), MBR)
    assert got.returncode == 64 and got.stderr.count(b"\n") == 1
    assert os_row("mbr", "x86_16").reason.encode() in got.stderr or MISSING


def test_dos_refusals() -> None:
    """A .COM needs its functions named (--symbols): one line, exit 64."""
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "int3", DOS)
    assert got.returncode == 64 and b"--symbols" in got.stderr
    assert got.stderr.count(b"\n") == 1 and b"Traceback" not in got.stderr


# ------------------------------------------------------------------ MCU boards
# testbins/mcu/calls.elf (arm-none-eabi-gcc): prints "calls N R" on USART2 and spins
MCU = Path(__file__).parent.parent / "testbins" / "mcu" / "calls.elf"


def stm32f411(repair: bool):  # type: ignore[no-untyped-def]
    """Qiling's STM32F411 board with the firmware, USART2 and RCC (Qiling alone)."""
    from qiling import Qiling
    from qiling.const import QL_ARCH, QL_OS, QL_VERBOSE
    from qiling.extensions.mcu.stm32f4 import stm32f411 as board

    from emutrace.target.qiling_os import repair_cortex_m_engine

    if repair:
        repair_cortex_m_engine()
    ql = Qiling([str(MCU)], archtype=QL_ARCH.CORTEX_M, ostype=QL_OS.MCU, env=board,
                verbose=QL_VERBOSE.DISABLED)
    ql.hw.create("usart2")
    ql.hw.create("rcc")
    return ql


@pytest.mark.parametrize("os_isa", [pytest.param("mcu-cortex_m", marks=needs_qiling())])
def test_qiling_mcu_engine_fails_unrepaired(os_isa: str) -> None:
    """Qiling 1.4.6's own Cortex-M engine beside unicorn 2.1.4: no `_uch` at the board's
    first mem_map (a fresh process: the repair is process-wide)."""
    code = ("import sys\n"
            "from qiling import Qiling\n"
            "from qiling.const import QL_ARCH, QL_OS, QL_VERBOSE\n"
            "from qiling.extensions.mcu.stm32f4 import stm32f411\n"
            "Qiling([sys.argv[1]], archtype=QL_ARCH.CORTEX_M, ostype=QL_OS.MCU, "
            "env=stm32f411, verbose=QL_VERBOSE.DISABLED)\n")
    got = subprocess.run([sys.executable, "-c", code, str(MCU)], capture_output=True,
                         timeout=120)
    assert got.returncode != 0
    assert b"AttributeError: 'UcAArch32' object has no attribute '_uch'" in got.stderr


@pytest.mark.parametrize("os_isa", [pytest.param("mcu-cortex_m", marks=needs_qiling())])
def test_qiling_mcu_firmware_runs_with_the_repaired_engine(os_isa: str) -> None:
    """With repair_cortex_m_engine the board runs the firmware: its own count of its calls
    (fact 5, apply 1, twice 2) and fact(5) + twice(twice(3)) on USART2."""
    ql = stm32f411(True)
    ql.run(count=3000)
    assert ql.hw.usart2.recv() == b"calls 08 132\n"


def mcu_marks() -> list:
    row = os_row("mcu", "cortex_m")
    reason = MISSING or (None if row.works else row.reason)
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


@pytest.mark.parametrize("backend", ("int3", "step", "hwbp"))
@pytest.mark.parametrize("os_isa", [pytest.param("mcu-cortex_m", marks=mcu_marks())])
def test_qiling_mcu_firmware_trace_counts_equal_its_own(os_isa: str, backend: str) -> None:
    """`run --target qiling` on the firmware (its segments in the STM32F411's flash and
    SRAM): each function's entries as the firmware counts them itself (fact 5, apply 1,
    twice 2: the 08 it prints; put once a character), its USART2 output on stdout as
    under Qiling alone; the run ends at --max-insns (exit 125: firmware never exits)."""
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", backend,
                       "--max-insns", "3000", MCU)
    assert got.returncode == 125, got.stderr
    assert got.stdout == b"calls 08 132\n"
    own = int(got.stdout.split()[1])
    text = got.stderr.decode()
    counts = {f: text.count(f" {f}(") for f in ("fact", "apply", "twice", "put")}
    assert counts == {"fact": 5, "apply": 1, "twice": 2, "put": len(got.stdout)}
    assert counts["fact"] + counts["apply"] + counts["twice"] == own
    assert "unwound" not in text


@pytest.mark.parametrize(("extra", "says"), [
    ((), b"--max-insns N"),
    (("--backend", "bts", "--max-insns", "9"), b"every block"),
    (("--backend", "int3", "--engine", "native", "--max-insns", "9"), b"--engine python"),
])
def test_qiling_mcu_refusals(extra: tuple[str, ...], says: bytes) -> None:
    got = run_emutrace("run", "--target", "qiling", "--unconfined", *extra, MCU)
    assert got.returncode == 64 and says in got.stderr and got.stderr.count(b"\n") == 1


# ------------------------------------------------------------------ a Windows program
# testbins/windows/calls.exe (mingw-w64, PE32+ console subsystem)
WINDOWS = Path(__file__).parent.parent / "testbins" / "windows" / "calls.exe"


def test_windows_program_is_refused_naming_what_is_missing() -> None:
    """No Windows root (registry hives) can be had offline: one line, exit 69 (unsupported),
    the table's reason; `emutrace info` says the same."""
    got = run_emutrace("run", "--target", "qiling", "--unconfined", "--backend", "int3",
                       WINDOWS)
    reason = os_row("windows", "x86_64").reason
    assert got.returncode == 69 and b"registry hive" in got.stderr
    assert reason.encode() in got.stderr and got.stderr.count(b"\n") == 1
    info = run_emutrace("info").stdout.decode()
    assert f"windows x86_64    not: {reason}" in info or MISSING
