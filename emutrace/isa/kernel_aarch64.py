"""AArch64 kernel images: synchronous exception entry to EL1, PSCI over hvc.

Arm ARM (DDI 0487) D1.10: an exception taken to EL1 saves PSTATE in SPSR_EL1 and the
preferred return address in ELR_EL1, writes the syndrome to ESR_EL1 (D17.2.37: EC in bits
31–26, IL bit 25, ISS), masks DAIF, selects SP_EL1 and jumps to VBAR_EL1 + offset (D1.10.2:
+0x000 current EL with SP_EL0, +0x200 current EL with SP_ELx, +0x400 lower EL AArch64).
Unicorn 2.1.4 (measured): `svc` → INTR 2 (EXCP_SWI) with PC past it; `hvc` at EL1 → INTR 1
(EXCP_UDEF) with PC on it; `smc` at EL1 → INTR 13 (EXCP_SMC) with PC past it.  `eret` then
works natively.  QEMU's virt without EL2 or EL3 (hw/arm/virt.c) makes hvc the PSCI conduit;
`smc` with no EL3 is UNDEFINED (Arm ARM C6.2.272), so it enters the EL1 vector as an unknown
instruction (EC 0, ELR on it), as qemu-system-aarch64 -M virt does.
"""

from emutrace.isa import kernel_aarch64_timer
from emutrace.isa.kernel import INSN_INVALID, KernelSupport, SysRegPort, TrapOutcome
from emutrace.isa.kernel_aarch64_aborts import data_abort, instruction_abort
from emutrace.isa.kernel_aarch64_mmu import physical

EXCP_UDEF, EXCP_SWI, EXCP_PREFETCH_ABORT, EXCP_DATA_ABORT = 1, 2, 3, 4  # QEMU cpu.h
EXCP_SMC = 13
EC_UNKNOWN, EC_SVC64 = 0x00, 0x15  # ESR_ELx.EC (D17.2.37)
IL = 1 << 25  # 32-bit instruction
PSTATE_DAIF = 0xF << 6
PSTATE_EL1H = 0b0101  # M[3:0]: EL1, SP_EL1
NZCV = 0xF << 28
SPSR_EL1 = (4, 0, 3, 0, 0)  # (CRn, CRm, op0, op1, op2): Unicorn has no named SPSR_EL1
SYNC, IRQ = 0x000, 0x080  # a vector's offset in its group of four (D1.10.2)
PSTATE_I = 1 << 7  # IRQs masked


# PSCI (Arm DEN0022D §5.1): function ids of the SMC32 calling convention
PSCI_VERSION, PSCI_SYSTEM_OFF, PSCI_SYSTEM_RESET = 0x84000000, 0x84000008, 0x84000009
PSCI_MIGRATE_INFO_TYPE, PSCI_FEATURES = 0x84000006, 0x8400000A
PSCI_NOT_SUPPORTED = -1
PSCI_1_1 = 0x00010001  # what QEMU 7.2's virt machine reports
TOS_NOT_PRESENT_MP = 2  # MIGRATE_INFO_TYPE: no Trusted OS to migrate (QEMU's answer)
# the functions QEMU 7.2's PSCI (target/arm/psci.c) implements: PSCI_FEATURES says 0 for
# them (SMC32 ids; CPU_SUSPEND, CPU_ON, AFFINITY_INFO also in SMC64, 0xC4...)
QEMU_PSCI = frozenset({0x84000000, 0x84000001, 0x84000002, 0x84000003, 0x84000004,
                       0x84000006, 0x84000008, 0x84000009, 0x8400000A,
                       0xC4000001, 0xC4000003, 0xC4000004})

WFI = 0xD503207F  # C6.2.351
SCR_RW, SCR_NS = 1 << 10, 1 << 0  # SCR_EL3 (D17.2.117)
HCR_RW, HCR_TWI = 1 << 31, 1 << 13  # HCR_EL2 (D17.2.48)
# HVC #imm16 = 0xD4000002 | imm16 << 5, SMC = 0xD4000003 | imm16 << 5 (C6.2.106, C6.2.272)
HVC_SMC_MASK, HVC, SMC = 0xFFE0001F, 0xD4000002, 0xD4000003


def _insn(cpu: SysRegPort, addr: int) -> int:
    pa = physical(cpu, addr)
    if pa is None:
        return 0  # unmapped: no instruction a trap could be
    return int.from_bytes(cpu.mem_read(pa, 4), "little")


def enter_el1(cpu: SysRegPort, esr: int | None, elr: int, far: int | None = None,
              kind: int = SYNC) -> int:
    """Synchronous exception entry to EL1; returns the vector address.  Unicorn's PSTATE
    write does not swap the SP banks (QEMU's aarch64_save_sp/restore_sp), so it is done
    here: the SP of the EL left (SP_EL0 from EL0 or EL1t) is saved to its bank and SP_EL1
    loaded; FAR_EL1 is written for an abort."""
    pstate = cpu.reg_read("pstate")
    el = (pstate >> 2) & 3
    on_sp_el0 = el == 0 or not pstate & 1
    offset = kind + (0x400 if el == 0 else (0x200 if pstate & 1 else 0x000))
    cpu.reg_write("elr_el1", elr)
    if esr is not None:
        cpu.reg_write("esr_el1", esr)
    if far is not None:
        cpu.reg_write("far_el1", far)
    if on_sp_el0:
        cpu.reg_write("sp_el0", cpu.reg_read("sp"))
    cpu.reg_write("pstate", (pstate & NZCV) | PSTATE_DAIF | PSTATE_EL1H)
    if on_sp_el0:
        cpu.reg_write("sp", cpu.reg_read("sp_el1"))
    # last: a CP_REG write makes Unicorn rebuild the cached hflags (its PSTATE write does
    # not), so the next instruction runs with EL1's MMU index (measured: an EL0 -> EL1
    # entry otherwise faults fetching the vector)
    cpu.reg_write("cp_reg", (*SPSR_EL1, pstate))
    vector = cpu.reg_read("vbar_el1") + offset
    cpu.reg_write("pc", vector)
    return vector


def psci(cpu: SysRegPort, next_pc: int, conduit: str) -> TrapOutcome:
    """The PSCI firmware QEMU's virt machine emulates for hvc calls (its conduit)."""
    fid = cpu.reg_read("x0") & 0xFFFFFFFF
    if fid in (PSCI_SYSTEM_OFF, PSCI_SYSTEM_RESET):
        name = "SYSTEM_OFF" if fid == PSCI_SYSTEM_OFF else "SYSTEM_RESET"
        return TrapOutcome("off", f"PSCI {name} ({conduit})", status=0)
    if fid == PSCI_VERSION:
        answer = PSCI_1_1
    elif fid == PSCI_MIGRATE_INFO_TYPE:
        answer = TOS_NOT_PRESENT_MP
    elif fid == PSCI_FEATURES:
        answer = 0 if cpu.reg_read("x1") & 0xFFFFFFFF in QEMU_PSCI else PSCI_NOT_SUPPORTED
    else:  # CPU_ON and friends: one CPU, nothing to do that an image could need
        answer = PSCI_NOT_SUPPORTED
    cpu.reg_write("x0", answer & (2**64 - 1))
    cpu.reg_write("pc", next_pc)
    return TrapOutcome("emulated", f"PSCI {fid:#x} ({conduit})")


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    pc = cpu.pc
    if intno == EXCP_SWI:  # svc #imm16: ISS = imm16; preferred return = the next insn
        imm = (_insn(cpu, pc - 4) >> 5) & 0xFFFF
        return TrapOutcome("vector", "svc", enter_el1(cpu, EC_SVC64 << 26 | IL | imm, pc))
    if intno == EXCP_SMC and _insn(cpu, pc - 4) & HVC_SMC_MASK == SMC:  # UNDEFINED: no EL3
        return TrapOutcome("vector", "undefined instruction",
                           enter_el1(cpu, EC_UNKNOWN << 26 | IL, pc - 4))
    if intno in (EXCP_UDEF, INSN_INVALID):
        insn = _insn(cpu, pc)
        if insn == WFI:  # trapped by HCR_EL2.TWI (reset): the CPU waits, not halted
            cpu.reg_write("pc", pc + 4)
            return TrapOutcome("idle", "wfi")
        if insn & HVC_SMC_MASK == HVC:
            return psci(cpu, pc + 4, "hvc")
        return TrapOutcome("vector", "undefined instruction",
                           enter_el1(cpu, EC_UNKNOWN << 26 | IL, pc))
    el = (cpu.reg_read("pstate") >> 2) & 3
    if intno == EXCP_DATA_ABORT:
        abort = data_abort(cpu, _insn(cpu, pc), pc, el)
        if abort is not None:
            return TrapOutcome("vector", "data abort", enter_el1(cpu, abort.esr, pc, abort.far))
    if intno == EXCP_PREFETCH_ABORT:
        abort = instruction_abort(cpu, pc, el)
        if abort is not None:
            return TrapOutcome("vector", "instruction abort",
                               enter_el1(cpu, abort.esr, pc, abort.far))
    return None


def irq(cpu: SysRegPort) -> TrapOutcome | None:
    """The IRQ exception (the interrupt controller signals it), taken unless PSTATE.I
    masks it (None).  The preferred return is the instruction not yet run."""
    if cpu.reg_read("pstate") & PSTATE_I:
        return None
    return TrapOutcome("vector", "IRQ", enter_el1(cpu, None, cpu.pc, kind=IRQ))


def reset(cpu: SysRegPort) -> None:
    """Unicorn 2.1.4 starts with SCR_EL3.RW = HCR_EL2.RW = 0, so QEMU's arm_el_is_aa64(EL1)
    is false and a 4-level AArch64 MMU walk aborts (measured; U-Boot and Linux need it):
    set SCR_EL3 = RW | NS (bits 10, 0) and HCR_EL2.RW (bit 31) as firmware would.  Also
    HCR_EL2.TWI (bit 13; SCR_EL3.TWI does not trap in Unicorn: measured): a wfi at EL0/1
    then traps (Unicorn gives EXCP_UDEF with the PC on it) instead of
    halting Unicorn's CPU, which stays halted through later emu_starts unless QEMU's own
    interrupt lines (unused here) have work, so a CPU that wakes with IRQs masked (Linux's
    idle loop) could not go on (measured); the trap is `idle` for the board."""
    # keys (CRn, CRm, op0, op1, op2): SCR_EL3 = (1, 1, 3, 6, 0), HCR_EL2 = (1, 1, 3, 4, 0)
    cpu.reg_write("cp_reg", (1, 1, 3, 6, 0, SCR_RW | SCR_NS))
    cpu.reg_write("cp_reg", (1, 1, 3, 4, 0, HCR_RW | HCR_TWI))


def is_linux_image(blob: bytes) -> bool:
    """The arm64 Linux Image header (Documentation/arm64/booting.rst): magic "ARM\\x64"
    at offset 0x38."""
    return blob[0x38:0x3C] == b"ARM\x64"


KERNEL = KernelSupport(
    deliver=deliver,
    reset=reset,
    idle=(bytes.fromhex("7f2003d5"),),  # WFI = 0xD503207F
    returns=(bytes.fromhex("e0039fd6"),),  # ERET = 0xD69F03E0 (C6.2.83)
    linux_image=is_linux_image,
    timer_interrupt=irq,
    timer_due=kernel_aarch64_timer.seconds_to_fire,
    emulated_insns=kernel_aarch64_timer.ACCESSES,
    physical=physical,
    modelled="svc and undefined instructions enter VBAR_EL1 (ESR/ELR/SPSR written, DAIF "
             "masked, EL1h; smc too: no EL3); hvc is PSCI (SYSTEM_OFF/SYSTEM_RESET end the run, "
             "PSCI_VERSION answers 1.1, MIGRATE_INFO_TYPE and PSCI_FEATURES as QEMU, others "
             "NOT_SUPPORTED); data and instruction aborts with the syndrome and FAR found again "
             "(kernel_aarch64_aborts.py); IRQ from the board's GIC (the virtual timer, a model: "
             "kernel_aarch64_timer.py; SGIs); wfi trapped (HCR_EL2.TWI) as idle. Not "
             "modelled: FIQ, SError, EL2/EL3, alignment and external aborts.",
)
