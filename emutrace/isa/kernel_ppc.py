"""PowerPC 440 (BookE) kernel images: interrupts through IVPR/IVORn, with SRR0/SRR1/ESR
modelled in Python (isa/kernel_power.py: Unicorn 2.1.4 exposes no SPR).

Book E: Enhanced PowerPC Architecture 1.0 (and the PPC440 user's manual), §7.6: a
non-critical interrupt saves the address to resume at in SRR0 and the MSR in SRR1, clears
every MSR bit but CE, ME and DE, and jumps to IVPR[0:15] || IVORn[16:27] || 0b0000.
System call (IVOR8): SRR0 = the instruction after `sc`.  Program (IVOR6): SRR0 = the
instruction itself, ESR[PIL] for an illegal instruction, ESR[PTR] for a trap.

Unicorn 2.1.4 (measured, UC_CPU_PPC32_440EPX): `sc` → INTR 8 and an illegal instruction →
INTR 96 (QEMU's POWERPC_EXCP_HV_EMU, which QEMU's powerpc_excp turns into a program
interrupt), a `tw` trap → INTR 6; in all of them the PC has already moved past the
instruction.  DBCR0[RST] = system reset is how the bamboo kernel powers off (QEMU
`store_40x_dbcr0` requests a reset, which `-no-reboot` turns into an exit with status 0).
"""

from emutrace.isa.kernel import FirmwareCall, KernelSupport, SysRegPort, TrapOutcome
from emutrace.isa.kernel_power import RFI, SRR0, SRR1, Sites, enter, spr_file

INTR_PROGRAM, INTR_SYSCALL, INTR_HV_EMU = 6, 8, 96  # QEMU target/ppc/cpu.h POWERPC_EXCP_*
DEAR, ESR, IVPR, DBCR0 = 61, 62, 63, 308  # SPR numbers (BookE SPR table)
IVOR0 = 400  # IVOR0..15 = SPR 400..415
IVOR_PROGRAM, IVOR_SYSCALL = 6, 8
ESR_PIL, ESR_PTR = 1 << 27, 1 << 25  # ESR bits 4 and 6 (32-bit numbering)
MSR_KEPT = 1 << 17 | 1 << 12 | 1 << 9  # CE, ME, DE
DBCR0_RST_SHIFT = 28  # DBCR0[2:3]: 0b01 core, 0b10 chip, 0b11 system reset


def is_trap(word: int) -> bool:
    """`tw` (opcode 31, XO 4) or `twi` (opcode 3)."""
    return word >> 26 == 3 or (word >> 26 == 31 and (word >> 1) & 0x3FF == 4)


def interrupt(cpu: SysRegPort, ivor: int, srr0: int) -> int:
    model = spr_file(cpu)
    vector = model.get(IVPR) & 0xFFFF0000 | model.get(IVOR0 + ivor) & 0xFFF0
    msr = cpu.reg_read("msr")
    return enter(cpu, srr0, msr, msr & MSR_KEPT, vector)


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    after = cpu.pc  # Unicorn has already moved past the instruction
    if intno == INTR_SYSCALL:
        return TrapOutcome("vector", "sc", interrupt(cpu, IVOR_SYSCALL, after))
    word = int.from_bytes(cpu.mem_read(after - 4, 4), "big")
    if intno == INTR_HV_EMU or (intno == INTR_PROGRAM and is_trap(word)):
        spr_file(cpu).regs[ESR] = ESR_PIL if intno == INTR_HV_EMU else ESR_PTR
        what = "illegal instruction" if intno == INTR_HV_EMU else "trap"
        return TrapOutcome("vector", what, interrupt(cpu, IVOR_PROGRAM, after - 4))
    return None


def dbcr0_written(cpu: SysRegPort, spr: int, value: int) -> TrapOutcome | None:
    if spr == DBCR0 and value >> DBCR0_RST_SHIFT & 3:
        return TrapOutcome("off", "DBCR0 reset")
    return None


SITES = Sites(
    modelled=frozenset({SRR0, SRR1, DEAR, ESR, IVPR, DBCR0, *range(IVOR0, IVOR0 + 16)}),
    read=frozenset({SRR0, SRR1, DEAR, ESR}),  # the ones interrupt entry writes
    returns=RFI,
    endian="big",
    on_write=dbcr0_written,
)

KERNEL = KernelSupport(
    deliver=deliver,
    reset=None,
    idle=(),
    emulated_insns=FirmwareCall(SITES.find, SITES.emulate),
    returns=(RFI.to_bytes(4, "big"),),
    modelled="sc (IVOR8), illegal instructions (IVOR6, ESR[PIL]) and tw/twi traps (IVOR6, "
             "ESR[PTR]) enter IVPR|IVORn with SRR0/SRR1 and ESR modelled in Python; "
             "mfspr/mtspr of SRR0/SRR1/ESR/DEAR/IVPR/IVORn and rfi are emulated where the "
             "image's code has them (found by a scan at load time, not in code written at "
             "run time); DBCR0[RST] powers off. Not modelled: critical, machine-check, "
             "storage (DEAR), timer and external interrupts, the BookE MMU (Unicorn maps "
             "virtual = physical), privileged-instruction program interrupts.",
)
