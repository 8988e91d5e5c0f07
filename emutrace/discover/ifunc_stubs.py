"""`func@plt` names for the IFUNC stubs of a static executable.

A static glibc program calls `strcmp`, `memcpy` and the other functions glibc selects at
start-up (GNU indirect functions, `STT_GNU_IFUNC`) through stubs in `.plt`: each stub jumps
through a GOT slot that an `R_*_IRELATIVE` relocation fills, before `main`, with what the
resolver at the relocation's addend returns (gABI "GNU_IFUNC"; glibc `apply_irel`).  The
relocations carry no symbol, so objdump shows the stubs unnamed; the resolver's address is
the value of the IFUNC symbol itself (`strcmp`), which names the stub here: `strcmp@plt`,
as a dynamic program's stub of the same call is named.

The linker lays the stubs out in `.plt` in the order of their GOT slots, all of one size
and nothing else in the section (BFD's `elf_x86_64_allocate_dynrelocs` and its peers: the
`iplt` entry and its `igotplt` slot are allocated together), so stub i is the i-th slot by
address.  A layout that does not fit that (a section size that is not a whole number of
stubs, relocations with a symbol: not a static executable's) names nothing.  `.iplt`
sections (ARM: a Thumb `bx pc` before each ARM stub) are left unnamed.

The relocations are read with the file's other tables (`elf_tables.SymbolTables.iplt`):
no file is opened here."""

from __future__ import annotations

from emutrace.discover.elf_words import alias_rank
from emutrace.elf_tables import ElfSymbol

STT_GNU_IFUNC = 10  # gABI: ELF_ST_TYPE, OS-specific range (STT_LOOS)


def ifunc_stubs(symtab: list[ElfSymbol], iplt: tuple[int, int, tuple[tuple[int, int], ...]]
                | None, bias: int) -> list[tuple[str, int, int]]:
    """(name, start, size) of the named `.plt` stubs of a static executable, at run-time
    addresses, from the tables its Image read (`SymbolTables.iplt`: none elsewhere)."""
    if iplt is None:
        return []
    names: dict[int, str] = {}  # resolver address → the IFUNC's name
    for sym in symtab:
        if sym.type == STT_GNU_IFUNC and sym.shndx and sym.name:
            have = names.get(sym.value)
            if have is None or alias_rank(sym.name) < alias_rank(have):
                names[sym.value] = sym.name
    start, size, slots = iplt
    if not names or not slots or size % len(slots):
        return []
    stride = size // len(slots)
    return [(f"{names[resolver]}@plt", start + bias + i * stride, stride)
            for i, (_slot, resolver) in enumerate(sorted(slots)) if resolver in names]
