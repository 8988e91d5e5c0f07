"""Reading a call's integer arguments at the call site, per the ISA's C ABI: the argument
registers first, then the stack slots — read before the call executes, so on ISAs whose
call pushes the return address (x86) the slots sit one word lower than at the callee's
entry, where `stack_args_offset` is measured.  Backends that see a call only once it has happened
(at the callee's entry: `btf`, `entry`) read with ``at_entry=True``.  Shared by every
backend."""

from __future__ import annotations

from emutrace.target.unicorn_cpu import UnicornCpu


class ArgReader:
    def __init__(self, cpu: UnicornCpu, count: int, at_entry: bool = False) -> None:
        regs = cpu.isa.registers
        self.cpu = cpu
        self.regs = regs.args[:count]
        self.stack = count - len(self.regs)
        self.sp = regs.sp
        self.offset = regs.stack_args_offset - (0 if at_entry else call_push_size(cpu))

    def read(self) -> tuple[int, ...]:
        cpu = self.cpu
        values = [cpu.reg_read(r) for r in self.regs]
        if self.stack:
            base = cpu.reg_read(self.sp) + self.offset
            values += [cpu.read_word(base + i * cpu.word) for i in range(self.stack)]
        return tuple(values)


def call_push_size(cpu: UnicornCpu) -> int:
    """Bytes a call instruction pushes: the return address on ISAs without a link register
    (x86: CALL pushes one word, Intel SDM vol. 2), nothing elsewhere.  The stack pointer
    before a call is the callee's entry sp plus this."""
    return cpu.word if cpu.isa.registers.link is None else 0
