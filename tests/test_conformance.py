"""ISA conformance suite, written once and run for every ISA in the registry: each ISA
description is checked against the emulator (registers, syscall trap, breakpoint trap) and
against a compiled program (argument and return registers of the C ABI)."""

from __future__ import annotations

import ctypes
from typing import Any

import capstone
import pytest
import unicorn
from unicorn import unicorn_const as ucc
from unicorn.unicorn_py3.unicorn import uclib

from emutrace.isa import MODULES, all_isas, by_name
from emutrace.isa.base import Cap, Isa
from emutrace.session import Process, RunConfig
from emutrace.target.unicorn_cpu import UnicornCpu

from .conftest import bin_path, isa_params

# below 64 KiB: x86_16 reads its PC from ip, an offset in segment 0 (isa/x86_16.py)
CODE = 0x8000
# every ISA in the registry: the checks against the CPU model run for those that emulation
# does not run programs of too (their programs: tests/test_isa_new.py)
ISAS = MODULES


def fresh_cpu(isa: Isa) -> UnicornCpu:
    cpu = UnicornCpu(isa)
    cpu.apply_reset()
    cpu.mem_map(CODE, 0x10000)
    return cpu


def disasm(isa: Isa, code: bytes, alt_mode: bool = False) -> str:
    """The first instruction of code, in the ISA's alternate instruction set if alt_mode
    (its classifiers' capstone mode: ARM Thumb)."""
    classifiers = isa.classifiers
    modes = classifiers.alt_mode if alt_mode and classifiers is not None else isa.engines.cs_mode
    assert modes, f"{isa.name} has no alternate instruction set"
    md = capstone.Cs(getattr(capstone, isa.engines.cs_arch),
                     sum(getattr(capstone, m) for m in modes))
    insn = next(md.disasm(code, CODE), None)
    return "" if insn is None else f"{insn.mnemonic} {insn.op_str}".strip()


@pytest.mark.parametrize("isa", ISAS)
def test_registers_round_trip(isa: str) -> None:
    desc = by_name(isa)
    cpu = fresh_cpu(desc)
    regs = desc.registers
    names = {regs.pc, regs.sp, regs.retval, *regs.args, *regs.general, desc.syscalls.number,
             *desc.syscalls.args, desc.syscalls.ret} | ({regs.link} if regs.link else set())
    for i, name in enumerate(sorted(names)):
        value = 0x1000 + 0x10 * i  # aligned, fits every width, distinct per register
        cpu.reg_write(name, value)
        assert cpu.reg_read(name) == value, name
    for i, name in enumerate(sorted(names)):  # no two names alias one register
        if name != regs.pc:
            assert cpu.reg_read(name) == 0x1000 + 0x10 * i, name


@pytest.mark.parametrize("isa", ISAS)
def test_reset_fixups_stick(isa: str) -> None:
    desc = by_name(isa)
    cpu = fresh_cpu(desc)
    for fix in desc.reset:
        value = cpu.reg_read(fix.reg)
        assert value & fix.value == fix.value, (fix.reg, hex(value))


@pytest.mark.parametrize("isa", ISAS)
def test_direct_calls_equal_the_binding(isa: str) -> None:
    """UnicornCpu's reg_read (a plain word register, from its second read on), mem_read
    and drop_code_cache call libunicorn themselves, not through the binding's wrappers:
    every named register reads as the binding reads it, bytes written read back, an
    unmapped read is Unicorn's UcError, and the remove-cache request is one Unicorn
    accepts (a malformed request word is refused with UC_ERR_ARG: the same call with the
    read op in it)."""
    desc = by_name(isa)
    cpu = fresh_cpu(desc)
    regs = desc.registers
    names = sorted({regs.pc, regs.sp, regs.retval, *regs.args, *regs.general,
                    desc.syscalls.number, *desc.syscalls.args, desc.syscalls.ret})
    for i, name in enumerate(names):
        cpu.reg_write(name, 0x7000_0000 - 0x40 * i - 4)
    for name in names * 2:
        assert cpu.reg_read(name) == cpu.uc.reg_read(cpu.reg_id(name)), name
    assert cpu._words  # (read directly: the default class, a 64-bit word)
    base = 0x7000_0000  # (fresh_cpu maps low memory)
    page = cpu.uc.ctl_get_page_size()  # (4 KiB; SPARC64's 8 KiB)
    cpu.mem_map(base, page)
    cpu.write_code(base + 0x10, b"\x01\x02\x03\x04")
    assert cpu.mem_read(base + 0xe, 8) == b"\x00\x00\x01\x02\x03\x04\x00\x00"
    with pytest.raises(unicorn.UcError) as raised:
        cpu.mem_read(base + page, 4)
    assert raised.value.errno == ucc.UC_ERR_READ_UNMAPPED
    assert cpu.drop_code_cache(base, base + 0x20) is True
    wrong = (ucc.UC_CTL_IO_READ << 30) | (2 << 26) | ucc.UC_CTL_TB_REMOVE_CACHE
    assert uclib.uc_ctl(cpu.uc._uch, wrong, ctypes.c_uint64(base),
                        ctypes.c_uint64(base + 0x20)) == ucc.UC_ERR_ARG


@pytest.mark.parametrize("isa", ISAS)
def test_declared_instructions_decode(isa: str) -> None:
    """Capstone (an independent decoder) agrees with the declared trap encodings."""
    desc = by_name(isa)
    expected = {"x86_64": "syscall", "i386": "int 0x80", "aarch64": "svc #0",
                "arm": "svc #0", "mips": "syscall", "mipsel": "syscall", "riscv64": "ecall",
                "ppc": "sc", "ppc64le": "sc", "s390x": "svc 0", "mips64el": "syscall",
                "mips64": "syscall", "m68k": "trap #$0",
                "sparc64": "ta %icc, %g0 + 0x6d", "ppc64": "sc",
                "x86_16": "int 0x21"}[isa]
    assert disasm(desc, desc.syscalls.instruction) == expected
    for bp in desc.breakpoints:
        if bp.insn.startswith("0x"):  # s390x 0x0001 is an invalid opcode on purpose
            assert disasm(desc, bp.encoding) == ""
            continue
        text = disasm(desc, bp.encoding, bp.alt_mode)
        assert text.replace(", ", ",") == bp.insn.replace(", ", ","), bp


@pytest.mark.parametrize("isa", ISAS)
def test_syscall_trap_as_declared(isa: str) -> None:
    """The declared instruction raises the declared hook; number and arguments sit in the
    declared registers; after the declared PC fix-up execution continues after it."""
    desc = by_name(isa)
    conv = desc.syscalls
    cpu = fresh_cpu(desc)
    cpu.mem_write(CODE, conv.instruction * 2)
    seen: list[tuple[int, list[int], int]] = []

    def on_syscall(*_: Any) -> None:
        pc = cpu.pc
        seen.append((cpu.reg_read(conv.number), [cpu.reg_read(r) for r in conv.args], pc))
        if conv.pc_advance:
            cpu.reg_write(desc.registers.pc, pc + conv.pc_advance)
        cpu.uc.emu_stop()

    if conv.hook == "insn":
        cpu.uc.hook_add(ucc.UC_HOOK_INSN, on_syscall, None, 1, 0,
                        getattr(unicorn.x86_const, conv.insn or ""))
    else:
        cpu.uc.hook_add(ucc.UC_HOOK_INTR,
                        lambda uc, intno, d: on_syscall() if intno == conv.intno else None)
    cpu.reg_write(conv.number, 123)
    for i, reg in enumerate(conv.args):
        cpu.reg_write(reg, 1000 + i)
    cpu.uc.emu_start(CODE, CODE + 0x1000)
    number, args, pc_in_hook = seen[0]
    assert number == 123
    assert args == [1000 + i for i in range(len(conv.args))]
    seen_at = len(conv.instruction) if conv.pc_in_hook is None else conv.pc_in_hook
    assert pc_in_hook == CODE + seen_at
    assert cpu.pc == CODE + len(conv.instruction)


BREAKPOINTS = [(isa, i) for isa in ISAS for i in range(len(by_name(isa).breakpoints))]


@pytest.mark.parametrize(("isa", "index"), BREAKPOINTS)
def test_breakpoints_trap_as_declared(isa: str, index: int) -> None:
    """Working breakpoints surface with the declared hook, intno and PC; the broken ones
    show exactly the broken behaviour the description gives as the reason."""
    desc = by_name(isa)
    bp = desc.breakpoints[index]
    cpu = fresh_cpu(desc)
    cpu.mem_write(CODE, bp.encoding * 4)
    got: list[tuple[str, int | None, int]] = []

    def intr(uc: unicorn.Uc, intno: int, d: object) -> None:
        got.append(("intr", intno, cpu.pc))
        uc.emu_stop()

    def invalid(uc: unicorn.Uc, d: object) -> bool:
        got.append(("insn_invalid", None, cpu.pc))
        cpu.reg_write(desc.registers.pc, cpu.pc + len(bp.encoding))
        return True  # handled and skipped: the declared bug is that emu_start still fails

    cpu.uc.hook_add(ucc.UC_HOOK_INTR, intr)
    cpu.uc.hook_add(ucc.UC_HOOK_INSN_INVALID, invalid)
    error = None
    try:
        cpu.uc.emu_start(desc.mode_address(CODE, bp.alt_mode), CODE + 0x1000)
    except unicorn.UcError as e:
        error = e.errno
    hook, intno, pc = got[0]
    assert (hook, intno) == (bp.hook, bp.intno), bp.insn
    if bp.works:
        assert pc == CODE + bp.pc_after, bp.insn
        assert error is None
    elif hook == "intr":  # MIPS BREAK: the PC seen is not the breakpoint's
        assert pc not in (CODE, CODE + len(bp.encoding)), hex(pc)
    else:  # RISC-V EBREAK: emulation ends in an error even after the hook ran
        assert error == ucc.UC_ERR_EXCEPTION


EXPECTED_COMBINE9 = (11, 22, 33, 44, 55, 66, 77, 88, 99)


@pytest.mark.parametrize("isa", isa_params(Cap.RUN_STATIC))
def test_c_abi_arguments_and_return(isa: str) -> None:
    """At the entry of the compiled `combine9(11, 22, …, 99)` the declared argument
    registers (then stack slots from sp + stack_args_offset) hold the nine values, and at
    its return address the declared return register holds 3135 (= the program's output)."""
    desc = by_name(isa)
    regs = desc.registers
    proc = Process(RunConfig(str(bin_path(isa, "calls")), ["args9"]),
                   warn=lambda m: None)
    entry = next(s.addr for s in proc.image.symbols if s.name == "combine9")
    cpu = proc.cpu
    word = desc.identity.word_size
    calls: list[tuple[int, ...]] = []
    returns: list[int] = []

    def on_return(uc: unicorn.Uc, addr: int, size: int, d: object) -> None:
        returns.append(cpu.reg_read(regs.retval))

    def on_entry(uc: unicorn.Uc, addr: int, size: int, d: object) -> None:
        sp = cpu.reg_read(regs.sp)
        values = [cpu.reg_read(r) for r in regs.args]
        for i in range(len(values), 9):
            values.append(cpu.read_word(sp + regs.stack_args_offset + (i - len(regs.args))
                                        * word))
        calls.append(tuple(v - (1 << 8 * word) if v >> (8 * word - 1) else v
                           for v in values[:9]))
        if len(calls) == 1:
            ret = cpu.reg_read(regs.link) if regs.link else cpu.read_word(sp)
            ret = desc.code_address(ret)
            uc.hook_add(ucc.UC_HOOK_CODE, on_return, None, ret, ret)
            uc.ctl_remove_cache(ret, ret + 4)

    cpu.uc.hook_add(ucc.UC_HOOK_CODE, on_entry, None, entry, entry)
    result = proc.run()
    assert result.exit_code == 0
    assert calls[0] == EXPECTED_COMBINE9
    assert calls[1] == (-1, 2, -3, 4, -5, 6, -7, 8, -9)
    assert returns[0] == sum(v * (i + 1) for i, v in enumerate(EXPECTED_COMBINE9)) == 3135


def test_every_isa_is_in_the_suite() -> None:
    assert [i.name for i in all_isas()] == list(ISAS)
