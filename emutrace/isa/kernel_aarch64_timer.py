"""The AArch64 generic timer's EL1 virtual timer (Arm ARM D11.2), as a model.

Unicorn 2.1.4 keeps no state for the timer's control registers: `msr cntv_ctl_el0, x0`
then `mrs x1, cntv_ctl_el0` reads 0, and CNTV_CVAL_EL0 likewise (measured); only the
counter (CNTVCT_EL0) counts.  So the guest's accesses to CNTV_CTL_EL0, CNTV_CVAL_EL0 and
CNTV_TVAL_EL0 are found in its code (MRS/MSR by their fields: C5.2.2, bits 20:5 name the
register, 4:0 are Rt) and each is emulated on a `Timer` per CPU (a WeakKeyDictionary keyed
by the CPU port, so this layer holds no emulator), before it runs: the timer condition
(CNTVCT >= CVAL) is ISTATUS, and an enabled, unmasked timer whose condition holds asserts
its interrupt (PPI 27 on QEMU's virt board).  Not modelled: the physical and hypervisor
timers (Linux at EL1 uses the virtual one), CNTKCTL's EL0 access controls."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from emutrace.isa.kernel import FirmwareCall, SysRegPort, TrapOutcome
from emutrace.isa.kernel_aarch64_mmu import physical

CNTFRQ_EL0, CNTVCT_EL0 = (14, 0, 3, 3, 0), (14, 0, 3, 3, 2)  # (CRn, CRm, op0, op1, op2)
CTL_ENABLE, CTL_IMASK, CTL_ISTATUS = 1, 2, 4
MSR, MRS = 0xD5100000, 0xD5300000  # MSR/MRS (register), op0 = 2 + bit 19
RT = 0x1F
# the timer's registers' encodings (MSR/MRS without Rt): op0 3, op1 3, CRn 14, CRm 3
TVAL, CTL, CVAL = (1 << 19 | 3 << 16 | 14 << 12 | 3 << 8 | op2 << 5 for op2 in (0, 1, 2))
WORD = 2**64 - 1


@dataclass
class Timer:
    ctl: int = 0  # ENABLE, IMASK
    cval: int = 0


_TIMERS: WeakKeyDictionary[SysRegPort, Timer] = WeakKeyDictionary()


def timer(cpu: SysRegPort) -> Timer:
    model = _TIMERS.get(cpu)
    if model is None:
        model = _TIMERS[cpu] = Timer()
    return model


def _count(cpu: SysRegPort) -> int:
    return cpu.sysreg_read("cp_reg", CNTVCT_EL0)


def seconds_to_fire(cpu: SysRegPort) -> float | None:
    """Seconds until the timer asserts its interrupt (0: it does now); None while it is
    disabled or masked."""
    model = timer(cpu)
    if model.ctl & (CTL_ENABLE | CTL_IMASK) != CTL_ENABLE:
        return None
    ticks = model.cval - _count(cpu)
    return max(0.0, ticks / (cpu.sysreg_read("cp_reg", CNTFRQ_EL0) or 1))


def _pattern() -> re.Pattern[bytes]:
    """Each access as the little-endian word stands in memory: Rt's 5 bits in the first
    byte, the other three bytes fixed."""
    alternatives = []
    for op in (MSR, MRS):
        for reg in (TVAL, CTL, CVAL):
            word = (op | reg).to_bytes(4, "little")
            alternatives.append(b"[" + re.escape(bytes((word[0],))) + b"-"
                                + re.escape(bytes((word[0] | RT,))) + b"]"
                                + re.escape(word[1:]))
    return re.compile(b"|".join(alternatives))


PATTERN = _pattern()


def find(code: bytes) -> Iterator[int]:
    for m in PATTERN.finditer(code):
        if m.start() % 4 == 0:
            yield m.start()


def _x(cpu: SysRegPort, rt: int) -> int:
    return 0 if rt == RT else cpu.reg_read(f"x{rt}")


def emulate(cpu: SysRegPort, address: int) -> TrapOutcome | None:
    """The access at address, done on the model; the PC then goes past it."""
    at = physical(cpu, address)
    if at is None:
        return None
    word = int.from_bytes(cpu.mem_read(at, 4), "little")
    rt, reg, is_read = word & RT, word & 0x000FFFE0, bool(word & (1 << 21))
    model = timer(cpu)
    if word & 0xFFD00000 != MSR & 0xFFD00000 or reg not in (TVAL, CTL, CVAL):
        return None  # (a breakpoint standing here: the original runs later)
    count = _count(cpu)
    if is_read:
        if reg == CTL:
            value = model.ctl | (CTL_ISTATUS if model.ctl & CTL_ENABLE
                                 and count >= model.cval else 0)
        elif reg == CVAL:
            value = model.cval
        else:  # TVAL: CVAL - count, as a signed 32-bit value (D11.2.4)
            value = (model.cval - count) & 0xFFFFFFFF
            value = (value - (1 << 32) if value >> 31 else value) & WORD
        if rt != RT:
            cpu.reg_write(f"x{rt}", value)
    else:
        value = _x(cpu, rt)
        if reg == CTL:
            model.ctl = value & (CTL_ENABLE | CTL_IMASK)
        elif reg == CVAL:
            model.cval = value
        else:
            tval = value & 0xFFFFFFFF
            model.cval = (count + (tval - (1 << 32) if tval >> 31 else tval)) & WORD
    cpu.reg_write("pc", address + 4)
    return None


ACCESSES = FirmwareCall(find, emulate)
