"""`Classifiers.sp_effect` (what a site and its delay slot add to sp; the native engine's C
site table relies on it, backends/hooked_sites.py), against encodings derived by hand from
the ISA manuals: MIPS32 vol. II (ADDIU: opcode 001001, rs, rt, imm16; SW: 101011; JR:
SPECIAL funct 001000; BEQL: 010100) and the RISC-V unprivileged spec ch. 2.5 and 16 (JAL,
JALR, C.JR, ADDI); and on the ISAs whose breakpoints work (C's site table watches the
sites of code found by descent there) from the manuals named below."""

from __future__ import annotations

import capstone as cs
import pytest

from emutrace.isa import by_name, mips, riscv64
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


# The ISAs whose breakpoints work (their sites of code found by descent are hooked): x86 (Intel
# SDM vol. 2: CALL E8 cd, RET C3, RET imm16 C2 iw, JMP rel8 EB, JE rel8 74, MOV 89), AArch64
# (DDI 0487 C6: BL 100101 imm26, RET 0xD65F03C0, ADD (immediate) 0x91...), A32/Thumb (DDI
# 0406C A8.8: LDMIA sp!/POP, BX LR, LDR post-indexed, B<c> T1 1101 cond imm8, CBZ 1011 0 0 i
# 1 imm5 Rn), z/Architecture (PoO: BRASL C0 R1 5, BCR 07 M1 R2, BASR 0D R1 R2) and Power (I-form
# `bl` 18, XL-form `blr` 0x4E800020, D-form `addi` 14).
def _cs(arch: int, mode: int, raw: bytes, thumb: bool = False) -> Insn:
    i = next(cs.Cs(arch, mode).disasm(raw, 0x1000))
    return Insn(0x1000, i.size, i.mnemonic, i.op_str, raw, thumb=thumb)


X86, X64 = (cs.CS_ARCH_X86, cs.CS_MODE_32), (cs.CS_ARCH_X86, cs.CS_MODE_64)
A64 = (cs.CS_ARCH_ARM64, cs.CS_MODE_ARM)
A32, T32 = (cs.CS_ARCH_ARM, cs.CS_MODE_ARM), (cs.CS_ARCH_ARM, cs.CS_MODE_THUMB)
S390 = (cs.CS_ARCH_SYSZ, cs.CS_MODE_BIG_ENDIAN)
PPC = (cs.CS_ARCH_PPC, cs.CS_MODE_32 | cs.CS_MODE_BIG_ENDIAN)


@pytest.mark.parametrize(("isa", "decoder", "raw", "want"), [
    ("x86_64", X64, b"\xe8\x00\x00\x00\x00", -8),  # call rel32 pushes 8 bytes
    ("x86_64", X64, b"\xc3", 8),  # ret
    ("x86_64", X64, b"\xc2\x10\x00", 24),  # ret 0x10: pops 8, releases 16
    ("x86_64", X64, b"\xeb\x00", 0),  # jmp rel8
    ("x86_64", X64, b"\x74\x00", 0),  # je rel8
    ("x86_64", X64, b"\x66\xc3", None),  # operand-size prefix
    ("x86_64", X64, b"\x48\x89\xd8", None),  # mov rax, rbx: no transfer
    ("i386", X86, b"\xe8\x00\x00\x00\x00", -4),
    ("i386", X86, b"\xc2\x0c\x00", 16),  # ret 0xc (the lazy-binding resolver's)
    ("aarch64", A64, (0x94000000).to_bytes(4, "little"), 0),  # bl
    ("aarch64", A64, (0xD65F03C0).to_bytes(4, "little"), 0),  # ret
    ("aarch64", A64, (0x910043FF).to_bytes(4, "little"), None),  # add sp, sp, #16
    ("ppc", PPC, (0x48000001).to_bytes(4, "big"), 0),  # bl
    ("ppc", PPC, (0x4E800020).to_bytes(4, "big"), 0),  # blr
    ("ppc", PPC, (0x38210010).to_bytes(4, "big"), None),  # addi r1, r1, 16
    ("s390x", S390, b"\xc0\xe5\x00\x00\x00\x00", 0),  # brasl %r14
    ("s390x", S390, b"\x07\xfe", 0),  # br %r14
    ("s390x", S390, b"\x0d\xf1", None),  # basr %r15, %r1: writes the stack pointer
    ("arm", A32, (0xE8BD8010).to_bytes(4, "little"), 8),  # pop {r4, pc}
    ("arm", A32, (0x08BD8010).to_bytes(4, "little"), 8),  # popeq {r4, pc}
    ("arm", A32, (0xE49DF004).to_bytes(4, "little"), 4),  # ldr pc, [sp], #4
    ("arm", A32, (0xE12FFF1E).to_bytes(4, "little"), 0),  # bx lr
    ("arm", A32, (0xEB000000).to_bytes(4, "little"), 0),  # bl
    ("arm", A32, (0xE28DD010).to_bytes(4, "little"), None),  # add sp, sp, #16
])
def test_sp_effect_of_patch_isas(isa: str, decoder: tuple[int, int], raw: bytes,
                                 want: int | None) -> None:
    effect = by_name(isa).classifiers.sp_effect
    assert effect is not None
    assert effect(_cs(*decoder, raw)) == want


def test_thumb_sp_effect_and_it_block() -> None:
    """Thumb `pop {r4, pc}` (0xBD10) releases 8 bytes; a conditional Thumb site is in an IT
    block (Unicorn hooks it only when taken) unless it is B<c> T1 (0xD0xx) or CBZ (0xB1xx)."""
    cls = by_name("arm").classifiers
    assert cls.sp_effect is not None and cls.hooked_when_taken is not None
    assert cls.sp_effect(_cs(*T32, b"\x10\xbd", thumb=True)) == 8
    assert cls.hooked_when_taken(_cs(*T32, b"\x70\x47", thumb=True))  # bx lr (in `it eq`)
    assert not cls.hooked_when_taken(_cs(*T32, b"\x00\xd0", thumb=True))  # beq T1
    assert not cls.hooked_when_taken(_cs(*T32, b"\x00\xb1", thumb=True))  # cbz r0
    assert not cls.hooked_when_taken(_cs(*A32, (0x012FFF1E).to_bytes(4, "little")))  # bxeq
