"""What discovery produces: functions and their call, return and tail-jump sites."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class SiteKind(enum.Enum):
    CALL = "call"
    RETURN = "return"
    TAIL = "tail"  # a jump that may leave the function (indirect ones: decided at run time)
    ENTRY = "entry"  # a function's first instruction (only the `entry` backend probes it)


@dataclass(frozen=True)
class Site:
    addr: int
    size: int
    kind: SiteKind
    target: int | None = None  # direct target (ARM: bit 0 set for a Thumb target)
    indirect: str | None = None  # register or memory operand the target is read from
    delay_slot: bool = False  # the next instruction runs before the transfer (MIPS)
    conditional: bool = False  # the site may also fall through
    alt_mode: bool = False  # the site is Thumb code (ARM)
    executes: int | None = None  # s390x EX/EXRL: address of the executed instruction
    maybe_return: bool = False  # a jump that returns when it goes to the call's return address
    alt_link: bool = False  # a call through an alternate link register (isa.base.Flow)


@dataclass(frozen=True)
class Function:
    name: str | None  # None when found by descent without a symbol
    start: int  # first byte of code (even on ARM; see `entry`)
    end: int  # exclusive
    sites: tuple[Site, ...]
    alt_mode: bool = False  # Thumb function
    local_offset: int = 0  # ELFv2: local entry = start + local_offset
    # descent: the jump targets (other than the entry) followed as part of the function
    # because no function was known to start there; one becoming known makes it stale
    followed: frozenset[int] = frozenset()

    @property
    def entry(self) -> int:
        """The address a pointer to the function holds (Thumb: bit 0 set)."""
        return self.start | 1 if self.alt_mode else self.start

    @property
    def local_entry(self) -> int:
        return self.start + self.local_offset

    @property
    def calls(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if s.kind is SiteKind.CALL)

    @property
    def returns(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if s.kind is SiteKind.RETURN)

    @property
    def tails(self) -> tuple[Site, ...]:
        return tuple(s for s in self.sites if s.kind is SiteKind.TAIL)

    def __contains__(self, addr: int) -> bool:
        return self.start <= addr < self.end
