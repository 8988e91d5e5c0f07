"""AArch64 data and instruction aborts, given the syndrome Unicorn does not give.

Unicorn 2.1.4 calls the interrupt hook with EXCP_DATA_ABORT / EXCP_PREFETCH_ABORT and the
PC on the faulting instruction, but never runs QEMU's `arm_cpu_do_interrupt`, so FAR_EL1
and ESR_EL1 stay unset (measured).  They are found again here: the faulting instruction is
decoded (capstone) for its address, size and direction, and the address is translated by
the EL1&0 stage-1 walk (Arm ARM D8: 4 KiB granule, TCR_EL1.T0SZ/T1SZ, descriptors' AF
bit 10, AP[2:1] bits 7:6, PXN 53, UXN 54, and the table descriptors' APTable 62:61,
UXNTable 60, PXNTable 59), whose failure gives the fault status code (D17.2.37 ESR_ELx
ISS DFSC/IFSC: 0b0001LL translation, 0b0010LL access flag, 0b0011LL permission fault at
level LL).  Not modelled: a granule other than 4 KiB, alignment and external aborts, PAN
(the Cortex-A57 is Armv8.0), hardware AF/dirty management (the same)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import capstone
from capstone import arm64 as cs_arm64

from emutrace.isa.kernel import SysRegPort
from emutrace.isa.kernel_aarch64_mmu import OUTPUT_ADDRESS, SCTLR_EL1, TCR_EL1

PAGE = 0x1000
TRANSLATION, ACCESS_FLAG, PERMISSION = 0b000100, 0b001000, 0b001100  # + level
EC_IABT_LOW, EC_IABT_CUR, EC_DABT_LOW, EC_DABT_CUR = 0x20, 0x21, 0x24, 0x25
IL = 1 << 25
WNR = 1 << 6  # ISS bit 6: the abort was a write
CM = 1 << 8  # ISS bit 8: a cache maintenance instruction


@dataclass(frozen=True)
class Access:
    """One memory access of an instruction: where, how many bytes, and whether it writes
    or runs with EL0's permissions (LDTR/STTR: unprivileged)."""

    address: int
    size: int
    write: bool
    unprivileged: bool = False
    maintenance: bool = False


def fault_status(cpu: SysRegPort, va: int, write: bool, execute: bool, el0: bool) -> int | None:
    """The DFSC/IFSC of this access at va, or None if it would not fault."""
    tcr = cpu.sysreg_read("cp_reg", TCR_EL1)
    if not cpu.sysreg_read("cp_reg", SCTLR_EL1) & 1:
        return None
    upper = va >> 55 & 1
    if upper:
        txsz, epd, granule_ok = tcr >> 16 & 0x3F, tcr >> 23 & 1, tcr >> 30 & 3 == 2
        base = cpu.reg_read("ttbr1_el1")
    else:
        txsz, epd, granule_ok = tcr & 0x3F, tcr >> 7 & 1, tcr >> 14 & 3 == 0
        base = cpu.reg_read("ttbr0_el1")
    bits = 64 - txsz
    first = 4 - -(-(bits - 12) // 9)
    top = va >> bits
    if epd or not granule_ok or top not in (0, (1 << (64 - bits)) - 1) or top & 1 != upper:
        return TRANSLATION + first
    table = base & OUTPUT_ADDRESS
    ap_table = uxn_table = pxn_table = 0
    for level in range(first, 4):
        shift = 12 + 9 * (3 - level)
        index = (va >> shift) & ((1 << min(9, bits - shift)) - 1)
        desc = int.from_bytes(cpu.mem_read(table + 8 * index, 8), "little")
        if not desc & 1 or (level == 3 and not desc & 2):
            return TRANSLATION + level
        if level < 3 and desc & 2:  # a table: its limits apply to all below
            ap_table |= desc >> 61 & 3
            uxn_table |= desc >> 60 & 1
            pxn_table |= desc >> 59 & 1
            table = desc & OUTPUT_ADDRESS
            continue
        if not desc >> 10 & 1:
            return ACCESS_FLAG + level
        el0_ok = desc >> 6 & 1 and not ap_table & 1
        read_only = desc >> 7 & 1 or ap_table & 2
        if (el0 and not el0_ok) or (write and read_only):
            return PERMISSION + level
        if execute and (el0 and (desc >> 54 & 1 or uxn_table)
                        or not el0 and (desc >> 53 & 1 or pxn_table or el0_ok and not read_only)):
            return PERMISSION + level
        return None
    return TRANSLATION + 3


@cache
def _decoder() -> capstone.Cs:
    cs = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    cs.detail = True
    return cs


_EXTENDS = {cs_arm64.ARM64_EXT_UXTW: (32, False), cs_arm64.ARM64_EXT_SXTW: (32, True),
            cs_arm64.ARM64_EXT_UXTX: (64, False), cs_arm64.ARM64_EXT_SXTX: (64, True)}


def _index(cpu: SysRegPort, op: capstone.arm64.Arm64Op, name: str) -> int:
    value = cpu.reg_read(name)
    width, signed = _EXTENDS.get(op.ext, (64, False))
    value &= (1 << width) - 1
    if signed and value >> (width - 1):
        value -= 1 << width
    if op.shift.type == cs_arm64.ARM64_SFT_LSL:
        value <<= op.shift.value
    return value


def accesses(cpu: SysRegPort, insn_word: int, pc: int) -> Access | None:
    """The memory access of the load/store at pc (registers as before it ran), or None if
    it is not one this decodes."""
    insns = list(_decoder().disasm(insn_word.to_bytes(4, "little"), pc, 1))
    if not insns:
        return None
    insn = insns[0]
    mnemonic = insn.mnemonic
    mem = next((op for op in insn.operands if op.type == cs_arm64.ARM64_OP_MEM), None)
    if mnemonic in ("dc", "ic"):  # DC ZVA writes a block; other maintenance by VA
        reg = next(op for op in insn.operands if op.type == cs_arm64.ARM64_OP_REG)
        address = cpu.reg_read(insn.reg_name(reg.reg))
        zva = "zva" in insn.op_str
        return Access(address & ~63 if zva else address, 64 if zva else 1, zva,
                      maintenance=not zva)
    if mem is None:
        return None
    address = cpu.reg_read(insn.reg_name(mem.mem.base)) + mem.mem.disp
    if mem.mem.index:
        address += _index(cpu, mem, insn.reg_name(mem.mem.index))
    regs = [op for op in insn.operands if op.type == cs_arm64.ARM64_OP_REG]
    width = 8
    if regs:
        name = insn.reg_name(regs[0].reg)
        width = {"w": 4, "x": 8, "b": 1, "h": 2, "s": 4, "d": 8, "q": 16, "v": 16}.get(
            name[0], 8)
    size = {"b": 1, "h": 2}.get(mnemonic[-1], width) if mnemonic[-1] in "bh" else width
    pair = mnemonic.startswith(("ldp", "stp", "ldnp", "stnp", "ldxp", "stxp", "ldaxp",
                                "stlxp"))
    if mnemonic.startswith(("ld1", "st1", "ld2", "st2", "ld3", "st3", "ld4", "st4")):
        size = 16 * int(mnemonic[2])
    elif pair:
        size *= 2
    write = mnemonic.startswith(("st", "cas", "swp")) or mnemonic.startswith("ld") and \
        len(mnemonic) > 2 and mnemonic[2:5] in ("add", "clr", "eor", "set", "sma", "smi",
                                                 "uma", "umi")
    unprivileged = mnemonic[2:4] == "tr"  # LDTR*, STTR*
    return Access(address & (2**64 - 1), size, write, unprivileged)


@dataclass(frozen=True)
class Abort:
    esr: int
    far: int


def data_abort(cpu: SysRegPort, insn_word: int, pc: int, el: int) -> Abort | None:
    """ESR_EL1 and FAR_EL1 of the data abort the instruction at pc took, or None if it
    cannot be found (not a decodable access, or no part of it faults)."""
    access = accesses(cpu, insn_word, pc)
    if access is None:
        return None
    el0 = el == 0 or access.unprivileged
    last = access.address + access.size - 1
    for page_va in dict.fromkeys((access.address, last & ~(PAGE - 1))):
        va = max(page_va, access.address)
        status = fault_status(cpu, va, access.write, False, el0)
        if status is not None:
            ec = EC_DABT_LOW if el == 0 else EC_DABT_CUR
            iss = status | (WNR if access.write or access.maintenance else 0) \
                | (CM if access.maintenance else 0)
            return Abort(ec << 26 | IL | iss, va)
    return None


def instruction_abort(cpu: SysRegPort, pc: int, el: int) -> Abort | None:
    status = fault_status(cpu, pc, False, True, el == 0)
    if status is None:
        return None
    ec = EC_IABT_LOW if el == 0 else EC_IABT_CUR
    return Abort(ec << 26 | IL | status, pc)
