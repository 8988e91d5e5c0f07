"""The ISA registry: one frozen description per instruction set, looked up exactly."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

from emutrace.isa.base import Isa

MODULES = (
    "x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le", "s390x",
    "mips64el", "mips64", "m68k", "sparc64", "ppc64", "x86_16",
)


class UnknownIsa(LookupError):
    pass


def all_isas() -> tuple[Isa, ...]:
    return tuple(isas_in_order())


def isas_in_order() -> Iterator[Isa]:
    """Every ISA in MODULES order, each module imported only when the loop reaches it: a
    lookup that stops at its match leaves the ISAs after it unimported (a run of an x86_64
    program needs none of the other nine modules)."""
    for m in MODULES:
        yield importlib.import_module(f"emutrace.isa.{m}").ISA


def by_name(name: str) -> Isa:
    """Exact lookup by canonical name or declared alias (case-insensitive)."""
    key = name.strip().lower()
    for isa in isas_in_order():
        if key == isa.name or key in isa.identity.aliases:
            return isa
    raise UnknownIsa(f"unknown ISA {name!r}; known: {', '.join(MODULES)}")


def from_elf(machine: str, elf_class: int, endian: str, flags: int = 0) -> Isa:
    """The ISA whose ELF identity matches exactly (machine, class, data, e_flags mask)."""
    for isa in isas_in_order():
        ident = isa.identity
        mask, value = ident.elf_flags
        if (ident.elf_machine, ident.elf_class, ident.endian) == (machine, elf_class, endian) \
                and flags & mask == value:
            return isa
    raise UnknownIsa(
        f"unsupported machine {machine} ({elf_class}-bit, {endian}-endian); "
        f"supported: {', '.join(MODULES)}"
    )
