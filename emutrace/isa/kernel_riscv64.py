"""RISC-V kernel images: M-mode trap entry with S-mode delegation.

Privileged spec 1.10 §3.1.7/§3.1.12/§3.1.20: a trap saves the PC in xepc, the cause in
xcause, the faulting value in xtval, moves xIE to xPIE, clears xIE, saves the privilege in
xPP and jumps to xtvec (BASE; vectored mode only changes interrupts).  It goes to S-mode when
taken below M-mode and medeleg has the cause's bit (§3.1.8).  Unicorn 2.1.4 (measured):
`ecall` → INTR 8 whatever the privilege, illegal instructions → INTR 2, and the PC has
already advanced by 4 for both; a CSR read goes through the *current* privilege's check, so
M-mode CSRs are read with PRIV set to M first.  `mret`/`sret` then work natively.
"""

from emutrace.isa.kernel import KernelSupport, SysRegPort, TrapOutcome

INTR_ILLEGAL, INTR_ECALL = 2, 8  # Unicorn's intno (QEMU RISCV_EXCP_*)
CAUSE_ILLEGAL, CAUSE_ECALL_U = 2, 8  # mcause: ecall from U/S/M = 8/9/11 (table 3.6)
PRIV_S, PRIV_M = 1, 3
SIE, MIE, SPIE, MPIE, SPP = 1 << 1, 1 << 3, 1 << 5, 1 << 7, 1 << 8
MPP_SHIFT = 11


def trap(cpu: SysRegPort, cause: int, epc: int, tval: int) -> int:
    """Enter the trap handler of M-mode, or of S-mode when delegated; returns its address."""
    priv = cpu.reg_read("priv")
    cpu.reg_write("priv", PRIV_M)  # read M-mode CSRs with M-mode's rights
    status = cpu.reg_read("mstatus")
    if priv < PRIV_M and cpu.reg_read("medeleg") >> cause & 1:
        status = (status & ~(SPIE | SIE | SPP)) | (SPIE if status & SIE else 0) \
            | (SPP if priv == PRIV_S else 0)
        cpu.reg_write("sepc", epc)
        cpu.reg_write("scause", cause)
        cpu.reg_write("stval", tval)
        cpu.reg_write("mstatus", status)
        vector = cpu.reg_read("stvec") & ~3
        cpu.reg_write("priv", PRIV_S)
    else:
        status = (status & ~(MPIE | MIE | 3 << MPP_SHIFT)) | (MPIE if status & MIE else 0) \
            | priv << MPP_SHIFT
        cpu.reg_write("mepc", epc)
        cpu.reg_write("mcause", cause)
        cpu.reg_write("mtval", tval)
        cpu.reg_write("mstatus", status)
        vector = cpu.reg_read("mtvec") & ~3
    cpu.reg_write("pc", vector)
    return vector


INTERRUPT = 1 << 63  # mcause bit XLEN-1
MTI = 7  # machine timer interrupt: mcause code, mie/mip bit (§3.1.9)


def timer_interrupt(cpu: SysRegPort) -> TrapOutcome | None:
    """The machine timer interrupt (§3.1.9, §3.1.7): taken when mie.MTIE is set and the hart
    runs below M-mode or with mstatus.MIE set; epc is the next instruction (after the wfi),
    the vector mtvec's BASE, + 4 × 7 in vectored mode (MODE = 1).  Not delegated."""
    priv = cpu.reg_read("priv")
    cpu.reg_write("priv", PRIV_M)  # M-mode CSRs with M-mode's rights
    mtvec = cpu.reg_read("mtvec")
    if not (cpu.reg_read("mie") >> MTI & 1
            and (priv < PRIV_M or cpu.reg_read("mstatus") & MIE)):
        cpu.reg_write("priv", priv)
        return None
    vector = trap_m(cpu, INTERRUPT | MTI, cpu.pc, priv)
    if mtvec & 3 == 1:
        vector += 4 * MTI
        cpu.reg_write("pc", vector)
    return TrapOutcome("vector", "timer interrupt", vector)


def trap_m(cpu: SysRegPort, cause: int, epc: int, priv: int) -> int:
    """Trap entry to M-mode (no delegation), for interrupts."""
    cpu.reg_write("priv", PRIV_M)
    status = cpu.reg_read("mstatus")
    status = (status & ~(MPIE | MIE | 3 << MPP_SHIFT)) | (MPIE if status & MIE else 0) \
        | priv << MPP_SHIFT
    cpu.reg_write("mepc", epc)
    cpu.reg_write("mcause", cause)
    cpu.reg_write("mtval", 0)
    cpu.reg_write("mstatus", status)
    vector = cpu.reg_read("mtvec") & ~3
    cpu.reg_write("pc", vector)
    return vector


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    at = cpu.pc - 4  # Unicorn has already stepped past the 4-byte instruction
    if intno == INTR_ECALL:
        cause = CAUSE_ECALL_U + cpu.reg_read("priv")
        return TrapOutcome("vector", "ecall", trap(cpu, cause, at, 0))
    if intno == INTR_ILLEGAL:
        insn = int.from_bytes(cpu.mem_read(at, 4), "little")
        return TrapOutcome("vector", "illegal instruction", trap(cpu, CAUSE_ILLEGAL, at, insn))
    return None


KERNEL = KernelSupport(
    deliver=deliver,
    reset=None,
    idle=(bytes.fromhex("73005010"),),  # WFI = 0x10500073
    # MRET = 0x30200073, SRET = 0x10200073 (privileged spec 1.10 §3.2.2); 2-byte aligned
    # where compressed code surrounds them
    returns=(bytes.fromhex("73002030"), bytes.fromhex("73002010")),
    returns_align=2,
    timer_interrupt=timer_interrupt,
    modelled="ecall (cause 8/9/11 by privilege) and illegal instructions (mtval = the "
             "instruction) trap to mtvec, or to stvec when medeleg delegates them; mepc/sepc, "
             "xPP, xPIE/xIE updated; the machine timer interrupt when an idle hart's mtimecmp "
             "comes due. Not modelled: other interrupts (software, PLIC), a timer firing "
             "while the hart is busy, page faults, a compressed illegal instruction's epc "
             "(Unicorn hides its length).",
)
