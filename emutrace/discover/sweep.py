"""Which instructions a linear sweep hands the classifier: an ISA's SweepFilter as a rule
(pure).  `SweepRule.keeps` is the reference of emutrace/native/sweep.c `scan`, which applies
the same rule while it decodes, so that the instructions no site can come from never become
Python objects (tests/test_disasm.py compares the two, tests/test_sweep_filter.py holds each
ISA's filter to its classifier)."""

from __future__ import annotations

import re

from emutrace.isa.base import Endian, Insn, SweepFilter, SweepKind

# a direct target as TARGET reads it (and sweep.c's `number`): decimal or 0x, no sign but -
_NUMBER = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|[1-9][0-9]*|0)")


def last_operand_number(op_str: str) -> int | None:
    """The last operand (after the last comma, blanks and `#` dropped) as a number, or None
    where it is none (a register, a memory operand)."""
    text = op_str.rsplit(",", 1)[-1].strip(" \t").lstrip("#")
    return int(text, 0) if _NUMBER.fullmatch(text) else None


def _matches(encodings: tuple[tuple[int, int, int], ...], size: int, word: int) -> bool:
    return any(size == n and word & mask == value for n, mask, value in encodings)


class SweepRule:
    """An ISA's SweepFilter, with its answers by mnemonic kept (`kinds`: sweep.c reads and
    fills the same dict through `kind`)."""

    def __init__(self, sweep: SweepFilter, endian: Endian, code_mask: int) -> None:
        self.sweep = sweep
        self.kinds: dict[str, int] = {}
        self.marks = sweep.operand_marks
        self.encodings = sweep.encodings
        self.stop_encodings = sweep.stop_encodings
        self.target_encodings = sweep.target_encodings
        self.branch_encodings = sweep.branch_encodings
        self.jump_encodings = sweep.jump_encodings
        self.call_encodings = sweep.call_encodings
        self.relative = sweep.relative
        self.fixed_size = sweep.fixed_size if sweep.encodings else 0
        self.lengths = sweep.lengths  # (sweep.c only: the same instructions, fewer decodes)
        self.big = endian == "big"
        self.code_mask = code_mask

    def kind(self, mnemonic: str) -> int:
        found = self.kinds.get(mnemonic)
        if found is None:
            assert self.sweep.mnemonic_kind is not None
            found = self.kinds[mnemonic] = int(self.sweep.mnemonic_kind(mnemonic))
        return found

    def keeps(self, insn: Insn, lo: int, hi: int, stops: bool = False) -> bool:
        """Must the classifier read insn, in a function whose code is [lo, hi) (stops:
        every STOP too, for recursive descent)?"""
        word = int.from_bytes(insn.raw, "big" if self.big else "little")
        if stops and _matches(self.stop_encodings, insn.size, word):
            return True
        if self.encodings:
            if not _matches(self.encodings, insn.size, word):
                return False
            return not _matches(self.target_encodings, insn.size, word) \
                or self._leaves(insn, lo, hi)
        kind = self.kind(insn.mnemonic)
        if kind == SweepKind.PLAIN:
            return False
        if kind == SweepKind.STOP:
            return stops
        if kind == SweepKind.OPERANDS:
            return any(mark in insn.op_str for mark in self.marks)
        if kind in (SweepKind.TARGET, SweepKind.BRANCH, SweepKind.JUMP):
            return self._leaves(insn, lo, hi)
        return True

    def branch_target(self, insn: Insn) -> int | None:
        """The target of insn where the filter says it is a conditional direct branch and
        its target is known (recursive descent's walk goes on past it), else None."""
        return self._walked_target(insn, self.branch_encodings, SweepKind.BRANCH)

    def jump_target(self, insn: Insn) -> int | None:
        """The target of insn where the filter says it is an unconditional direct jump and
        its target is known (recursive descent's walk follows it into the function), else
        None."""
        return self._walked_target(insn, self.jump_encodings, SweepKind.JUMP)

    def call_target(self, insn: Insn) -> int | None:
        """The target of insn where the filter says it is a direct call and its target is
        known (recursive descent's walk goes on past it), else None."""
        if self.encodings:
            word = int.from_bytes(insn.raw, "big" if self.big else "little")
            if not (_matches(self.encodings, insn.size, word)
                    and _matches(self.call_encodings, insn.size, word)):
                return None
        elif self.kind(insn.mnemonic) != SweepKind.CALL:
            return None
        return self._target(insn)

    def _walked_target(self, insn: Insn, encodings: tuple[tuple[int, int, int], ...],
                       kind: SweepKind) -> int | None:
        """insn's known direct target where the filter says it is of that kind: by
        encoding, among `encodings` (and the targets); by mnemonic, of that kind."""
        if self.encodings:
            word = int.from_bytes(insn.raw, "big" if self.big else "little")
            if not (_matches(self.encodings, insn.size, word)
                    and _matches(self.target_encodings, insn.size, word)
                    and _matches(encodings, insn.size, word)):
                return None
        elif self.kind(insn.mnemonic) != kind:
            return None
        return self._target(insn)

    def _target(self, insn: Insn) -> int | None:
        """The direct target in insn's operands, or None where it is not known."""
        number = last_operand_number(insn.op_str)
        if number is None or abs(number) >= 1 << 63:
            return None
        target = insn.addr + number if self.relative else number
        return None if target < 0 else target

    def _leaves(self, insn: Insn, lo: int, hi: int) -> bool:
        """Is the direct target in insn's operands outside [lo, hi), or not known?"""
        target = self._target(insn)
        return target is None or not lo <= target & self.code_mask < hi
