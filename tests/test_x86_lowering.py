"""x86's lowering of calls and jumps through memory (isa/x86_64.py `x86_lowering`): the
memory operand as data (`NativeOp.load`), as the simulator reads it; i386's `call gs:[0x10]`
simulated with the segment's hidden base (`Engines.uc_msrs`)."""

from __future__ import annotations

import capstone
import keystone
import pytest

from emutrace.isa import by_name
from emutrace.isa.base import FlowKind, Insn, MemOperand, NativeOp
from emutrace.isa.i386 import TLS_FIRST, set_thread_area
from emutrace.target.unicorn_cpu import UnicornCpu

I386, X86_64 = by_name("i386"), by_name("x86_64")
CODE = 0x10000


def _insn(isa_name: str, asm: str) -> Insn:
    bits = 32 if isa_name == "i386" else 64
    ks = keystone.Ks(keystone.KS_ARCH_X86, keystone.KS_MODE_32 if bits == 32 else
                     keystone.KS_MODE_64)
    code = bytes(ks.asm(asm, CODE)[0])
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_32 if bits == 32 else
                     capstone.CS_MODE_64)
    i = next(cs.disasm(code, CODE))
    return Insn(i.address, i.size, i.mnemonic, i.op_str, bytes(i.bytes))


@pytest.mark.parametrize(("isa_name", "asm", "kind", "load"), [
    ("i386", "jmp dword ptr [ebx + 0x44]", FlowKind.JUMP, MemOperand("ebx", None, 1, 0x44)),
    ("i386", "call dword ptr [edx + 0x1c]", FlowKind.CALL, MemOperand("edx", None, 1, 0x1c)),
    ("i386", "jmp dword ptr [eax*4 + 0x8049000]", FlowKind.JUMP,
     MemOperand(None, "eax", 4, 0x8049000)),
    ("i386", "call dword ptr [esi + edi*2 - 8]", FlowKind.CALL,
     MemOperand("esi", "edi", 2, 0xFFFFFFF8)),
    ("i386", "call dword ptr gs:[0x10]", FlowKind.CALL, MemOperand(disp=0x10, segment="gs")),
    ("x86_64", "jmp qword ptr [rip + 0x2fe2]", FlowKind.JUMP, MemOperand(disp=CODE + 6 + 0x2fe2)),
    ("x86_64", "call qword ptr [r12 + 8]", FlowKind.CALL, MemOperand("r12", None, 1, 8)),
])
def test_memory_operand_lowered(isa_name: str, asm: str, kind: FlowKind,
                                load: MemOperand) -> None:
    isa = by_name(isa_name)
    insn = _insn(isa_name, asm)
    assert isa.classifiers is not None and isa.lower is not None
    assert isa.lower(insn, isa.classifiers.classify(insn)) == NativeOp(kind, load=load)


@pytest.mark.parametrize("asm", [
    "call word ptr [ebx]",  # a 16-bit target: not the word the op says
    "call dword ptr es:[ebx]",  # a flat segment override: not simulated
])
def test_other_memory_operands_not_lowered(asm: str) -> None:
    insn = _insn("i386", asm)
    assert I386.classifiers is not None and I386.lower is not None
    assert I386.lower(insn, I386.classifiers.classify(insn)) is None


def test_call_through_gs_simulated() -> None:
    """`call gs:[0x10]` goes to the word at %gs's base + 0x10 (the TCB's sysinfo, where
    glibc's system calls go) and pushes the return address."""
    cpu = UnicornCpu(I386)
    cpu.apply_reset()
    cpu.mem_map(0, 0x100000)
    tcb, stack, desc = 0x40000, 0x80000, 0x30000
    # struct user_desc (asm/ldt.h): entry -1 (a free TLS slot), base, limit, flags
    # (seg_32bit, limit_in_pages, useable)
    cpu.mem_write(desc, (-1).to_bytes(4, "little", signed=True) + tcb.to_bytes(4, "little")
                  + (0xFFFFF).to_bytes(4, "little") + (0x51).to_bytes(4, "little"))
    assert set_thread_area(cpu, (desc,)) == 0
    cpu.reg_write("gs", TLS_FIRST << 3 | 3)
    cpu.mem_write(tcb + 0x10, (0x12340).to_bytes(4, "little"))
    cpu.reg_write("esp", stack)
    insn = _insn("i386", "call dword ptr gs:[0x10]")
    assert I386.simulate is not None and I386.classifiers is not None
    assert cpu.reg_read("gs_base") == tcb
    assert I386.simulate(cpu, insn, I386.classifiers.classify(insn)) == 0x12340
    assert cpu.reg_read("esp") == stack - 4
    assert int.from_bytes(cpu.mem_read(stack - 4, 4), "little") == CODE + insn.size
