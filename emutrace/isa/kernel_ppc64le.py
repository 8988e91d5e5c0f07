"""ppc64le kernel images on a PAPR (pseries) guest: Book III-S interrupts at the fixed
vectors with SRR0/SRR1 modelled in Python (isa/kernel_power.py: Unicorn 2.1.4 exposes no
SPR), and the hypercalls a guest makes to its hypervisor (QEMU's sPAPR), answered here.

Power ISA 3.0 Book III §7.5: a system call (`sc`, LEV = 0) enters 0xc00 with SRR0 = the
next instruction; a program interrupt enters 0x700 with SRR0 = the instruction and SRR1
bit 44 (illegal instruction) or 46 (trap) set; SRR1 takes the MSR with bits 33:36 and
42:47 replaced by the interrupt's; the new MSR keeps ME and HV, sets SF, sets LE from
LPCR[ILE] and clears the rest (IR/DR: real mode).  QEMU's `powerpc_excp_books` does the
same, and in PAPR mode turns the hypervisor-emulation interrupt of an illegal instruction
into that program interrupt.

`sc 1` (LEV = 1) is a hypercall (PAPR: r3 = the number, r4.. its arguments, r3 the
status).  Modelled, as QEMU's hw/ppc/spapr_hcall.c, spapr_vty.c and spapr_rtas.c:
H_PUT_TERM_CHAR (the console: r5 bytes from r6:r7, first byte most significant),
H_SET_MODE resource LE (interrupts little-endian: LPCR[ILE]), H_RTAS with the RTAS call
"power-off" (QEMU's token 0x2003; the argument block is big-endian words: token, nargs,
nret, arguments, returns).

Unicorn 2.1.4 (measured, ppc64 in big-endian mode with MSR[LE] set): `sc` and `sc 1` →
INTR 8, an illegal instruction → INTR 96 (QEMU's POWERPC_EXCP_HV_EMU), `tw` → INTR 6; the
PC is past the instruction in all of them.
"""

from emutrace.isa.kernel import FirmwareCall, KernelSupport, SysRegPort, TrapOutcome
from emutrace.isa.kernel_power import RFID, SRR0, SRR1, Sites, enter, spr_file
from emutrace.isa.kernel_ppc import INTR_HV_EMU, INTR_PROGRAM, INTR_SYSCALL, is_trap

VECTOR_PROGRAM, VECTOR_SYSCALL = 0x700, 0xC00
SRR1_CAUSE_BITS = 0x783F0000  # SRR1 33:36 and 42:47 (64-bit numbering)
SRR1_ILLEGAL, SRR1_TRAP = 1 << 19, 1 << 17  # bits 44, 46
MSR_SF, MSR_HV, MSR_ME, MSR_LE = 1 << 63, 1 << 60, 1 << 12, 1 << 0
WORD64 = (1 << 64) - 1

# PAPR hypercalls (QEMU include/hw/ppc/spapr.h)
H_SUCCESS, H_FUNCTION = 0, -2
H_PUT_TERM_CHAR, H_SET_MODE, H_RTAS = 0x58, 0x31C, 0xF000
H_SET_MODE_RESOURCE_LE = 4
RTAS_POWER_OFF = 0x2003  # RTAS_TOKEN_BASE + 3
RTAS_NOT_SUPPORTED = -3


def interrupt(cpu: SysRegPort, vector: int, srr0: int, cause: int) -> int:
    msr = cpu.reg_read("msr")
    new_msr = msr & (MSR_ME | MSR_HV) | MSR_SF | (MSR_LE if spr_file(cpu).ile else 0)
    return enter(cpu, srr0, msr & ~SRR1_CAUSE_BITS | cause, new_msr, vector)


def status(cpu: SysRegPort, value: int) -> None:
    cpu.reg_write("r3", value & WORD64)


def hypercall(cpu: SysRegPort) -> TrapOutcome:
    number = cpu.reg_read("r3")
    if number == H_PUT_TERM_CHAR:
        length = min(cpu.reg_read("r5"), 16)
        text = cpu.reg_read("r6").to_bytes(8, "big") + cpu.reg_read("r7").to_bytes(8, "big")
        status(cpu, H_SUCCESS)
        return TrapOutcome("emulated", "H_PUT_TERM_CHAR", console=text[:length])
    if number == H_SET_MODE and cpu.reg_read("r5") == H_SET_MODE_RESOURCE_LE \
            and cpu.reg_read("r4") in (0, 1):
        spr_file(cpu).ile = cpu.reg_read("r4") == 1  # H_SET_MODE_ENDIAN_LITTLE = 1
        status(cpu, H_SUCCESS)
        return TrapOutcome("emulated", "H_SET_MODE")
    if number == H_RTAS:
        block = cpu.reg_read("r4")
        token, nargs = (int.from_bytes(cpu.mem_read(block + 4 * i, 4), "big") for i in (0, 1))
        if token == RTAS_POWER_OFF:
            return TrapOutcome("off", "H_RTAS power-off")
        cpu.mem_write(block + 12 + 4 * nargs, (RTAS_NOT_SUPPORTED & 0xFFFFFFFF).to_bytes(4, "big"))
        status(cpu, H_SUCCESS)
        return TrapOutcome("emulated", f"H_RTAS {token:#x}")
    status(cpu, H_FUNCTION)  # not modelled (QEMU answers a few of these otherwise)
    return TrapOutcome("emulated", f"hcall {number:#x}")


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    after = cpu.pc  # Unicorn has already moved past the instruction
    word = int.from_bytes(cpu.mem_read(after - 4, 4), "little")
    if intno == INTR_SYSCALL:
        if (word >> 5) & 0x7F == 1:  # sc LEV: 1 = hypervisor call
            return hypercall(cpu)
        return TrapOutcome("vector", "sc", interrupt(cpu, VECTOR_SYSCALL, after, 0))
    if intno == INTR_HV_EMU or (intno == INTR_PROGRAM and is_trap(word)):
        illegal = intno == INTR_HV_EMU
        return TrapOutcome("vector", "illegal instruction" if illegal else "trap",
                           interrupt(cpu, VECTOR_PROGRAM, after - 4,
                                     SRR1_ILLEGAL if illegal else SRR1_TRAP))
    return None


SITES = Sites(
    modelled=frozenset({SRR0, SRR1}),
    read=frozenset({SRR0, SRR1}),
    returns=RFID,
    endian="little",
    word_mask=WORD64,
)

KERNEL = KernelSupport(
    deliver=deliver,
    reset=None,  # the ISA's reset: 64-bit, little-endian (MSR SF|LE)
    idle=(),
    emulated_insns=FirmwareCall(SITES.find, SITES.emulate),
    returns=(RFID.to_bytes(4, "little"),),
    modelled="sc (0xc00) and illegal instructions / tw traps (0x700, SRR1 bit 44/46) with "
             "SRR0/SRR1 modelled in Python, MSR as Book III-S (SF, ME/HV kept, LE = ILE); "
             "mfspr/mtspr of SRR0/SRR1 and rfid emulated where the image's code has them "
             "(found by a scan at load time, not in code written at run time); hypercalls "
             "H_PUT_TERM_CHAR (console), H_SET_MODE (ILE), H_RTAS power-off. Not modelled: "
             "other interrupts (storage, decrementer, external, hypervisor), AIL, "
             "HSRR0/HSRR1, the MMU (virtual = physical), other hypercalls (H_FUNCTION).",
)
