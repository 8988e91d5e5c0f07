"""MIPS kernel images: the CP0 exception registers that isa/kernel_mips.py models
(Unicorn exposes none of them) read by a kernel as under qemu-system-mips(el) -M malta,
and the model's pieces the mini-kernels do not reach, against MIPS32 PRA vol. III."""

from __future__ import annotations

import pytest

from emutrace.isa.base import Endian
from emutrace.isa.kernel_mips import (
    EXC_SYS,
    Sites,
    cp0,
    exception,
    reset,
    timer_due,
    timer_interrupt,
)
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .test_kernel import BOARD_OF, RECORD_MARK, kernel, namer, qemu_system, run_board


@pytest.mark.parametrize("isa", ("mips", "mipsel"))
def test_cp0_registers_as_qemu_system(isa: str) -> None:
    """mips/cp0 reads EBase (QEMU: CPUNum 0; Unicorn's own would read 0x3ff), writes and
    reads Cause's writable bits and EPC, and inside a syscall's handler reads EPC (the
    syscall's address), Cause (BD 0, ExcCode 8) and Status.EXL (set; eret clears it);
    a syscall in a `b`'s delay slot traps with EPC = the branch and Cause.BD, and the
    handler resumes at the branch's target: the console equals qemu-system's, line for
    line."""
    result, console = run_board(BOARD_OF[isa], kernel(isa, "cp0"))
    want, status = qemu_system(isa, "cp0")
    assert console == want
    for line in ("ebase = 0x80100000\n", "cause writable = 0x8800300\n",
                 "handler epc - arch_trap = 0x0\n", "handler cause = 0x20\n",
                 "handler status = 0x2\n", "status after eret = 0x0\n",
                 "delay-slot trap returned = 0x51\n",
                 "handler epc - trap_in_delay_slot = 0x0\n",
                 "handler cause = 0x80000020\n"):
        assert line in console
    assert result.stop.kind == "exit" and result.exit_code == status == 0
    assert result.syscall_counts["syscall"] == 2
    assert result.syscall_counts["CP0 eret"] == 2
    assert result.syscall_counts["CP0 mfc0 $15,1"] == 1


@pytest.mark.parametrize("isa", ("mips", "mipsel"))
def test_timer_interrupt_wakes_wait(isa: str) -> None:
    """mips/timer arms Compare 1 ms ahead, enables IM7 and IE and waits: the idle CPU is
    woken by the Count/Compare interrupt (Cause.TI, IP7, ExcCode 0 through EBase + 0x180;
    `wait` ends Unicorn's emu_start with a bogus fault, taken as idle), and writing Compare
    acknowledges it: the console equals qemu-system's."""
    result, console = run_board(BOARD_OF[isa], kernel(isa, "timer"))
    want, status = qemu_system(isa, "timer")
    assert console == want
    assert "interrupt cause (TI, IP7, ExcCode) = 0x40008000\n" in console
    assert "cause after compare written = 0x0\n" in console
    assert result.stop.kind == "exit" and result.exit_code == status == 0
    assert result.syscall_counts["timer interrupt"] == 1


def test_delay_slot_trap_traced() -> None:
    """The delay-slot syscall is taken at its branch, trap_in_delay_slot's first
    instruction: `int3 --cleanup strict` and `step` agree over the whole cp0 kernel, and
    the vector's exception frame opens inside trap_in_delay_slot, not beside it."""
    image = kernel("mipsel", "cp0")
    strict, _ = run_board("maltael", image, backend="int3", cleanup="strict")
    step, _ = run_board("maltael", image, backend="step")
    name = namer(image)
    everything = canonical_text(strict.records, name)
    assert everything == canonical_text(step.records, name)
    assert ("  > trap_in_delay_slot\n    > vec_general\n      > trap_handler\n"
            "      < trap_handler\n    < vec_general\n  < trap_in_delay_slot\n") in everything


def test_stripped_kernel_with_sign_extended_system_map() -> None:
    """Debian's mips nm prints kseg0 addresses sign-extended to 64 bits
    (ffffffff80100000); the stripped kernel traced with that System.map gives the
    instrumented kernel's own record (taken under qemu-system-mips)."""
    assert kernel("mips", "System.map").read_text().startswith("ffffffff8010")
    record = qemu_system("mips", "kernel.instr")[0].split(RECORD_MARK)[1]
    instr_name = namer(kernel("mips", "kernel.instr"))
    own = {instr_name(addr) for _, addr in parse_instr_record(record)}
    result, _ = run_board("malta", kernel("mips", "kernel.stripped"), backend="int3",
                          symbols=str(kernel("mips", "System.map")))
    got = canonical_text(result.records, namer(kernel("mips")), own)
    assert got == canonical_from_instr(record, instr_name, own)


class _Cpu:
    """Registers only: enough for the pure CP0 model."""

    def __init__(self, status: int) -> None:
        self.regs = {"cp0_status": status, "pc": 0}

    @property
    def pc(self) -> int:
        return self.regs["pc"]

    def reg_read(self, name: str) -> int:
        return self.regs[name]

    def reg_write(self, name: str, value: int) -> None:
        self.regs[name] = value


def test_exception_entry_bev_and_exl() -> None:
    """PRA vol. III table 6.3 and §6.2.1: with Status.BEV the general vector is
    0xBFC0_0380; with Status.EXL already set EPC keeps the first exception's address while
    Cause.ExcCode takes the new one."""
    cpu = _Cpu(status=1 << 22)  # BEV
    reset(cpu)  # type: ignore[arg-type]
    assert exception(cpu, EXC_SYS, 0x80001000) == 0xBFC00380  # type: ignore[arg-type]
    assert cpu.regs["cp0_status"] & 2 and cp0(cpu).epc == 0x80001000  # type: ignore[arg-type]
    cpu.regs["cp0_status"] = 2  # EXL, BEV = 0
    cp0(cpu).ebase = 0x80200000  # type: ignore[arg-type]
    assert exception(cpu, 10, 0x80002000) == 0x80200180  # type: ignore[arg-type]
    model = cp0(cpu)  # type: ignore[arg-type]
    assert (model.epc, model.cause >> 2 & 0x1F) == (0x80001000, 10)


def test_timer_interrupt_needs_ie_and_im7() -> None:
    """PRA vol. III §6.1.1: the timer interrupt is taken only with Status.IE and IM7 set
    and EXL, ERL clear; no Compare written: nothing to wait for; with Cause.IV the vector
    is EBase + 0x200 (table 6.4)."""
    cpu = _Cpu(status=1)  # IE, not IM7
    reset(cpu)  # type: ignore[arg-type]
    assert timer_due(cpu) is None  # type: ignore[arg-type]
    assert timer_interrupt(cpu) is None  # type: ignore[arg-type]
    cpu.regs["cp0_status"] = 1 | 1 << 15 | 2  # IE, IM7, EXL
    assert timer_interrupt(cpu) is None  # type: ignore[arg-type]
    cpu.regs.update(cp0_status=1 | 1 << 15, pc=0x80100400)
    cp0(cpu).cause = 1 << 23  # type: ignore[arg-type]  # IV
    outcome = timer_interrupt(cpu)  # type: ignore[arg-type]
    assert outcome is not None and outcome.vector == 0x80000200
    model = cp0(cpu)  # type: ignore[arg-type]
    assert (model.epc, model.cause) == (0x80100400, 1 << 30 | 1 << 23 | 1 << 15)


@pytest.mark.parametrize("byteorder", ("big", "little"))
def test_scan_finds_modelled_cp0_accesses(byteorder: Endian) -> None:
    """The load-time sweep hooks mfc0/mtc0 of BadVAddr, Cause, EPC, EBase (sel 1), eret,
    words capstone cannot decode and branches with a syscall in their delay slot; not
    Status ($12, an API register), EBase's sel 0 (PRId), a branch-likely (its slot runs
    only when taken), nor ordinary instructions (MIPS32 vol. II encodings)."""
    words = [
        0x400A7000,  # 0x00 mfc0 t2, $14 (EPC)        yes
        0x408A6800,  # 0x04 mtc0 t2, $13 (Cause)      yes
        0x400A7801,  # 0x08 mfc0 t2, $15, 1 (EBase)   yes
        0x400A7800,  # 0x0c mfc0 t2, $15, 0 (PRId)    no
        0x400A6000,  # 0x10 mfc0 t2, $12 (Status)     no
        0x42000018,  # 0x14 eret                      yes
        0x00000000,  # 0x18 nop                       no
        0xDC000000,  # 0x1c ld (MIPS64: reserved)     yes
        0x400A4000,  # 0x20 mfc0 t2, $8 (BadVAddr)    yes (as Count $9, Compare $11)
        0x27BDFFE8,  # 0x24 addiu sp, sp, -24         no
        0x10000001,  # 0x28 b +8                      yes (a syscall in its slot)
        0x0000000C,  # 0x2c syscall                   no (INTR 17)
        0x50000001,  # 0x30 beql zero, zero, +8       no (likely)
        0x0000000C,  # 0x34 syscall                   no
        0x03E00008,  # 0x38 jr ra                     no (a nop in its slot)
        0x00000000,  # 0x3c nop                       no
    ]
    code = b"".join(w.to_bytes(4, byteorder) for w in words)
    assert list(Sites(byteorder).find(code)) == [0x00, 0x04, 0x08, 0x14, 0x1C, 0x20, 0x28]
