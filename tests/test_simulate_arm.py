"""The AArch64 and ARM (A32/Thumb) simulators of displaced call/return/jump sites against
Unicorn itself: each form is assembled (keystone), run for exactly one instruction from a
prepared state, and the simulator, applied to the same state, must leave the same registers,
the same memory and the same next PC (with the same Thumb state)."""

from __future__ import annotations

import itertools

import capstone
import keystone
import pytest

from emutrace.isa import aarch64, arm
from emutrace.isa.base import Insn
from emutrace.target.unicorn_cpu import UnicornCpu

CODE, CODE_SIZE = 0x10000, 0x20000
STACK, STACK_SIZE = 0x80000, 0x1000
SP = STACK + 0x800
NEVER = 0xFFFF0  # the `until` address of emu_start: never reached


# ---------------------------------------------------------------- AArch64
A64_REGS = [f"x{i}" for i in range(31)] + ["sp", "pc", "nzcv"]
A64_CONDS = ("eq", "ne", "hs", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt",
             "le", "al")


def _a64(asm: str, addr: int, regs: dict[str, int], nzcv: int = 0) -> tuple[UnicornCpu, Insn]:
    ks = keystone.Ks(keystone.KS_ARCH_ARM64, keystone.KS_MODE_LITTLE_ENDIAN)
    code, _ = ks.asm(asm, addr)
    raw = bytes(code)
    port = UnicornCpu(aarch64.ISA)  # the CpuPort the backend hands the simulator
    port.mem_map(CODE, CODE_SIZE)
    port.mem_map(STACK, STACK_SIZE)
    port.mem_write(addr, raw)
    for i in range(31):
        port.reg_write(f"x{i}", 0x1111_0000_0000_0000 + i * 0x101)
    port.reg_write("sp", SP)
    port.reg_write("nzcv", nzcv)
    for name, value in regs.items():
        port.reg_write(name, value)
    port.reg_write("pc", addr)
    cs = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    i = next(cs.disasm(raw, addr, 1))
    return port, Insn(i.address, i.size, i.mnemonic, i.op_str, bytes(i.bytes))


def _a64_state(port: UnicornCpu) -> dict[str, int]:
    return {name: port.reg_read(name) for name in A64_REGS}


def check_a64(asm: str, regs: dict[str, int] | None = None, nzcv: int = 0,
              addr: int = CODE + 0x1000) -> int:
    real, insn = _a64(asm, addr, regs or {}, nzcv)
    real.uc.emu_start(addr, NEVER, count=1)
    sim, _ = _a64(asm, addr, regs or {}, nzcv)
    flow = aarch64.classify_aarch64(insn)
    target = aarch64.simulate_aarch64(sim, insn, flow)
    assert target is not None, (asm, insn)
    sim.reg_write("pc", target)
    assert _a64_state(sim) == _a64_state(real), asm
    return target


def test_a64_calls_jumps_returns() -> None:
    t = CODE + 0x5000
    assert check_a64(f"bl #{t:#x}") == t
    assert check_a64(f"b #{t:#x}") == t
    assert check_a64(f"b #{CODE + 0x10:#x}") == CODE + 0x10  # backwards
    assert check_a64("blr x5", {"x5": t}) == t
    assert check_a64("blr x30", {"x30": t}) == t  # target read before X30 is written
    assert check_a64("br x16", {"x16": t}) == t
    assert check_a64("ret", {"x30": t}) == t
    assert check_a64("ret x3", {"x3": t}) == t


@pytest.mark.parametrize("cond", A64_CONDS)
def test_a64_bcond(cond: str) -> None:
    t = CODE + 0x3000
    for nzcv in range(16):
        check_a64(f"b.{cond} #{t:#x}", nzcv=nzcv << 28)


def test_a64_compare_and_test() -> None:
    t = CODE + 0x400
    for value in (0, 1, 0x1_0000_0000, 0xFFFF_FFFF_0000_0000, 1 << 63, 8):
        for reg in ("x3", "w3"):
            check_a64(f"cbz {reg}, #{t:#x}", {"x3": value})
            check_a64(f"cbnz {reg}, #{t:#x}", {"x3": value})
        for bit in (0, 3, 32, 63):
            check_a64(f"tbz x4, #{bit}, #{t:#x}", {"x4": value})
            check_a64(f"tbnz x4, #{bit}, #{t:#x}", {"x4": value})
        check_a64(f"tbnz w4, #3, #{t:#x}", {"x4": value})


def test_a64_unsupported() -> None:
    port, _ = _a64("nop", CODE, {})
    insn = Insn(CODE, 4, "blraa", "x1, x2", bytes.fromhex("2208 3fd7"))
    assert aarch64.simulate_aarch64(port, insn, aarch64.classify_aarch64(insn)) is None


# ---------------------------------------------------------------- ARM A32 / Thumb
ARM_REGS = [f"r{i}" for i in range(13)] + ["sp", "lr", "pc"]
ARM_CONDS = ("eq", "ne", "hs", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt",
             "le")
STACK_WORDS = [0x0001_2345 | 0, 0x0002_2222, 0x0003_3333, 0x0004_4444, 0x0005_5555,
               0x0006_6666, 0x0007_7777, 0x0008_8888, 0x0009_9999, 0x000A_AAAA]


def _arm(asm: str, addr: int, thumb: bool, regs: dict[str, int], nzcv: int,
         stack: list[int]) -> tuple[UnicornCpu, list[Insn]]:
    mode = keystone.KS_MODE_THUMB if thumb else keystone.KS_MODE_ARM
    code, _ = keystone.Ks(keystone.KS_ARCH_ARM, mode).asm(asm, addr)
    raw = bytes(code)
    port = UnicornCpu(arm.ISA)
    port.mem_map(CODE, CODE_SIZE)
    port.mem_map(STACK, STACK_SIZE)
    port.mem_write(addr, raw)
    port.mem_write(SP, b"".join(w.to_bytes(4, "little") for w in stack))
    for i in range(13):
        port.reg_write(f"r{i}", 0x1000_0000 + i * 0x1111)
    port.reg_write("sp", SP)
    port.reg_write("lr", 0xDEAD_0000)
    cpsr = port.reg_read("cpsr")
    port.reg_write("cpsr", (cpsr & 0x0FFF_FFFF) | nzcv)
    for name, value in regs.items():
        port.reg_write(name, value)
    port.reg_write("pc", addr | thumb)
    cs = capstone.Cs(capstone.CS_ARCH_ARM,
                     capstone.CS_MODE_THUMB if thumb else capstone.CS_MODE_ARM)
    insns = [Insn(i.address, i.size, i.mnemonic, i.op_str, bytes(i.bytes), thumb)
             for i in cs.disasm(raw, addr)]
    return port, insns


def _arm_state(port: UnicornCpu) -> dict[str, int]:
    state = {name: port.reg_read(name) for name in ARM_REGS}
    state["cpsr"] = port.reg_read("cpsr")  # NZCV and T
    state["stack"] = int.from_bytes(port.mem_read(STACK, STACK_SIZE), "little")
    return state


def check_arm(asm: str, thumb: bool = False, regs: dict[str, int] | None = None,
              nzcv: int = 0, stack: list[int] | None = None, addr: int = CODE + 0x1000,
              ) -> int | None:
    """Run the single instruction asm; compare with the simulator.  Returns the next PC
    the simulator gave (None: not simulated)."""
    args = (asm, addr, thumb, regs or {}, nzcv, stack or STACK_WORDS)
    real, insns = _arm(*args)
    assert len(insns) == 1, insns
    insn = insns[0]
    real.uc.emu_start(addr | thumb, NEVER, count=1)
    sim, _ = _arm(*args)
    target = arm.simulate_arm(sim, insn, arm.classify_arm(insn))
    if target is None:
        return None
    sim.reg_write("pc", target)  # as the backend does: bit 0 selects Thumb
    assert _arm_state(sim) == _arm_state(real), (asm, thumb)
    return target


CALL_FORMS_A32 = [
    ("bl #{t}", {}),
    ("blx #{t}", {}),  # to Thumb
    ("b #{t}", {}),
    ("blx r3", {"r3": CODE + 0x2001}),
    ("blx r3", {"r3": CODE + 0x2000}),
    ("blx lr", {"lr": CODE + 0x2001}),
    ("bx lr", {"lr": CODE + 0x2001}),
    ("bx lr", {"lr": CODE + 0x2000}),
    ("bx r12", {"r12": CODE + 0x2004}),
    ("mov pc, lr", {"lr": CODE + 0x2000}),
    ("mov pc, lr", {"lr": CODE + 0x2001}),
]
CALL_FORMS_T32 = [
    ("bl #{t}", {}),
    ("blx #{t}", {}),  # to A32
    ("b #{t}", {}),
    ("b.w #{t}", {}),
    ("blx r3", {"r3": CODE + 0x2001}),
    ("blx r3", {"r3": CODE + 0x2000}),
    ("bx lr", {"lr": CODE + 0x2001}),
    ("bx lr", {"lr": CODE + 0x2000}),
    ("bx r7", {"r7": CODE + 0x2005}),
]


@pytest.mark.parametrize(("thumb", "offset"), [(False, 0), (True, 0), (True, 2)])
def test_arm_calls_jumps(thumb: bool, offset: int) -> None:
    """A32 code is word aligned; Thumb code may sit at a halfword."""
    addr = CODE + 0x1000 + offset
    forms = CALL_FORMS_T32 if thumb else CALL_FORMS_A32
    for asm, regs in forms:
        for t in (CODE + 0x3000, CODE + 0x800):
            text = asm.format(t=hex(t))
            if "b" in asm.split()[0] and "{t}" in asm and not thumb and "blx" in asm:
                text = asm.format(t=hex(t + 2))  # a Thumb target may be halfword aligned
            assert check_arm(text, thumb, regs, addr=addr) is not None, text


RETURN_STACKS = [
    [CODE + 0x2001, 5, 6, 7],
    [CODE + 0x2000, 5, 6, 7],
]
RETURN_FORMS = ["pop {pc}", "pop {r4, pc}", "pop {r4, r5, r6, pc}",
                "pop {r4, r5, r6, r7, r8, r9, r10, r11, pc}", "ldm sp!, {r4, r11, pc}",
                "ldr pc, [sp], #4", "pop {r3, r4, r5, pc}"]


@pytest.mark.parametrize("thumb", [False, True])
def test_arm_pops(thumb: bool) -> None:
    for asm in RETURN_FORMS:
        for words in RETURN_STACKS:
            count = asm[asm.index("{"):].count(",") + 1 if "{" in asm else 1
            stack = [0x4444_0000 + i for i in range(count - 1)] + [words[0]] + words[1:]
            if thumb and asm.startswith("ldr"):
                asm = "ldr pc, [sp], #4"  # T4, 32-bit
            if thumb and asm.startswith("ldm"):
                asm = "pop.w {r4, r11, pc}"
            got = check_arm(asm, thumb, stack=stack)
            if asm.endswith("lr}"):
                continue  # not a return: nothing to compare
            assert got is not None, (asm, thumb)


@pytest.mark.parametrize("cond", ARM_CONDS)
def test_arm_conditional(cond: str) -> None:
    t = hex(CODE + 0x3000)
    forms = [(f"b{cond} #{t}", False), (f"bl{cond} #{t}", False), (f"bx{cond} lr", False),
             (f"pop{cond} {{r4, pc}}", False), (f"b{cond} #{t}", True),
             (f"b{cond}.w #{t}", True)]
    for (asm, thumb), nzcv in itertools.product(forms, range(16)):
        regs = {"lr": CODE + 0x2001}
        got = check_arm(asm, thumb, regs, nzcv << 28, [0x4444, CODE + 0x2001])
        assert got is not None, (asm, thumb)


def test_thumb_cbz() -> None:
    t = hex(CODE + 0x1040)
    for value in (0, 1, 0x8000_0000):
        for m in ("cbz", "cbnz"):
            assert check_arm(f"{m} r2, #{t}", True, {"r2": value}) is not None


def test_thumb_it_block_is_not_simulated() -> None:
    for asm in ("it eq; bxeq lr", "it ne; popne {r4, pc}", "ite eq; moveq r0, r1; bne #0x11400"):
        port, insns = _arm(asm, CODE + 0x1000, True, {}, 0, STACK_WORDS)
        last = insns[-1]
        assert arm.simulate_arm(port, last, arm.classify_arm(last)) is None, asm


def test_thumb_live_itstate_is_not_simulated() -> None:
    """Decoded alone (as the backend does), `bxeq lr` after an IT reads as `bx lr`: the
    simulator must see ITSTATE in CPSR and decline."""
    port, insns = _arm("it eq; bxeq lr", CODE + 0x1000, True, {}, 0x4000_0000, STACK_WORDS)
    port.uc.emu_start((CODE + 0x1000) | 1, CODE + 0x1002)  # the IT only
    cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB)
    i = next(cs.disasm(insns[1].raw, insns[1].addr, 1))
    alone = Insn(i.address, i.size, i.mnemonic, i.op_str, bytes(i.bytes), True)
    assert alone.mnemonic == "bx"
    assert arm.simulate_arm(port, alone, arm.classify_arm(alone)) is None
