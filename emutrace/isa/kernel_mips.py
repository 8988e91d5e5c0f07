"""MIPS32 kernel images (mips and mipsel): the CP0 exception registers Unicorn does not
expose, modelled here, and exception entry and `eret` done against that model.

MIPS32 PRA (MD00090) vol. III §6.2.1 (general exception processing): with Status.EXL
clear, EPC takes the faulting instruction's address (its branch's, with Cause.BD, in a
delay slot); Cause.ExcCode takes the cause (table 9.31: 8 Sys, 10 RI); Status.EXL is set;
the PC goes to the general exception vector, EBase + 0x180 with Status.BEV = 0,
0xBFC0_0380 with BEV = 1 (table 6.3).  `eret` (vol. II "ERET") clears Status.EXL and
returns to EPC (to ErrorEPC, clearing ERL, when Status.ERL is set).

Unicorn 2.1.4 (measured): of CP0 only Status, Config3 and UserLocal are API registers;
EPC, Cause, BadVAddr, EBase live inside QEMU where a hook can neither read nor write them,
and `mfc0 EBase` reads CPUNum 0x3ff.  `syscall` → INTR 17 (EXCP_SYSCALL) with the PC past
it; a reserved instruction → INTR 20 (EXCP_RI) with the PC *not* on it (a stale value).
So the guest's own accesses to the modelled registers (`mfc0`/`mtc0` of BadVAddr $8,
Cause $13, EPC $14, EBase $15 sel 1) and its `eret`s are found by a static scan of the
image's executable segments (a linear sweep of 4-byte words: the ISA has no other
length) and each gets a one-address code hook (`FirmwareCall`) that does the instruction
on the model and moves the PC past it (a PC written from a code hook restarts there, the
instruction unrun: measured).  Words capstone cannot decode (reserved on MIPS32) get a
hook too, which notes their address: that is the EPC when Unicorn then reports INTR 20
(the note is dropped at the next hooked site or syscall, so a noted word that runs
without trapping does not lend its address to a later reserved instruction elsewhere,
unless that one is unscanned code reached before any such site).  A syscall in a branch
delay slot cannot go through INTR: Unicorn keeps the branch pending through the vector's
first instruction (measured; no API clears it), so the scan also hooks each branch (not
a branch-likely) whose delay slot holds a syscall, and the exception is taken there,
before the branch runs (EPC = the branch, Cause.BD).
Code written at run time is not scanned, so its CP0 accesses run natively (and read
QEMU's unset registers).

The timer (Count $9, Compare $11) is modelled the same way, Count in host time at QEMU
Malta's rate; when the CPU idles in `wait` (which ends Unicorn's emu_start with a bogus
UC_ERR_READ_UNMAPPED, the PC after it: measured) the board waits for Compare and takes
the interrupt if Status allows it (`timer_due`, `timer_interrupt`).  Interrupts are taken
only there, at idle, as on the other ISAs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from weakref import WeakKeyDictionary

import capstone

from emutrace.isa.base import Endian
from emutrace.isa.kernel import Deliver, FirmwareCall, KernelSupport, SysRegPort, TrapOutcome

INTR_SYSCALL, INTR_RI = 17, 20  # Unicorn's intno: QEMU target/mips/cpu.h EXCP_SYSCALL, EXCP_RI
EXC_SYS, EXC_RI = 8, 10  # Cause.ExcCode (PRA vol. III table 9.31)
STATUS_EXL, STATUS_ERL, STATUS_BEV = 1 << 1, 1 << 2, 1 << 22
CAUSE_BD, CAUSE_EXCCODE = 1 << 31, 0x1F << 2
# software-writable Cause bits (PRA vol. III §9.31): DC 27, IV 23, WP 22, IP1..IP0 9..8
CAUSE_WRITABLE = 1 << 27 | 1 << 23 | 1 << 22 | 3 << 8
EBASE_RESET = 0x8000_0000  # kseg0 base, CPUNum 0 (PRA vol. III §9.40)
EBASE_WRITABLE = 0x3FFF_F000  # bits 29..12: the exception base
BEV_VECTOR_BASE = 0xBFC0_0200  # PRA vol. III table 6.3: vectors with Status.BEV = 1
GENERAL_OFFSET = 0x180

# MIPS32 vol. II encodings: COP0 (opcode 0x10) MFC0 rs=0 / MTC0 rs=4, rt 20..16,
# rd 15..11, sel 2..0; ERET = 0x42000018; WAIT = 0x42000020 (code field 0)
COP0, MF, MT = 0x10, 0x00, 0x04
ERET, WAIT = 0x4200_0018, 0x4200_0020
SYSCALL_FUNCTION = 0x0C  # SPECIAL function of SYSCALL
BADVADDR, COUNT, COMPARE, CAUSE, EPC, EBASE = (8, 0), (9, 0), (11, 0), (13, 0), (14, 0), (15, 1)
MODELLED = (BADVADDR, COUNT, COMPARE, CAUSE, EPC, EBASE)
# the timer (PRA vol. III §9.16-9.18): Count counts at half the CPU clock (QEMU: 320 MHz
# for Malta, hw/mips/malta.c; count rate 2), Count == Compare raises the interrupt on
# IP7 (IntCtl.IPTI = 7) and sets Cause.TI; writing Compare clears both
COUNT_HZ = 160_000_000
CAUSE_TI, CAUSE_IP7, CAUSE_IV = 1 << 30, 1 << 15, 1 << 23
STATUS_IE, STATUS_IM7 = 1 << 0, 1 << 15
EXC_INT = 0
INTERRUPT_OFFSET = 0x200  # EBase + 0x200 with Cause.IV (PRA vol. III table 6.4)


@dataclass
class Cp0:
    """The CP0 registers Unicorn keeps out of reach (Status is Unicorn's own)."""

    epc: int = 0
    cause: int = 0
    badvaddr: int = 0
    ebase: int = EBASE_RESET
    reserved_at: int | None = None  # the reserved instruction about to run (INTR 20's EPC)
    compare: int = 0
    timer_armed: bool = False  # Compare written since reset
    count_origin: float = field(default_factory=time.monotonic)  # when Count was 0

    def count(self) -> int:
        """Count in host time (a real-time clock, as QEMU's)."""
        return int((time.monotonic() - self.count_origin) * COUNT_HZ) & 0xFFFF_FFFF


_MODELS: WeakKeyDictionary[SysRegPort, Cp0] = WeakKeyDictionary()


def cp0(cpu: SysRegPort) -> Cp0:
    """The model of this CPU's CP0, made at reset."""
    model = _MODELS.get(cpu)
    if model is None:
        model = _MODELS[cpu] = Cp0()
    return model


def reset(cpu: SysRegPort) -> None:
    _MODELS[cpu] = Cp0()


def has_delay_slot(word: int) -> bool:
    """The instruction runs the next one in its delay slot (MIPS32 vol. II, release 2):
    J, JAL, BEQ, BNE, BLEZ, BGTZ and their likely forms (opcodes 0x02-0x07, 0x14-0x17),
    REGIMM BLTZ/BGEZ(L)(AL) (rt 0x00-0x03, 0x10-0x13), SPECIAL JR/JALR (function 0x08,
    0x09), BC1/BC2 (COP1/COP2 with rs 0x08)."""
    op = word >> 26
    if op in (0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x14, 0x15, 0x16, 0x17):
        return True
    if op == 0x01:
        return word >> 16 & 0x1F in (0x00, 0x01, 0x02, 0x03, 0x10, 0x11, 0x12, 0x13)
    if op == 0x00:
        return word & 0x3F in (0x08, 0x09)
    if op in (0x11, 0x12):
        return word >> 21 & 0x1F == 0x08
    return False


def is_likely(word: int) -> bool:
    """A branch-likely (BEQL ... BGTZL: opcodes 0x14-0x17; REGIMM BLTZL, BGEZL, BLTZALL,
    BGEZALL: rt 0x02, 0x03, 0x12, 0x13; BC1/BC2 with nd set, bit 17): its delay slot
    runs only when it is taken."""
    op = word >> 26
    if op == 0x01:
        return word >> 16 & 0x1F in (0x02, 0x03, 0x12, 0x13)
    if op in (0x11, 0x12):
        return bool(word >> 17 & 1)
    return op in (0x14, 0x15, 0x16, 0x17)


def _syscall(word: int) -> bool:
    return word >> 26 == 0 and word & 0x3F == SYSCALL_FUNCTION


def _after_likely(cpu: SysRegPort, at: int, byteorder: Endian) -> bool:
    """The instruction at `at` follows a branch-likely, so it may have run in its delay
    slot (not looked for across a page start)."""
    return at % 0x1000 != 0 and is_likely(int.from_bytes(cpu.mem_read(at - 4, 4), byteorder))


def exception(cpu: SysRegPort, exc_code: int, at: int, delay_slot: bool = False,
              offset: int = GENERAL_OFFSET) -> int:
    """General exception entry (PRA vol. III §6.2.1) for the instruction at `at` (in a
    branch delay slot: EPC is the branch's address, Cause.BD set); returns the vector."""
    model, status = cp0(cpu), cpu.reg_read("cp0_status")
    if not status & STATUS_EXL:
        model.epc = at - 4 if delay_slot else at
        model.cause = model.cause | CAUSE_BD if delay_slot else model.cause & ~CAUSE_BD
    model.cause = (model.cause & ~CAUSE_EXCCODE) | exc_code << 2
    cpu.reg_write("cp0_status", status | STATUS_EXL)
    base = BEV_VECTOR_BASE if status & STATUS_BEV else model.ebase & ~0xFFF
    vector = (base + offset) & 0xFFFF_FFFF
    cpu.reg_write("pc", vector)
    return vector


def timer_due(cpu: SysRegPort) -> float | None:
    """Seconds until Count reaches Compare (None before Compare was written)."""
    model = cp0(cpu)
    if not model.timer_armed:
        return None
    return ((model.compare - model.count()) & 0xFFFF_FFFF) / COUNT_HZ


def timer_interrupt(cpu: SysRegPort) -> TrapOutcome | None:
    """The timer interrupt of an idle CPU (`wait`): taken when Status.IE and IM7 are set and
    EXL, ERL are clear (PRA vol. III §6.1.1); Cause.TI and IP7 are set, EPC is the
    instruction after the `wait` (QEMU's wait has moved the PC on), ExcCode 0; the vector
    is EBase + 0x200 with Cause.IV, else + 0x180."""
    model, status = cp0(cpu), cpu.reg_read("cp0_status")
    if status & (STATUS_IE | STATUS_IM7 | STATUS_EXL | STATUS_ERL) != STATUS_IE | STATUS_IM7:
        return None
    model.cause |= CAUSE_TI | CAUSE_IP7
    offset = INTERRUPT_OFFSET if model.cause & CAUSE_IV and not status & STATUS_BEV \
        else GENERAL_OFFSET
    return TrapOutcome("vector", "timer interrupt",
                       exception(cpu, EXC_INT, cpu.pc, offset=offset))


def deliverer(byteorder: Endian) -> Deliver:
    def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
        """A syscall or reserved instruction that Unicorn reports: not in a delay slot (a
        syscall in one is delivered at its branch, `Sites.emulate`: Unicorn would keep the
        branch pending through the vector's first instruction, measured), except after a
        branch-likely, where it may be: not modelled."""
        model = cp0(cpu)
        if intno == INTR_SYSCALL:  # the PC is past the syscall
            model.reserved_at = None  # a noted word ran without trapping
            at = cpu.pc - 4
            if _after_likely(cpu, at, byteorder):
                return None
            return TrapOutcome("vector", "syscall", exception(cpu, EXC_SYS, at))
        if intno == INTR_RI and model.reserved_at is not None:
            at, model.reserved_at = model.reserved_at, None
            if at % 0x1000 and has_delay_slot(int.from_bytes(cpu.mem_read(at - 4, 4),
                                                             byteorder)):
                return None  # in a delay slot, maybe: the pending branch cannot be cleared
            return TrapOutcome("vector", "reserved instruction", exception(cpu, EXC_RI, at))
        return None
    return deliver


# ------------------------------------------------------------------ the scanned sites
def _cop0_access(word: int) -> tuple[int, int, tuple[int, int]] | None:
    """(MF or MT, rt, (rd, sel)) of an mfc0/mtc0 of a modelled register, else None."""
    if word >> 26 != COP0 or word >> 21 & 0x1F not in (MF, MT) or word & 0x7F8:
        return None
    reg = (word >> 11 & 0x1F, word & 7)
    return (word >> 21 & 0x1F, word >> 16 & 0x1F, reg) if reg in MODELLED else None


def _mfc0(model: Cp0, reg: tuple[int, int]) -> int:
    if reg == COUNT:
        return model.count()
    return {BADVADDR: model.badvaddr, COMPARE: model.compare, CAUSE: model.cause,
            EPC: model.epc, EBASE: model.ebase}[reg]


def _mtc0(model: Cp0, reg: tuple[int, int], value: int) -> None:
    if reg == EPC:
        model.epc = value
    elif reg == CAUSE:
        model.cause = (model.cause & ~CAUSE_WRITABLE) | (value & CAUSE_WRITABLE)
    elif reg == EBASE:
        model.ebase = EBASE_RESET | (value & EBASE_WRITABLE)
    elif reg == COUNT:
        model.count_origin = time.monotonic() - value / COUNT_HZ
    elif reg == COMPARE:
        model.compare, model.timer_armed = value, True
        model.cause &= ~(CAUSE_TI | CAUSE_IP7)  # the interrupt is acknowledged
    # BadVAddr is read-only


@dataclass(frozen=True)
class Sites:
    """The scan and the emulation of one byte order."""

    byteorder: Endian

    def word(self, data: bytes) -> int:
        return int.from_bytes(data, self.byteorder)

    def find(self, code: bytes) -> Iterator[int]:
        """Offsets of the modelled mfc0/mtc0, of eret, of words capstone cannot decode
        (reserved instructions, or data), and of branches (not likely) with a syscall in
        their delay slot."""
        md = _disassembler(self.byteorder)
        for at in range(0, len(code) - 3, 4):
            word = self.word(code[at:at + 4])
            if word == ERET or _cop0_access(word) is not None or self._syscall_slot(
                    word, code[at + 4:at + 8]):
                yield at
            elif next(md.disasm_lite(code[at:at + 4], at), None) is None:
                yield at

    def _syscall_slot(self, word: int, slot: bytes) -> bool:
        return has_delay_slot(word) and not is_likely(word) and len(slot) == 4 \
            and _syscall(self.word(slot))

    def emulate(self, cpu: SysRegPort, addr: int) -> TrapOutcome | None:
        model, word = cp0(cpu), self.word(cpu.mem_read(addr, 4))
        # INTR 20 follows its instruction at once: an address noted before this one is
        # a word that ran without trapping (a stale EPC if kept)
        model.reserved_at = None
        if word == ERET:
            status = cpu.reg_read("cp0_status")
            if status & STATUS_ERL:
                return None  # ErrorEPC: Unicorn's own (the guest's mtc0 $30 runs natively)
            cpu.reg_write("cp0_status", status & ~STATUS_EXL)
            cpu.reg_write("pc", model.epc)
            return TrapOutcome("emulated", "CP0 eret")
        if self._syscall_slot(word, cpu.mem_read(addr + 4, 4)):
            # the syscall in this branch's delay slot traps before the branch completes
            # (EPC = the branch, BD): delivered here, the branch never runs
            return TrapOutcome("vector", "syscall",
                               exception(cpu, EXC_SYS, addr + 4, delay_slot=True))
        access = _cop0_access(word)
        if access is None:  # a word capstone cannot decode: INTR 20 follows if reserved
            model.reserved_at = addr
            return None
        op, rt, reg = access
        if op == MF:
            if rt:
                cpu.reg_write(str(rt), _mfc0(model, reg))
        else:
            _mtc0(model, reg, cpu.reg_read(str(rt)) & 0xFFFF_FFFF)
        cpu.reg_write("pc", addr + 4)
        return TrapOutcome("emulated", f"CP0 {'mfc0' if op == MF else 'mtc0'} "
                                       f"${reg[0]}{f',{reg[1]}' if reg[1] else ''}")


@cache
def _disassembler(byteorder: Endian) -> capstone.Cs:
    endian = capstone.CS_MODE_BIG_ENDIAN if byteorder == "big" else \
        capstone.CS_MODE_LITTLE_ENDIAN
    return capstone.Cs(capstone.CS_ARCH_MIPS, capstone.CS_MODE_MIPS32 | endian)


def support(byteorder: Endian) -> KernelSupport:
    sites = Sites(byteorder)
    return KernelSupport(
        deliver=deliverer(byteorder),
        reset=reset,
        idle=(WAIT.to_bytes(4, byteorder),),
        firmware_call=FirmwareCall(sites.find, sites.emulate),
        timer_interrupt=timer_interrupt,
        timer_due=timer_due,
        returns=(ERET.to_bytes(4, byteorder),),
        modelled="syscall (Cause.ExcCode 8) and reserved instructions that capstone "
                 "cannot decode (ExcCode 10) enter the general exception vector (EBase + "
                 "0x180, or 0xBFC00380 with Status.BEV) with EPC, Cause and Status.EXL "
                 "set (a syscall in a branch delay slot: EPC = the branch, Cause.BD); the "
                 "image's mfc0/mtc0 of BadVAddr, Cause, EPC, EBase and its eret are done on that "
                 "model (found by scanning its code at load time); the Count/Compare "
                 "interrupt (IP7, Cause.TI) wakes an idle CPU. Not modelled: traps in "
                 "the delay slot of a branch-likely, reserved instructions in delay slots, "
                 "interrupts of a busy CPU and other interrupts, TLB and address errors, "
                 "other exceptions, code written at run time.",
    )


KERNEL = support("big")
