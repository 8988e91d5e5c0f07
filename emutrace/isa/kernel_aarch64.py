"""AArch64 kernel images: synchronous exception entry to EL1, PSCI over hvc/smc.

Arm ARM (DDI 0487) D1.10: an exception taken to EL1 saves PSTATE in SPSR_EL1 and the
preferred return address in ELR_EL1, writes the syndrome to ESR_EL1 (D17.2.37: EC in bits
31–26, IL bit 25, ISS), masks DAIF, selects SP_EL1 and jumps to VBAR_EL1 + offset (D1.10.2:
+0x000 current EL with SP_EL0, +0x200 current EL with SP_ELx, +0x400 lower EL AArch64).
Unicorn 2.1.4 (measured): `svc` → INTR 2 (EXCP_SWI) with PC past it; `hvc`/`smc` at EL1 →
INTR 1 (EXCP_UDEF) with PC on it.  `eret` then works natively.
"""

from emutrace.isa.kernel import INSN_INVALID, KernelSupport, SysRegPort, TrapOutcome

EXCP_UDEF, EXCP_SWI = 1, 2  # QEMU target/arm/cpu.h
EC_UNKNOWN, EC_SVC64 = 0x00, 0x15  # ESR_ELx.EC (D17.2.37)
IL = 1 << 25  # 32-bit instruction
PSTATE_DAIF = 0xF << 6
PSTATE_EL1H = 0b0101  # M[3:0]: EL1, SP_EL1
NZCV = 0xF << 28
SPSR_EL1 = (4, 0, 3, 0, 0)  # (CRn, CRm, op0, op1, op2): Unicorn has no named SPSR_EL1

# PSCI (Arm DEN0022D §5.1): function ids of the SMC32 calling convention
PSCI_VERSION, PSCI_SYSTEM_OFF, PSCI_SYSTEM_RESET = 0x84000000, 0x84000008, 0x84000009
PSCI_NOT_SUPPORTED = -1
PSCI_1_1 = 0x00010001  # what QEMU 7.2's virt machine reports

# HVC #imm16 = 0xD4000002 | imm16 << 5, SMC = 0xD4000003 | imm16 << 5 (C6.2.106, C6.2.272)
HVC_SMC_MASK, HVC, SMC = 0xFFE0001F, 0xD4000002, 0xD4000003


def _insn(cpu: SysRegPort, addr: int) -> int:
    return int.from_bytes(cpu.mem_read(addr, 4), "little")


def enter_el1(cpu: SysRegPort, esr: int, elr: int) -> int:
    """Synchronous exception entry to EL1; returns the vector address.  Modelled: taken from
    EL1 (either SP) or EL0 while running on SP_EL1's bank (Unicorn's PSTATE write does not
    swap SP banks, so a kernel that runs EL0 code with its own SP_EL0 is not modelled)."""
    pstate = cpu.reg_read("pstate")
    el = (pstate >> 2) & 3
    offset = 0x400 if el == 0 else (0x200 if pstate & 1 else 0x000)
    cpu.reg_write("cp_reg", (*SPSR_EL1, pstate))
    cpu.reg_write("elr_el1", elr)
    cpu.reg_write("esr_el1", esr)
    cpu.reg_write("pstate", (pstate & NZCV) | PSTATE_DAIF | PSTATE_EL1H)
    vector = cpu.reg_read("vbar_el1") + offset
    cpu.reg_write("pc", vector)
    return vector


def psci(cpu: SysRegPort, next_pc: int, conduit: str) -> TrapOutcome:
    """The PSCI firmware QEMU's virt machine emulates for hvc/smc calls."""
    fid = cpu.reg_read("x0") & 0xFFFFFFFF
    if fid in (PSCI_SYSTEM_OFF, PSCI_SYSTEM_RESET):
        name = "SYSTEM_OFF" if fid == PSCI_SYSTEM_OFF else "SYSTEM_RESET"
        return TrapOutcome("off", f"PSCI {name} ({conduit})", status=0)
    cpu.reg_write("x0", PSCI_1_1 if fid == PSCI_VERSION else PSCI_NOT_SUPPORTED & (2**64 - 1))
    cpu.reg_write("pc", next_pc)
    return TrapOutcome("emulated", f"PSCI {fid:#x} ({conduit})")


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    pc = cpu.pc
    if intno == EXCP_SWI:  # svc #imm16: ISS = imm16; preferred return = the next insn
        imm = (_insn(cpu, pc - 4) >> 5) & 0xFFFF
        return TrapOutcome("vector", "svc", enter_el1(cpu, EC_SVC64 << 26 | IL | imm, pc))
    if intno in (EXCP_UDEF, INSN_INVALID):
        insn = _insn(cpu, pc)
        if insn & HVC_SMC_MASK in (HVC, SMC):
            return psci(cpu, pc + 4, "hvc" if insn & HVC_SMC_MASK == HVC else "smc")
        return TrapOutcome("vector", "undefined instruction",
                           enter_el1(cpu, EC_UNKNOWN << 26 | IL, pc))
    return None


def reset(cpu: SysRegPort) -> None:
    """Unicorn 2.1.4 starts with SCR_EL3.RW = HCR_EL2.RW = 0, so QEMU's arm_el_is_aa64(EL1)
    is false and a 4-level AArch64 MMU walk aborts (measured; U-Boot and Linux need it):
    set SCR_EL3 = RW | NS (bits 10, 0) and HCR_EL2.RW (bit 31) as firmware would."""
    # keys (CRn, CRm, op0, op1, op2): SCR_EL3 = (1, 1, 3, 6, 0), HCR_EL2 = (1, 1, 3, 4, 0)
    cpu.reg_write("cp_reg", (1, 1, 3, 6, 0, (1 << 10) | 1))
    cpu.reg_write("cp_reg", (1, 1, 3, 4, 0, 1 << 31))


KERNEL = KernelSupport(
    deliver=deliver,
    reset=reset,
    idle=(bytes.fromhex("7f2003d5"),),  # WFI = 0xD503207F
    modelled="svc and undefined instructions enter VBAR_EL1 (ESR/ELR/SPSR written, DAIF "
             "masked, EL1h); hvc/smc are PSCI calls (SYSTEM_OFF/SYSTEM_RESET end the run, "
             "PSCI_VERSION answers 1.1, others NOT_SUPPORTED). Not modelled: aborts (Unicorn "
             "gives no syndrome), IRQ/FIQ (no GIC, no timer interrupt), EL2/EL3, EL0 with its "
             "own SP_EL0.",
)
