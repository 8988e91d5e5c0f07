"""Reading a call's integer arguments at the call site, per the ISA's C ABI: the argument
registers first, then the stack slots — read before the call executes, so on ISAs whose
call pushes the return address (x86) the slots sit one word lower than at the callee's
entry, where `stack_args_offset` is measured.  Shared by every backend."""

from __future__ import annotations

from emutrace.target.unicorn_cpu import UnicornCpu


class ArgReader:
    def __init__(self, cpu: UnicornCpu, count: int) -> None:
        regs = cpu.isa.registers
        self.cpu = cpu
        self.regs = regs.args[:count]
        self.stack = count - len(self.regs)
        self.sp = regs.sp
        self.offset = regs.stack_args_offset - (cpu.word if regs.link is None else 0)

    def read(self) -> tuple[int, ...]:
        cpu = self.cpu
        values = [cpu.reg_read(r) for r in self.regs]
        if self.stack:
            base = cpu.reg_read(self.sp) + self.offset
            values += [cpu.read_word(base + i * cpu.word) for i in range(self.stack)]
        return tuple(values)
