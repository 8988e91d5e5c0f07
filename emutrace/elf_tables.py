"""An ELF file's section headers and symbol tables, read with `struct` in one pass.

Pure: bytes in, tuples out.  pyelftools parses each symbol through its `construct`
structures (~100 µs a symbol: 0.2 s for a static glibc program's 2,000 symbols, and the
file used to be parsed so two or three times a run); the layouts are fixed by the gABI, so
they are unpacked here directly and read once per file (elf.Image carries the result).

Layouts (System V gABI, "Sections" and "Symbol Table"; Elf32_/Elf64_ in <elf.h>):
  Elf32_Shdr: name type flags addr offset size link info addralign entsize  (10 × 4 bytes)
  Elf64_Shdr: name type (4 bytes) flags addr offset size (8) link info (4) addralign entsize (8)
  Elf32_Sym:  name value size (4 bytes) info other (1) shndx (2)             (16 bytes)
  Elf64_Sym:  name (4) info other (1) shndx (2) value size (8)               (24 bytes)
Extended numbering (gABI): e_shnum 0 means section 0's sh_size holds the count, e_shstrndx
SHN_XINDEX means its sh_link holds the index.

64-bit PowerPC ELFv1 (64-bit PowerPC ELF ABI Supplement 1.9 §3.2.5, §4.2.1): a function
symbol's st_value is the address of its descriptor in `.opd`, whose first doubleword is the
code address; the tables give that code address as the symbol's value (`_descriptors`).

Damage is a ValueError, as pyelftools' errors were (elf.load_image turns it into the one-line
"malformed ELF" error); the reference for the numbers is pyelftools itself
(tests/test_elf_tables.py reads every test program both ways).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import NamedTuple

SHT_PROGBITS, SHT_SYMTAB, SHT_RELA, SHT_DYNAMIC, SHT_NOBITS, SHT_REL, SHT_DYNSYM = \
    1, 2, 4, 6, 8, 9, 11
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
SHN_UNDEF, SHN_XINDEX = 0, 0xFFFF
STT_OBJECT, STT_FUNC = 1, 2

Blob = bytes | mmap.mmap  # the file's bytes, read or mapped (elf._map_program)


class Section(NamedTuple):
    name: str
    type: int  # sh_type
    flags: int  # sh_flags
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


class ElfSymbol(NamedTuple):
    name: str
    value: int  # st_value as in the file (bit 0: Thumb on ARM)
    size: int
    type: int  # ELF_ST_TYPE(st_info): STT_FUNC, STT_OBJECT...
    other: int  # st_other (visibility; ELFv2 local-entry bits 5-7)
    shndx: int


@dataclass(frozen=True)
class SymbolTables:
    """What discovery reads from sections: the two symbol tables (None: the file has no
    such section) and the [start, end) link-time ranges of executable PROGBITS sections
    (empty: no section headers)."""

    symtab: list[ElfSymbol] | None
    dynsym: list[ElfSymbol] | None
    code_sections: list[tuple[int, int]]
    # a static executable's IFUNC stubs: (.plt's address, its size, the (GOT slot, resolver)
    # of every relocation, all symbol-less IRELATIVE ones); None elsewhere
    iplt: tuple[int, int, tuple[tuple[int, int], ...]] | None = None


NO_TABLES = SymbolTables(None, None, [])


def _formats(elfclass: int, little: bool) -> tuple[str, str, str, int, int]:
    """(header tail, section header, symbol) struct formats and the two entry sizes."""
    e = "<" if little else ">"
    if elfclass == 64:
        return e + "QQIHHHHHH", e + "IIQQQQIIQQ", e + "IBBHQQ", 64, 24
    return e + "IIIHHHHHH", e + "IIIIIIIIII", e + "IIIBBH", 40, 16


def read_sections(blob: Blob, elfclass: int, little: bool) -> list[Section]:
    """Every section header, named from the section-name string table."""
    head, shdr, _sym, shdr_size, _ = _formats(elfclass, little)
    at = 24 + (8 if elfclass == 64 else 4)  # e_ident, e_type, e_machine, e_version, e_entry
    (_phoff, shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum,
     shstrndx) = struct.unpack_from(head, blob, at)
    if shoff == 0:
        return []
    if shentsize < shdr_size:
        raise ValueError(f"e_shentsize {shentsize} is smaller than a section header")

    def header(i: int) -> tuple[int, ...]:
        where = shoff + i * shentsize
        if where + shdr_size > len(blob):
            raise ValueError(f"section header {i} lies past the end of the file")
        return struct.unpack_from(shdr, blob, where)

    first = header(0)
    if shnum == 0:
        shnum = first[5]  # sh_size of section 0
    if shstrndx == SHN_XINDEX:
        shstrndx = first[6]  # sh_link of section 0
    if shoff + shnum * shentsize > len(blob):
        raise ValueError(f"{shnum} section headers do not fit in the file")
    raw = [first, *(header(i) for i in range(1, shnum))]
    names_at = raw[shstrndx][4] if shstrndx < len(raw) else None
    out = []
    for name, typ, flags, addr, offset, size, link, _info, _align, entsize in raw:
        text = _string(blob, names_at + name) if names_at is not None else ""
        out.append(Section(text, typ, flags, addr, offset, size, link, entsize))
    return out


def _string(blob: Blob, at: int) -> str:
    """The NUL-terminated string at file offset `at` ('' outside the file), decoded as
    pyelftools decodes names (UTF-8, bad bytes replaced)."""
    if not 0 <= at < len(blob):
        return ""
    end = blob.find(b"\0", at)
    return bytes(blob[at:end if end >= 0 else len(blob)]).decode("utf-8", errors="replace")


def read_symbols(blob: Blob, sections: list[Section], index: int, elfclass: int,
                 little: bool) -> list[ElfSymbol]:
    """The entries of the symbol table section `sections[index]` (entry 0, the null
    symbol, included as pyelftools lists it)."""
    _head, _shdr, sym, _, sym_size = _formats(elfclass, little)
    table = sections[index]
    if table.entsize < sym_size:
        raise ValueError(f"{table.name}: sh_entsize {table.entsize} is smaller than a symbol")
    count = table.size // table.entsize
    if table.offset + count * table.entsize > len(blob):
        raise ValueError(f"{table.name}: extends past the end of the file")
    strings = sections[table.link].offset if table.link < len(sections) else None
    wide = elfclass == 64
    out = []
    for i in range(count):
        fields = struct.unpack_from(sym, blob, table.offset + i * table.entsize)
        if wide:
            name, info, other, shndx, value, size = fields
        else:
            name, value, size, info, other, shndx = fields
        text = _string(blob, strings + name) if strings is not None and name else ""
        out.append(ElfSymbol(text, value, size, info & 0xF, other, shndx))
    return out


def read_tables(blob: Blob, elfclass: int, little: bool) -> SymbolTables:
    """.symtab, .dynsym and the executable sections of the ELF file `blob`.  A table is
    found by name as pyelftools' get_section_by_name finds it (the last section of that
    name) and must be a symbol table section."""
    sections = read_sections(blob, elfclass, little)
    by_name = {s.name: i for i, s in enumerate(sections)}

    def table(name: str) -> list[ElfSymbol] | None:
        i = by_name.get(name)
        if i is None or sections[i].type not in (SHT_SYMTAB, SHT_DYNSYM):
            return None
        return read_symbols(blob, sections, i, elfclass, little)

    code = sorted((s.addr, s.addr + s.size) for s in sections
                  if s.flags & SHF_EXECINSTR and s.type == SHT_PROGBITS and s.size)
    plt = by_name.get(".plt")
    iplt = _irelative(blob, sections, sections[plt], elfclass, little) \
        if plt is not None else None
    symtab, dynsym = table(".symtab"), table(".dynsym")
    opd = by_name.get(".opd")
    if opd is not None and elfclass == 64 and sections[opd].type == SHT_PROGBITS:
        symtab, dynsym = (_descriptors(t, blob, sections[opd], code, little)
                          for t in (symtab, dynsym))
    return SymbolTables(symtab, dynsym, code, iplt)


def _descriptors(table: list[ElfSymbol] | None, blob: Blob, opd: Section,
                 code: list[tuple[int, int]], little: bool) -> list[ElfSymbol] | None:
    """ELFv1 function symbols whose value is a descriptor in `opd` given the descriptor's
    code address (its first doubleword) where that lies in an executable section; a
    descriptor the file leaves to a relocation (zero there) keeps its symbol as it is."""
    if table is None:
        return None
    order = "<Q" if little else ">Q"
    out = []
    for sym in table:
        at = sym.value - opd.addr
        if sym.type == STT_FUNC and sym.shndx != SHN_UNDEF and 0 <= at <= opd.size - 8 \
                and opd.offset + at + 8 <= len(blob):
            entry = struct.unpack_from(order, blob, opd.offset + at)[0]
            if any(start <= entry < end for start, end in code):
                sym = sym._replace(value=entry)
        out.append(sym)
    return out


def _irelative(blob: Blob, sections: list[Section], plt: Section, elfclass: int,
               little: bool) -> tuple[int, int, tuple[tuple[int, int], ...]] | None:
    """A static executable's `.plt` and the relocations that fill its GOT slots (gABI
    "Relocation": Elf32_Rel/Elf64_Rela; a REL addend is the word at r_offset): None where
    the file is dynamic (a SHT_DYNAMIC section), `.plt` is not code, or a relocation names
    a symbol (not an IRELATIVE list)."""
    if plt.type != SHT_PROGBITS or not plt.flags & SHF_EXECINSTR or \
            any(s.type == SHT_DYNAMIC for s in sections):
        return None
    wide = elfclass == 64
    order = "<" if little else ">"
    slots = []
    for sec in sections:
        if sec.type not in (SHT_RELA, SHT_REL) or not sec.flags & SHF_ALLOC:
            continue
        rela = sec.type == SHT_RELA
        fmt = order + ("QQq" if rela else "QQ") if wide else order + ("IIi" if rela else "II")
        size = struct.calcsize(fmt)
        if sec.offset + sec.size > len(blob):
            return None
        for at in range(sec.offset, sec.offset + sec.size - size + 1, size):
            fields = struct.unpack_from(fmt, blob, at)
            if fields[1] >> (32 if wide else 8):  # ELF64_R_SYM / ELF32_R_SYM
                return None
            addend = fields[2] if rela else _word_at(blob, sections, fields[0], wide, order)
            if addend is None:
                return None
            slots.append((fields[0], addend))
    return (plt.addr, plt.size, tuple(slots)) if slots else None


def _word_at(blob: Blob, sections: list[Section], addr: int, wide: bool,
             order: str) -> int | None:
    """The address-sized word the file puts at link-time address addr."""
    size = 8 if wide else 4
    for sec in sections:
        if sec.type != SHT_NOBITS and sec.flags & SHF_ALLOC and \
                sec.addr <= addr and addr + size <= sec.addr + sec.size:
            at = sec.offset + addr - sec.addr
            if at + size <= len(blob):
                return int(struct.unpack_from(order + ("Q" if wide else "I"), blob, at)[0])
    return None


def read_file_tables(path: str) -> SymbolTables:
    """read_tables of the ELF file at `path` (OSError if unreadable, ValueError if damaged
    or not ELF)."""
    with open(path, "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            raise ValueError("not an ELF file")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as blob:
            if len(blob) < 52 or blob[4] not in (1, 2) or blob[5] not in (1, 2):
                raise ValueError("not an ELF file")
            return read_tables(blob, 64 if blob[4] == 2 else 32, blob[5] == 1)
