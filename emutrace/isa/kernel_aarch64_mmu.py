"""The AArch64 EL1&0 stage-1 translation a kernel image's traps read through (Unicorn's
memory calls take physical addresses): shared by the exception entry (kernel_aarch64.py)
and the timer model (kernel_aarch64_timer.py)."""

from __future__ import annotations

from emutrace.isa.kernel import SysRegPort

# (CRn, CRm, op0, op1, op2) of registers Unicorn names only through CP_REG
SCTLR_EL1, TCR_EL1 = (1, 0, 3, 0, 0), (2, 0, 3, 0, 2)
SCTLR_M = 1  # stage 1 MMU enabled
OUTPUT_ADDRESS = 0x0000_FFFF_FFFF_F000  # descriptor bits 47:12


def physical(cpu: SysRegPort, va: int) -> int | None:
    """The EL1&0 stage-1 translation of va with the 4 KiB granule (Arm ARM D8.2: TCR_EL1
    T0SZ/T1SZ give the VA width, each level resolves 9 bits, bits 1:0 of a descriptor are
    0b11 table/page, 0b01 block), or None if unmapped or another granule.  Unicorn's
    mem_read takes physical addresses, so a trap taken with the MMU on reads its
    instruction through this walk."""
    if not cpu.sysreg_read("cp_reg", SCTLR_EL1) & SCTLR_M:
        return va
    tcr = cpu.sysreg_read("cp_reg", TCR_EL1)
    if va >> 55 & 1:
        txsz, base, granule_ok = tcr >> 16 & 0x3F, cpu.reg_read("ttbr1_el1"), tcr >> 30 & 3 == 2
    else:
        txsz, base, granule_ok = tcr & 0x3F, cpu.reg_read("ttbr0_el1"), tcr >> 14 & 3 == 0
    if not granule_ok:
        return None
    bits = 64 - txsz
    table = base & OUTPUT_ADDRESS
    for level in range(4 - -(-(bits - 12) // 9), 4):
        shift = 12 + 9 * (3 - level)
        index = (va >> shift) & ((1 << min(9, bits - shift)) - 1)
        desc = int.from_bytes(cpu.mem_read(table + 8 * index, 8), "little")
        if not desc & 1:
            return None
        if level == 3 or not desc & 2:  # a page, or a block at level 1/2
            offset = (1 << shift) - 1
            return (desc & OUTPUT_ADDRESS & ~offset) | (va & offset)
        table = desc & OUTPUT_ADDRESS
    return None
