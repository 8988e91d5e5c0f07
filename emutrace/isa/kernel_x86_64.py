"""x86_64 kernel images: software interrupts (`int n`) and #UD through a 64-bit IDT.

Intel SDM vol. 3 §6.14: in IA-32e mode an interrupt gate is 16 bytes (offset 15..0,
selector, IST, type/attributes in bits 40..47, offset 31..16, offset 63..32); delivery
aligns RSP to 16 bytes and always pushes SS, RSP, RFLAGS, CS and RIP (8 bytes each),
clears TF, NT, RF (and IF for an interrupt gate) and continues at selector:offset.
Unicorn 2.1.4 (measured, as on i386): `int n` → INTR n with RIP after the 2-byte
instruction, UD2 → UC_HOOK_INSN_INVALID with RIP on it; `iretq` then works natively; `hlt`
ends emu_start; IN/OUT reach UC_HOOK_INSN.  The board starts at the ELF entry in 64-bit
mode (Unicorn's UC_MODE_64 reset), not at QEMU's 32-bit multiboot entry.
"""

from emutrace.isa.kernel import INSN_INVALID, KernelSupport, SysRegPort, TrapOutcome
from emutrace.isa.kernel_i386 import (
    EFLAGS_IF,
    EFLAGS_NT,
    EFLAGS_RF,
    EFLAGS_TF,
    GATE_INTERRUPT,
    GATE_TRAP,
    INT_N,
    UD,
)


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    rip = cpu.pc
    if intno == INSN_INVALID:  # #UD is a fault: the saved RIP is the instruction itself
        return _through_gate(cpu, UD, rip, "invalid opcode")
    if 0 <= intno < 256 and cpu.mem_read(rip - 2, 2) == bytes((INT_N, intno)):
        return _through_gate(cpu, intno, rip, f"int {intno:#x}")  # RIP: after `int n`
    return None  # CPU exceptions Unicorn reports by INTR: not modelled


def _through_gate(cpu: SysRegPort, intno: int, rip: int, what: str) -> TrapOutcome | None:
    base, limit = cpu.table_reg("idtr")
    if 16 * intno + 15 > limit:
        return None
    gate = int.from_bytes(cpu.mem_read(base + 16 * intno, 16), "little")
    kind, present, ist = gate >> 40 & 0xF, gate >> 47 & 1, gate >> 32 & 7
    if not present or kind not in (GATE_INTERRUPT, GATE_TRAP) or ist:
        return None  # IST stacks (TSS) are not modelled
    offset = (gate & 0xFFFF) | (gate >> 48 & 0xFFFF) << 16 | (gate >> 64 & 0xFFFFFFFF) << 32
    selector = gate >> 16 & 0xFFFF
    rflags, cs, ss, rsp = (cpu.reg_read(r) for r in ("rflags", "cs", "ss", "rsp"))
    top = rsp & ~0xF
    frame = b"".join(v.to_bytes(8, "little") for v in (rip, cs, rflags, rsp, ss))
    cpu.mem_write(top - 40, frame)  # lowest first: RIP at the new RSP
    cpu.reg_write("rsp", top - 40)
    cleared = EFLAGS_TF | EFLAGS_NT | EFLAGS_RF
    if kind == GATE_INTERRUPT:
        cleared |= EFLAGS_IF
    cpu.reg_write("rflags", rflags & ~cleared)
    if selector != cs:
        cpu.reg_write("cs", selector)
    cpu.reg_write("rip", offset)
    return TrapOutcome("vector", what, offset)


KERNEL = KernelSupport(
    deliver=deliver,
    reset=None,  # Unicorn's UC_MODE_64 reset: long mode, flat segments, what the image needs
    idle=(b"\xf4",),  # HLT
    modelled="`int n` and #UD (saved RIP = the instruction) through a present 64-bit "
             "interrupt or trap gate of the guest's IDT at the same privilege (SS, RSP, "
             "RFLAGS, CS, RIP pushed on the 16-byte aligned stack; IF cleared for interrupt "
             "gates). Not modelled: other CPU exceptions and error codes, IST stacks and "
             "privilege changes (TSS), hardware interrupts (no PIC/APIC, no PIT); the board "
             "starts at the ELF entry in 64-bit mode, not at QEMU's 32-bit multiboot entry.",
    port_io=("UC_X86_INS_IN", "UC_X86_INS_OUT"),
)
