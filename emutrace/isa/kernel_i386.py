"""i386 kernel images: software interrupts (`int n`) through the guest's IDT.

Intel SDM vol. 3 §6.12.1: an interrupt through a 32-bit interrupt or trap gate at the same
privilege level pushes EFLAGS, CS and EIP (the next instruction for `int n`), clears TF, NT,
RF and VM, clears IF for an interrupt gate, and continues at the gate's selector:offset
(§6.11: gate = offset 15..0, selector, type/attributes in bits 40..47, offset 31..16).
Unicorn 2.1.4: `int n` → INTR n with EIP after the 2-byte instruction; `iret` then works
natively; `hlt` ends emu_start; IN/OUT reach UC_HOOK_INSN.
"""

from emutrace.isa.kernel import INSN_INVALID, KernelSupport, SysRegPort, TrapOutcome

INT_N = 0xCD  # INT imm8
UD = 6  # #UD, invalid opcode: Unicorn reports UD2 through UC_HOOK_INSN_INVALID (measured)
GATE_INTERRUPT, GATE_TRAP = 0xE, 0xF  # 32-bit gate types
EFLAGS_TF, EFLAGS_IF, EFLAGS_NT, EFLAGS_RF, EFLAGS_VM = 1 << 8, 1 << 9, 1 << 14, 1 << 16, 1 << 17


def deliver(cpu: SysRegPort, intno: int) -> TrapOutcome | None:
    eip = cpu.pc
    if intno == INSN_INVALID:  # #UD is a fault: the saved EIP is the instruction itself
        return _through_gate(cpu, UD, eip, "invalid opcode")
    if 0 <= intno < 256 and cpu.mem_read(eip - 2, 2) == bytes((INT_N, intno)):
        return _through_gate(cpu, intno, eip, f"int {intno:#x}")  # EIP: after `int n`
    return None  # CPU exceptions Unicorn reports by INTR: not modelled


def _through_gate(cpu: SysRegPort, intno: int, eip: int, what: str) -> TrapOutcome | None:
    base, limit = cpu.table_reg("idtr")
    if 8 * intno + 7 > limit:
        return None
    gate = int.from_bytes(cpu.mem_read(base + 8 * intno, 8), "little")
    kind, present = gate >> 40 & 0xF, gate >> 47 & 1
    if not present or kind not in (GATE_INTERRUPT, GATE_TRAP):
        return None
    offset, selector = (gate & 0xFFFF) | (gate >> 48 & 0xFFFF) << 16, gate >> 16 & 0xFFFF
    eflags, cs, esp = cpu.reg_read("eflags"), cpu.reg_read("cs"), cpu.reg_read("esp")
    frame = b"".join(v.to_bytes(4, "little") for v in (eip, cs, eflags))  # lowest first
    cpu.mem_write(esp - 12, frame)
    cpu.reg_write("esp", esp - 12)
    cleared = EFLAGS_TF | EFLAGS_NT | EFLAGS_RF | EFLAGS_VM
    if kind == GATE_INTERRUPT:
        cleared |= EFLAGS_IF
    cpu.reg_write("eflags", eflags & ~cleared)
    if selector != cs:
        cpu.reg_write("cs", selector)
    cpu.reg_write("eip", offset)
    return TrapOutcome("vector", what, offset)


KERNEL = KernelSupport(
    deliver=deliver,
    reset=None,
    idle=(b"\xf4",),  # HLT
    modelled="`int n` and #UD (an invalid opcode, saved EIP = the instruction) through a "
             "present 32-bit interrupt or trap gate of the guest's IDT at the same privilege "
             "(EFLAGS, CS, EIP pushed; IF cleared for interrupt gates). Not modelled: the "
             "other CPU exceptions (#DE, #GP, #PF, ...; error codes), "
             "privilege changes (TSS stack switch), task gates, hardware interrupts (no "
             "PIC/APIC, no PIT).",
    port_io=("UC_X86_INS_IN", "UC_X86_INS_OUT"),
    returns=(b"\xcf",),  # IRET (SDM vol. 2A): a hook fires only where it starts an insn
    returns_align=1,
)
