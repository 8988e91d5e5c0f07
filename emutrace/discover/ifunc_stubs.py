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

Pure: pyelftools only."""

from __future__ import annotations

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from emutrace.discover.elf_words import LoadedWords, alias_rank
from emutrace.elf_tables import ElfSymbol

STT_GNU_IFUNC = 10  # gABI: ELF_ST_TYPE, OS-specific range (STT_LOOS)


def ifunc_stubs(path: str, symtab: list[ElfSymbol], bias: int) -> list[tuple[str, int, int]]:
    """(name, start, size) of the named `.plt` stubs of the static executable at path
    (none for any other file), at run-time addresses."""
    names: dict[int, str] = {}  # resolver address → the IFUNC's name
    for sym in symtab:
        if sym.type == STT_GNU_IFUNC and sym.shndx and sym.name:
            have = names.get(sym.value)
            if have is None or alias_rank(sym.name) < alias_rank(have):
                names[sym.value] = sym.name
    if not names:
        return []
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        if any(seg["p_type"] in ("PT_DYNAMIC", "PT_INTERP") for seg in elf.iter_segments()):
            return []  # a dynamic module: discover.modules.plt_symbols names its stubs
        stubs = elf.get_section_by_name(".plt")
        if stubs is None or stubs["sh_type"] != "SHT_PROGBITS" \
                or not stubs["sh_flags"] & SH_FLAGS.SHF_EXECINSTR:
            return []
        slots = _irelative_slots(elf)
        if slots is None or not slots or stubs["sh_size"] % len(slots):
            return []
        size = stubs["sh_size"] // len(slots)
        start = stubs["sh_addr"] + bias
    return [(f"{names[resolver]}@plt", start + i * size, size)
            for i, (_slot, resolver) in enumerate(sorted(slots)) if resolver in names]


def _irelative_slots(elf: ELFFile) -> list[tuple[int, int]] | None:
    """(GOT slot, resolver address) of every allocated relocation; None where one names a
    symbol (then they are not a static executable's IRELATIVE list).  REL relocations keep
    their addend in the slot itself (gABI "Relocation": implicit addends)."""
    words = LoadedWords(elf)
    out = []
    for sec in elf.iter_sections():
        if not isinstance(sec, RelocationSection) or not sec["sh_flags"] & SH_FLAGS.SHF_ALLOC:
            continue
        for rel in sec.iter_relocations():
            if rel["r_info_sym"]:
                return None
            addend = rel["r_addend"] if sec.is_RELA() else words.at(rel["r_offset"])
            if addend is None:
                return None
            out.append((rel["r_offset"], addend))
    return out
