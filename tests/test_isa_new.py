"""The ISAs only the gdb-remote target runs (conftest.GDB_ONLY_ISAS: their capability
table's run_static says why emulation does not): their committed testbins traced through
qemu-user's gdb stub equal to each program's own `-finstrument-functions` record, their
output equal to qemu-user's, the n64 argument registers against the compiled program's
own values, `--target` chosen for them when not given, ppc64's ELFv1 function
descriptors read as binutils reads them, and what ppc64's emulation gap says of Unicorn's
CPU."""

from __future__ import annotations

import functools
import re
import signal
import struct
import subprocess

import pytest
import unicorn as uc
from elftools.elf.elffile import ELFFile
from unicorn import ppc_const

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.gdb_session import GdbProcess
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import RunConfig
from emutrace.trace.canonical import (
    canonical_from_instr,
    canonical_text,
    parse_instr_record,
    trace_key,
)

from .conftest import BUSYBOX, GDB_ONLY_ISAS, bin_path, run_emutrace, run_qemu
from .test_trace_oracle import namer

SCENARIOS = ("recursion", "fnptr", "qsort", "varargs", "struct", "args9", "longjmp", "tail")


def symbol_values(path: str) -> dict[int, str]:
    """st_value → name of every function symbol, read with pyelftools: what the program's
    own record prints for a function (instr_hooks.c: its symbol value; on ppc64's ELFv1 the
    descriptor's address, not the code's)."""
    with open(path, "rb") as fh:
        table = ELFFile(fh).get_section_by_name(".symtab")
        return {s["st_value"]: s.name for s in table.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s.name}


@functools.cache
def own_record(isa: str, scenario: str) -> tuple[str, frozenset[str]]:
    """The canonical trace calls.instr records about itself under qemu-user, its addresses
    named by the symbol table as the file has it, and the functions it names."""
    instr = str(bin_path(isa, "calls.instr"))
    record = run_qemu(isa, instr, scenario).stderr.decode()
    names = symbol_values(instr)

    def name(addr: int) -> str:
        return names.get(addr, hex(addr))
    program_functions = frozenset(name(addr) for _, addr in parse_instr_record(record))
    return (trace_key(canonical_from_instr(record, name, program_functions)),
            program_functions)


def traced(isa: str, scenario: str, backend: str = "int3") -> tuple[str, GdbProcess]:
    plain = str(bin_path(isa, "calls"))
    process = GdbProcess(RunConfig(plain, [scenario], backend=backend))
    result = process.run()
    assert result.stop.kind == "exit"
    _, program_functions = own_record(isa, scenario)
    return trace_key(canonical_text(result.records, namer(plain), program_functions)), process


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("isa", GDB_ONLY_ISAS)
def test_gdb_trace_equals_own_record(isa: str, scenario: str) -> None:
    want, _ = own_record(isa, scenario)
    got, _ = traced(isa, scenario)
    assert got.count("\n") > 3
    assert got == want


@pytest.mark.parametrize(("isa", "backend"), [("m68k", "int3"), ("mips64el", "hwbp")])
def test_gdb_durations_count_events(isa: str, backend: str) -> None:
    """A stub reports no instruction count, so a run's clock counts its events
    (tracer.Tracer counts_events): every duration is positive (an exit after its entry), a
    call with nothing recorded inside lasts 1 (its return is the next event), and a
    function lasts longer than any call inside it."""
    got = run_emutrace("run", "--target", "gdb", "--unconfined", "--backend", backend,
                       bin_path(isa, "calls"), "recursion")
    assert got.returncode == 0, got.stderr
    lines = got.stderr.decode().splitlines()
    body = [line for line in lines if " | " in line and not line.startswith("#")]
    durations = [int(line.split("|")[0]) for line in body if line.split("|")[0].strip()]
    assert durations and min(durations) >= 1
    assert [int(line.split("|")[0]) for line in body if "strcmp(" in line] == [1, 1]
    opened: list[int] = []
    for i, line in enumerate(body):
        text = line.split("|", 1)[1].rstrip()
        if text.endswith("{"):
            opened.append(i)
        elif text.lstrip().startswith("}"):
            start = opened.pop()
            inside = [int(b.split("|")[0]) for b in body[start + 1:i] if b.split("|")[0].strip()]
            assert int(line.split("|")[0]) > max(inside, default=0), (body[start], line)


@pytest.mark.parametrize("isa", [i for i in GDB_ONLY_ISAS if by_name(i).debug_hardware.slots > 1])
def test_gdb_hwbp_equals_own_record(isa: str) -> None:
    """hwbp's slots (where the ISA has breakpoint registers for it to model) as the stub's
    Z1 breakpoints.  Not ppc64: its one slot (CIABR) leaves hwbp single-stepping between
    the traps it can place, each step a few round trips to the stub (minutes for this
    scenario; the emulated hwbp-1 runs are tests/test_trace_oracle.py's)."""
    want, _ = own_record(isa, "recursion")
    got, process = traced(isa, "recursion", "hwbp")
    assert got == want and process.target.z1_placed > 10


EXPECTED_COMBINE9 = (11, 22, 33, 44, 55, 66, 77, 88, 99)


@pytest.mark.parametrize("isa", GDB_ONLY_ISAS)
def test_c_abi_arguments_and_return_in_the_stub(isa: str) -> None:
    """At the entry of the compiled `combine9(11, 22, …, 99)` the declared argument
    registers, then the stack slots from sp + stack_args_offset, hold the nine values
    (calls.c's own literals); at its return address the declared result register holds
    3135, the value the program prints (read in qemu's stub: the conformance suite's
    check for an ISA that emulation does not run)."""
    desc = by_name(isa)
    regs = desc.registers
    process = GdbProcess(RunConfig(str(bin_path(isa, "calls")), ["args9"], backend="none"))
    target = process.target
    entry = next(s.addr for s in process.image.symbols if s.name == "combine9")
    word = desc.identity.word_size
    calls: list[tuple[int, ...]] = []
    returns: list[int] = []

    def signed(v: int) -> int:
        return v - (1 << 8 * word) if v >> (8 * word - 1) else v

    def on_return(_uc: object, addr: int, _size: int, _d: object) -> None:
        returns.append(signed(target.reg_read(regs.retval)))

    def on_entry(_uc: object, addr: int, _size: int, _d: object) -> None:
        sp = target.reg_read(regs.sp)
        values = [target.reg_read(r) for r in regs.args]
        for i in range(len(values), 9):
            values.append(target.read_word(sp + regs.stack_args_offset
                                           + (i - len(regs.args)) * word))
        calls.append(tuple(signed(v) for v in values[:9]))
        if len(calls) == 1:
            ret = target.reg_read(regs.link) if regs.link else target.read_word(sp)
            ret += regs.link_offset
            target.hook_code(on_return, ret, ret)

    target.hook_code(on_entry, entry, entry)
    result = process.run()
    assert result.stop.kind == "exit" and result.stop.status == 0
    assert calls[0] == EXPECTED_COMBINE9
    assert calls[1] == (-1, 2, -3, 4, -5, 6, -7, 8, -9)
    assert returns[0] == sum(v * (i + 1) for i, v in enumerate(EXPECTED_COMBINE9)) == 3135
    assert b"3135" in run_qemu(isa, bin_path(isa, "calls"), "args9").stdout


@pytest.mark.parametrize(("program", "args"), [("calls", ("recursion",)), ("fib", ("10",)),
                                               ("hello_fs", ()), ("typed", ())])
@pytest.mark.parametrize("isa", GDB_ONLY_ISAS)
def test_run_without_target_equals_qemu(isa: str, program: str, args: tuple[str, ...]) -> None:
    """No --target: the gdb target, the one engine for the ISA (`emutrace info`)."""
    path = bin_path(isa, program)
    want = run_qemu(isa, path, *args)
    got = run_emutrace("run", "--unconfined", "--backend", "int3", "-o", "/dev/null", path,
                       *args)
    assert got.returncode == want.returncode, got.stderr
    assert got.stdout == want.stdout and got.stdout.count(b"\n") >= 1


@pytest.mark.parametrize("isa", GDB_ONLY_ISAS)
def test_signals_pass_through_the_stub(isa: str) -> None:
    program = bin_path(isa, "signals")
    want = run_qemu(isa, program)
    got = run_emutrace("run", "--unconfined", "--backend", "int3", "-o", "/dev/null", program)
    assert got.stdout == want.stdout and got.stdout.count(b"\n") > 3
    assert want.returncode == -signal.SIGUSR1 and got.returncode == 128 + signal.SIGUSR1


@pytest.mark.parametrize("isa", GDB_ONLY_ISAS)
def test_emulation_refuses_with_the_tables_reason(isa: str) -> None:
    reason = by_name(isa).capability(Cap.RUN_STATIC)
    assert not reason.works
    got = run_emutrace("run", "--target", "emulation", bin_path(isa, "calls"), "recursion")
    assert got.returncode == 64 and b"Traceback" not in got.stderr
    assert reason.reason.encode() in got.stderr
    # no --target and no --unconfined: the gdb target chosen, which asks for it
    got = run_emutrace("run", bin_path(isa, "calls"), "recursion")
    assert got.returncode == 64 and b"--unconfined" in got.stderr


def test_info_lists_the_engines_of_the_new_isas() -> None:
    section = run_emutrace("info").stdout.decode().split("Engines (run --target)\n")[1]
    lines = {line.split()[0]: line for line in section.split("\n\n")[0].splitlines()}
    for isa in GDB_ONLY_ISAS:
        qemu = by_name(isa).identity.qemu
        assert f"gdb (qemu-{qemu}-static)" in lines[isa]
        assert "emulation not: " in lines[isa]


# the gdb-only ISAs Debian 12 ships busybox-static for (scripts/fetch_busybox.sh)
DEBIAN_BUSYBOX = [i for i in GDB_ONLY_ISAS if i == "mips64el"]
APPLETS = [("echo", "hello", "world"), ("seq", "1", "5"), ("expr", "6", "*", "7"),
           ("basename", "/a/b/c.txt", ".txt"), ("printf", "%d-%s\\n", "42", "x")]


@pytest.mark.parametrize("applet", APPLETS, ids=[a[0] for a in APPLETS])
@pytest.mark.parametrize("isa", DEBIAN_BUSYBOX)
def test_debian_busybox_on_the_gdb_target(isa: str, applet: tuple[str, ...]) -> None:
    """Debian's own static busybox, traced in the stub: its output and status qemu-user's."""
    program = BUSYBOX / isa / "busybox"
    if not program.exists():
        pytest.fail(f"{program} missing: run `make setup` (fetches busybox-static with apt)")
    want = run_qemu(isa, program, *applet)
    got = run_emutrace("run", "--unconfined", "--backend", "int3", "-o", "/dev/null",
                       program, *applet)
    assert got.returncode == want.returncode == 0, got.stderr
    assert got.stdout == want.stdout and got.stdout


def test_elfv1_symbols_name_the_code_binutils_shows() -> None:
    """ppc64 (ELFv1): a function symbol's value is its descriptor in .opd; emutrace's symbol
    table has the code address, which objdump names `.<function>` (its synthetic
    dot-symbols) — every function of calls, and _start, the program's entry."""
    path = bin_path("ppc64", "calls")
    shown = subprocess.run(["powerpc64-linux-gnu-objdump", "-d", str(path)],
                           capture_output=True, text=True, check=True).stdout
    objdump = {m.group(2): int(m.group(1), 16)
               for m in re.finditer(r"^([0-9a-f]+) <\.([A-Za-z_]\w*)>:$", shown, re.M)}
    table = read_symbols(load_image(str(path)))
    descriptors = symbol_values(str(path))
    checked = 0
    for name in ("main", "_start", "combine9", "fact", "apply_twice", "op_xor"):
        func = table.by_name(name)
        assert func is not None and name in objdump, name
        assert func.start == objdump[name] and descriptors.get(func.start) != name
        checked += 1
    assert checked == 6


def test_unicorn_ppc64_runs_elfv1_big_endian() -> None:
    """What ppc64's run_static reason claims of Unicorn: its PPC64 CPU (the mode ppc64le
    uses, without MSR.LE) runs a static ELFv1 glibc program big-endian once started as the
    kernel starts it (PC and r2 from the entry descriptor: ELFv1 ABI §4.1.1), under a
    minimal Linux (write, writev, exit_group, brk; mprotect and the rest answered 0 or
    -ENOSYS): its output is qemu-user's."""
    path = bin_path("ppc64", "fib")
    cpu = uc.Uc(uc.UC_ARCH_PPC, uc.UC_MODE_PPC64 | uc.UC_MODE_BIG_ENDIAN)
    cpu.ctl_set_tlb_mode(uc.UC_TLB_VIRTUAL)
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        top = 0
        for seg in elf.iter_segments("PT_LOAD"):
            low = seg["p_vaddr"] & ~0xFFFF
            top = (seg["p_vaddr"] + seg["p_memsz"] + 0xFFFF) & ~0xFFFF
            cpu.mem_map(low, top - low)
            cpu.mem_write(seg["p_vaddr"], seg.data())
        entry, phnum = elf.header["e_entry"], elf.header["e_phnum"]
        phdr = next(elf.iter_segments("PT_LOAD"))["p_vaddr"] + elf.header["e_phoff"]
    cpu.mem_map(top, 1 << 20)  # the heap brk answers with
    stack = 0x7FFF0000
    cpu.mem_map(stack - (1 << 20), 1 << 20)
    cpu.mem_write(stack - 0x800, str(path).encode() + b"\0" + b"10\0")
    argv = [stack - 0x800, stack - 0x800 + len(str(path)) + 1]
    auxv = [3, phdr, 4, 56, 5, phnum, 6, 4096, 9, entry, 25, stack - 0x700, 0, 0]
    sp = stack - 0x1000
    cpu.mem_write(sp, b"".join(struct.pack(">Q", w) for w in [2, *argv, 0, 0, *auxv]))
    code, toc = struct.unpack(">QQ", cpu.mem_read(entry, 16))
    cpu.reg_write(ppc_const.UC_PPC_REG_1, sp)
    cpu.reg_write(ppc_const.UC_PPC_REG_2, toc)
    msr = 1 << 63 | 1 << 25 | 1 << 23 | 1 << 13  # SF (64-bit), VEC, VSX, FP
    cpu.reg_write(ppc_const.UC_PPC_REG_MSR, cpu.reg_read(ppc_const.UC_PPC_REG_MSR) | msr)
    out: list[bytes] = []
    status: list[int] = []

    def syscall(cpu: uc.Uc, intno: int, _data: object) -> None:
        if intno != 8:  # POWERPC_EXCP_SYSCALL (ppc.SYSCALLS.intno)
            status.append(-intno)
            cpu.emu_stop()
            return
        nr = cpu.reg_read(ppc_const.UC_PPC_REG_0)
        a0, a1, a2 = (cpu.reg_read(ppc_const.UC_PPC_REG_3 + i) for i in range(3))
        result, error = 0, False
        if nr == 4:  # write
            out.append(bytes(cpu.mem_read(a1, a2)))
            result = a2
        elif nr == 146:  # writev
            for i in range(a2):
                base, size = struct.unpack(">QQ", cpu.mem_read(a1 + 16 * i, 16))
                out.append(bytes(cpu.mem_read(base, size)))
                result += size
        elif nr in (1, 234):  # exit, exit_group
            status.append(a0)
            cpu.emu_stop()
        elif nr == 45:  # brk
            result = a0 or top
        elif nr not in (125,):  # mprotect: 0; the rest ENOSYS
            result, error = 38, True
        cpu.reg_write(ppc_const.UC_PPC_REG_3, result)
        cr = cpu.reg_read(ppc_const.UC_PPC_REG_CR)  # CR0.SO flags an error (ppc.SYSCALLS.errors)
        cpu.reg_write(ppc_const.UC_PPC_REG_CR, cr | 1 << 28 if error else cr & ~(1 << 28))

    cpu.hook_add(uc.UC_HOOK_INTR, syscall)
    cpu.emu_start(code, 0, count=20_000_000)
    want = run_qemu("ppc64", path, "10")
    assert status == [0] and b"".join(out) == want.stdout == b"fib(10) = 55\n"
