"""The PowerPC and s390x branch simulators against Unicorn itself.

Oracle: from one prepared state, Unicorn runs the real instruction (one step); the simulator
is called on the decoded instruction from the same state.  Registers and the next PC must
agree.  Conditional forms are run taken and not taken.
"""

from __future__ import annotations

import capstone
import keystone
import pytest

from emutrace.discover.decode import _mode
from emutrace.isa.base import FlowKind, Insn, Isa
from emutrace.isa.ppc import ISA as PPC
from emutrace.isa.ppc64le import ISA as PPC64LE
from emutrace.isa.s390x import ISA as S390X
from emutrace.target.unicorn_cpu import UnicornCpu

BASE, SIZE, CODE = 0x10000, 0x10000, 0x14000
FAR = 0xFFFFFFF0  # emu_start's `until`: never reached, count=1 stops first

# PowerPC CR0 bits in the 32-bit CR image: LT GT EQ SO from the top
CR0_LT, CR0_GT, CR0_EQ = 0x80000000, 0x40000000, 0x20000000
CR7_GT = 0x4

PPC_STATE = {"lr": 0x15000, "ctr": 0x16000, "cr": 0, "r3": 7}
PPC_CASES: list[tuple[str, dict[str, int]]] = [
    ("bl 0x14100", {}),
    ("b 0x13f00", {}),
    ("blr", {}),
    ("blrl", {}),
    ("bctr", {}),
    ("bctrl", {}),
    ("bctrl", {"ctr": 0x16003}),  # the low two bits of the target are ignored
    ("beqlr", {"cr": CR0_EQ}),  # taken
    ("beqlr", {"cr": CR0_LT}),  # not taken
    ("bnelr", {"cr": CR0_EQ}),
    ("bnelr", {"cr": CR0_GT}),
    ("bltlr", {"cr": CR0_LT}),
    ("bnelrl", {"cr": CR0_GT}),
    ("bnelrl", {"cr": CR0_EQ}),
    ("beqctr", {"cr": CR0_EQ}),
    ("beqctr", {"cr": 0}),
    ("beqctrl", {"cr": CR0_EQ}),
    ("beq 0x14080", {"cr": CR0_EQ}),
    ("beq 0x14080", {"cr": 0}),
    ("bne 0x13f80", {"cr": 0}),
    ("bgt 7, 0x14080", {"cr": CR7_GT}),
    ("bgt 7, 0x14080", {"cr": CR0_GT}),
    ("bdnz 0x14080", {"ctr": 5}),  # decrementing CTR: taken
    ("bdnz 0x14080", {"ctr": 1}),  # not taken
    ("bdnzlr", {"ctr": 3}),
    ("bdz 0x14080", {"ctr": 1}),
    ("bcl 20, 31, 0x14004", {}),  # reads the PC
]

S390X_STATE = {"r1": 0x15000, "r14": 0x16000, "r13": 0x1234}
# keystone 0.9.2 rejects forward 16-bit relative branches ("offset out of range"): those
# are hand-encoded (RI format: opcode A7, R1/M1 nibble, op nibble, signed halfword offset)
S390X_CASES: list[tuple[str, str, dict[str, int]]] = [
    ("brasl %r14, 0x14100", "", {}),
    ("brasl %r14, 0x12000", "", {}),
    ("", "a7e50080", {}),  # bras %r14, .+0x100
    ("basr %r14, %r1", "", {}),
    ("basr %r14, %r14", "", {}),  # reads R2 before writing R1
    ("br %r14", "", {}),
    ("br %r1", "", {}),
    ("ber %r14", "", {"cc": 0}),
    ("ber %r14", "", {"cc": 1}),
    ("bner %r14", "", {"cc": 2}),
    ("bner %r14", "", {"cc": 0}),
    ("bcr 3, %r14", "", {"cc": 3}),
    ("bcr 3, %r14", "", {"cc": 1}),
    ("", "a7840040", {"cc": 0}),  # brc 8, .+0x80 (je): taken
    ("", "a7840040", {"cc": 2}),  # not taken
    ("", "a7f40040", {"cc": 3}),  # j .+0x80
    ("", "a744ff80", {"cc": 1}),  # brc 4, .-0x100 (jl): taken
    ("", "a744ff80", {"cc": 2}),  # not taken
    ("brcl 6, 0x14080", "", {"cc": 1}),
    ("brcl 6, 0x14080", "", {"cc": 0}),
    ("jg 0x12000", "", {"cc": 0}),
    ("jgne 0x14080", "", {"cc": 3}),
    ("jgne 0x14080", "", {"cc": 0}),
    # BC (RX: 47, M1 X2, B2 D2): b D2(X2,B2), a jump table's branch to X2 + B2 + D2
    ("", "47f21008", {"r2": 0x100}),  # b 8(%r2,%r1)
    ("", "47f01010", {}),  # b 0x10(%r1): X2 = 0, no index
]


def _ks(isa: Isa) -> keystone.Ks:
    eng = isa.engines
    mode = 0
    for name in eng.ks_mode:
        mode |= getattr(keystone, name)
    return keystone.Ks(getattr(keystone, eng.ks_arch or ""), mode)


def _insn(isa: Isa, code: bytes) -> Insn:
    cs = capstone.Cs(getattr(capstone, isa.engines.cs_arch), _mode(capstone, isa.engines.cs_mode))
    for i in cs.disasm(code, CODE, 1):
        return Insn(i.address, i.size, i.mnemonic, i.op_str, bytes(i.bytes))
    return Insn(CODE, len(code), "", "", code)  # capstone 5 has no 32-bit `bctar`


def _cpu(isa: Isa, code: bytes, state: dict[str, int]) -> UnicornCpu:
    cpu = UnicornCpu(isa)
    cpu.apply_reset()
    cpu.mem_map(BASE, SIZE)
    cpu.mem_write(CODE, code)
    for name, value in state.items():
        if name == "cc":  # s390x condition code: PSW mask bits 18–19
            cpu.reg_write("pswm", cpu.reg_read("pswm") & ~(3 << 44) | value << 44)
        else:
            cpu.reg_write(name, value)
    cpu.reg_write("pc", CODE)
    return cpu


def _compare(isa: Isa, code: bytes, state: dict[str, int], regs: list[str]) -> int:
    """Real one step vs the simulator; returns the next PC."""
    real = _cpu(isa, code, state)
    real.uc.emu_start(CODE, FAR, count=1)
    want = {r: real.reg_read(r) for r in regs}
    want_pc = real.reg_read("pc")

    insn = _insn(isa, code)
    flow = isa.classifiers.classify(insn)
    assert flow.kind is not FlowKind.NONE, insn
    sim = _cpu(isa, code, state)
    assert isa.simulate is not None
    target = isa.simulate(sim, insn, flow)
    assert target is not None, (insn, flow)
    assert target == want_pc, (insn.mnemonic, insn.op_str, hex(target), hex(want_pc))
    got = {r: sim.reg_read(r) for r in regs}
    assert got == want, (insn.mnemonic, insn.op_str, state)
    return target


@pytest.mark.parametrize("isa", [PPC, PPC64LE], ids=lambda i: i.name)
@pytest.mark.parametrize("asm,state", PPC_CASES, ids=[f"{a}-{s}" for a, s in PPC_CASES])
def test_ppc_against_unicorn(isa: Isa, asm: str, state: dict[str, int]) -> None:
    code = bytes(_ks(isa).asm(asm, CODE)[0])
    regs = ["lr", "ctr", "cr"] + [f"r{i}" for i in range(32)]
    _compare(isa, code, {**PPC_STATE, **state}, regs)


@pytest.mark.parametrize("asm,hexcode,state", S390X_CASES,
                         ids=[f"{a or h}-{s}" for a, h, s in S390X_CASES])
def test_s390x_against_unicorn(asm: str, hexcode: str, state: dict[str, int]) -> None:
    code = bytes.fromhex(hexcode) if hexcode else bytes(_ks(S390X).asm(asm, CODE)[0])
    regs = ["pswm"] + [f"r{i}" for i in range(16)]
    _compare(S390X, code, {**S390X_STATE, **state}, regs)


def test_taken_and_not_taken_differ() -> None:
    """The conditional cases really exercise both outcomes (the oracle agrees on both)."""
    beq = bytes(_ks(PPC).asm("beqlr", CODE)[0])
    assert _compare(PPC, beq, {**PPC_STATE, "cr": CR0_EQ}, ["lr"]) == PPC_STATE["lr"]
    assert _compare(PPC, beq, {**PPC_STATE, "cr": 0}, ["lr"]) == CODE + 4
    je = bytes.fromhex("a7840040")
    assert _compare(S390X, je, {"cc": 0}, ["r14"]) == CODE + 0x80
    assert _compare(S390X, je, {"cc": 1}, ["r14"]) == CODE + 4


@pytest.mark.parametrize("isa,hexcode", [
    (PPC, "4e800460"),  # bctar: not simulated
    (PPC, "4c000420"),  # bdnzctr: an invalid form
    (PPC, "7c0802a6"),  # mflr r0: not a branch
    (S390X, "0dd0"),  # basr %r13, 0: no branch
    (S390X, "07f0"),  # bcr 15, 0: serialization, no branch
    (S390X, "c6000000000a"),  # exrl %r0, .+20: the backend runs it in place
    (S390X, "a7160010"),  # brct %r1, .+0x20: not simulated
    (S390X, "0514"),  # balr %r1, %r4: not simulated
], ids=lambda v: v if isinstance(v, str) else v.name)
def test_not_simulated(isa: Isa, hexcode: str) -> None:
    code = bytes.fromhex(hexcode)
    insn = _insn(isa, code)
    cpu = _cpu(isa, code, {})
    before = {r: cpu.reg_read(r) for r in ("r1", "r13", "r14")}
    assert isa.simulate is not None
    assert isa.simulate(cpu, insn, isa.classifiers.classify(insn)) is None
    assert {r: cpu.reg_read(r) for r in ("r1", "r13", "r14")} == before
