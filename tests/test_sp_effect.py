"""`Classifiers.sp_effect` (what a site and its delay slot add to sp; the native engine's C
site table relies on it, backends/hooked_sites.py), against encodings derived by hand from
the ISA manuals: MIPS32 vol. II (ADDIU: opcode 001001, rs, rt, imm16; SW: 101011; JR:
SPECIAL funct 001000; BEQL: 010100) and the RISC-V unprivileged spec ch. 2.5 and 16 (JAL,
JALR, C.JR, ADDI)."""

from __future__ import annotations

import capstone as cs
import pytest

from emutrace.isa import mips, riscv64
from emutrace.isa.base import Insn


def _mips(word: int) -> Insn:
    raw = word.to_bytes(4, "big")
    md = cs.Cs(cs.CS_ARCH_MIPS, cs.CS_MODE_MIPS32 | cs.CS_MODE_BIG_ENDIAN)
    i = next(md.disasm(raw, 0x1000))
    return Insn(0x1000, 4, i.mnemonic, i.op_str, raw)


def _addiu(rt: int, rs: int, imm: int) -> int:
    return (0b001001 << 26) | (rs << 21) | (rt << 16) | (imm & 0xFFFF)


SP, RA, GP, FP = 29, 31, 28, 30


@pytest.mark.parametrize(("word", "want"), [
    (_addiu(SP, SP, 32), 32),  # addiu sp, sp, 32: the o32 epilogue's delay slot
    (_addiu(SP, SP, -32), -32),
    ((0b101011 << 26) | (SP << 21) | (RA << 16) | 0x1C, 0),  # sw ra, 28(sp): reads sp
    ((0b100011 << 26) | (SP << 21) | (GP << 16) | 0x10, 0),  # lw gp, 16(sp)
    ((RA << 21) | 0b001000, 0),  # jr ra
    ((FP << 21) | (SP << 11) | 0b100001, None),  # move sp, fp (addu sp, fp, zero)
    (0, 0),  # nop
    ((0b010100 << 26) | 8, None),  # beql zero, zero: its delay slot may be nullified
])
def test_mips_sp_effect(word: int, want: int | None) -> None:
    assert mips.sp_effect_mips(_mips(word)) == want


def _rv(word: int, size: int = 4) -> Insn:
    return Insn(0x1000, size, "", "", word.to_bytes(size, "little"))


@pytest.mark.parametrize(("insn", "want"), [
    (_rv(0x6F | (1 << 7)), 0),  # jal ra, .
    (_rv(0x67 | (1 << 15)), 0),  # jalr x0, 0(ra): ret
    (_rv(0x6F | (2 << 7)), None),  # jal sp, .: writes sp
    (_rv(0x8082, 2), 0),  # c.jr ra
    (_rv(0x13 | (2 << 7) | (2 << 15) | ((-16 & 0xFFF) << 20)), None),  # addi sp, sp, -16
])
def test_riscv_sp_effect(insn: Insn, want: int | None) -> None:
    assert riscv64.sp_effect_riscv(insn) == want
