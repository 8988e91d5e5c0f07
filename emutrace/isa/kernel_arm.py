"""ARM (A32) kernel images: the svc exception into the guest's vector, PSCI over hvc.

Arm ARM (DDI 0406C) B1.8: Supervisor Call enters SVC mode with SPSR_svc = CPSR, LR_svc = the
next instruction, CPSR.I = 1, T = SCTLR.TE (0 here: A32 handlers), and jumps to the vector
base + 0x08 (B1.8.1; VBAR, B4.1.156, with SCTLR.V = 0).  Unicorn 2.1.4: `svc` → INTR 2
(EXCP_SWI) with PC past it; `hvc` outside Hyp mode → INTR 1 (EXCP_UDEF), PC on it.
"""

from emutrace.isa.kernel import INSN_INVALID, KernelSupport, SysRegPort, TrapOutcome
from emutrace.isa.kernel_aarch64 import PSCI_1_1, PSCI_SYSTEM_OFF, PSCI_SYSTEM_RESET, PSCI_VERSION

EXCP_UDEF, EXCP_SWI = 1, 2
MODE_SVC, MODE_UND = 0x13, 0x1B
CPSR_I, CPSR_T = 1 << 7, 1 << 5
# VBAR: cp15, c12, c0, opc1 0, opc2 0 as Unicorn's key (cp, is64, sec, crn, crm, opc1, opc2)
VBAR_KEY = (15, 0, 0, 12, 0, 0, 0)
# HVC #imm16, A32: cond 0001 0100 imm12 0111 imm4 (B9.3.4); cond must be AL.
# Unicorn 2.1.4 reports it through UC_HOOK_INSN_INVALID (measured), PC on it
HVC_MASK, HVC = 0xFFF000F0, 0xE1400070


def enter(cpu: SysRegPort, mode: int, offset: int, lr: int) -> int:
    cpsr = cpu.reg_read("cpsr")
    cpu.reg_write("cpsr", (cpsr & ~0x1F & ~CPSR_T) | mode | CPSR_I)  # banks switch here
    cpu.reg_write("spsr", cpsr)
    cpu.reg_write("lr", lr)
    vector = (cpu.sysreg_read("cp_reg", VBAR_KEY) & ~0x1F) + offset
    cpu.reg_write("pc", vector)
    return vector


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    pc = cpu.pc
    if intno == EXCP_SWI:
        return TrapOutcome("vector", "svc", enter(cpu, MODE_SVC, 0x08, pc))
    if intno in (EXCP_UDEF, INSN_INVALID):  # hvc: INSN_INVALID (measured)
        insn = int.from_bytes(cpu.mem_read(pc, 4), "little")
        if insn & HVC_MASK == HVC:
            fid = cpu.reg_read("r0")
            if fid in (PSCI_SYSTEM_OFF, PSCI_SYSTEM_RESET):
                return TrapOutcome("off", "PSCI SYSTEM_OFF (hvc)")
            cpu.reg_write("r0", PSCI_1_1 if fid == PSCI_VERSION else 0xFFFFFFFF)
            cpu.reg_write("pc", pc + 4)
            return TrapOutcome("emulated", f"PSCI {fid:#x} (hvc)")
        # undefined instruction: LR_und = the instruction + 4 (B1.8.3), vector + 0x04
        return TrapOutcome("vector", "undefined instruction", enter(cpu, MODE_UND, 0x04, pc + 4))
    return None


KERNEL = KernelSupport(
    deliver=deliver,
    reset=None,
    idle=(bytes.fromhex("03f020e3"),),  # WFI (A32) = 0xE320F003
    # A32 exception returns (B9.3.20, B1.9.10): SUBS PC, LR, #0/#4/#8 (what `eret`
    # assembles to outside Hyp mode), MOVS PC, LR, ERET (Hyp)
    returns=tuple(int(w).to_bytes(4, "little") for w in
                  (0xE25EF000, 0xE25EF004, 0xE25EF008, 0xE1B0F00E, 0xE160006E)),
    modelled="svc enters the SVC vector and undefined instructions the UND vector (SPSR, "
             "banked LR, CPSR.I; A32 handlers); hvc is PSCI (SYSTEM_OFF ends the run). Not "
             "modelled: aborts, IRQ/FIQ, Thumb handlers (SCTLR.TE), Hyp mode, Thumb hvc.",
)
