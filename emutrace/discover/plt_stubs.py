"""`func@plt` names for the call stubs of ISAs without a `.plt` array of stubs (the layout
data is `isa.base.Plt`; `discover.modules.plt_symbols` hands these layouts over here).

* ppc, secure PLT (Power Architecture 32-bit ABI "secure PLT"; BFD elf32-ppc.c): `.plt`
  holds only GOT-like slots.  A non-PIC program's stubs (`lis r11,ha(slot); lwz
  r11,lo(slot)(r11); mtctr r11; bctr`) sit in .text, one per PLT relocation in relocation
  order, right before the lazy branch table `__glink` (one `b __glink_PLTresolve` per
  slot); before binding, slot i points at table entry i.  So the table is found from the
  slots, the stubs from the table (`Plt.lazy_table`, checked by `Plt.stub_insn`).
* ppc -fPIC/-pie and ppc64 ELFv2: the linker's call stubs carry local symbols naming the
  function (`00008000.got2.plt_pic32.strcmp@@GLIBC_2.0`, `00000019.plt_call.printf@@GLIBC_2.17`,
  `Plt.stub_symbol`).  Without them (a stripped module), ppc64's stubs are found by their
  code (`Plt.stub_code`): the PLT slot each loads, TOC-relative, names it; ppc's -fPIC stubs
  (r30-relative, one GOT pointer per object file) stay unnamed, as in objdump.
* mips o32 (SYSV MIPS psABI, "Global Offset Table": an undefined function with a nonzero
  st_value has that value as its address, a lazy stub in `.MIPS.stubs`,
  `Plt.stub_section`): each such `.dynsym` symbol names its stub.

Pure: pyelftools only."""

from __future__ import annotations

import re
from typing import Any, Literal

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from emutrace.discover.symbols import FuncSymbol
from emutrace.isa.base import Plt

SHF_EXECINSTR = SH_FLAGS.SHF_EXECINSTR


def linker_stubs(elf: ELFFile, plt: Plt, bias: int) -> list[FuncSymbol]:
    """The stubs of one module at run-time addresses; the layouts found agree or give way
    in the order section, lazy table, symbols (the first name of an address stays)."""
    found: dict[int, tuple[str, int]] = {}  # link-time address → (function, stub size)
    if plt.stub_section:
        found.update((a, (n, plt.entry)) for a, n in _section_stubs(elf, plt))
    if plt.lazy_table:
        for addr, name in _table_stubs(elf, plt):
            found.setdefault(addr, (name, plt.entry))
    if plt.stub_symbol:
        for addr, name in _named_stubs(elf, plt):
            found.setdefault(addr, (name, 0))  # 0: the stub runs up to the next symbol
    if plt.stub_code is not None and not found:
        for addr, name, size in _coded_stubs(elf, plt):
            found.setdefault(addr, (name, size))
    return [FuncSymbol(f"{name}@plt", addr + bias, size, False, 0)
            for addr, (name, size) in sorted(found.items())]


def _section_stubs(elf: ELFFile, plt: Plt) -> list[tuple[int, str]]:
    """mips: undefined `.dynsym` functions whose value lies in the stub section."""
    sec = elf.get_section_by_name(plt.stub_section)
    dynsym = elf.get_section_by_name(".dynsym")
    if sec is None or dynsym is None or not hasattr(dynsym, "iter_symbols"):
        return []
    lo, hi = sec["sh_addr"], sec["sh_addr"] + sec["sh_size"]
    return [(sym["st_value"], sym.name) for sym in dynsym.iter_symbols()
            if sym["st_shndx"] == "SHN_UNDEF" and sym["st_info"]["type"] == "STT_FUNC"
            and sym.name and lo <= sym["st_value"] and sym["st_value"] + plt.entry <= hi]


def _table_stubs(elf: ELFFile, plt: Plt) -> list[tuple[int, str]]:
    """ppc secure PLT: stub i = table − entry × (count − i), table = slot 0's lazy value;
    nothing unless every slot points at its own table entry and every stub's first word
    matches `stub_insn` (a -fPIC module's stubs address slots through r30: not these)."""
    relocs = elf.get_section_by_name(".rela.plt") or elf.get_section_by_name(".rel.plt")
    if not isinstance(relocs, RelocationSection) or not relocs.num_relocations():
        return []
    rels = list(relocs.iter_relocations())
    width = elf.elfclass // 8
    loaded = _Loaded(elf)
    table = _word(loaded, rels[0]["r_offset"], width)
    if table is None:
        return []
    first = table - plt.entry * len(rels)
    mask, value = plt.stub_insn
    symtab: Any = elf.get_section(relocs["sh_link"])
    out = []
    for i, rel in enumerate(rels):
        stub = first + i * plt.entry
        if _word(loaded, rel["r_offset"], width) != table + i * plt.lazy_table:
            return []
        insn = _word(loaded, stub, 4)
        if insn is None or insn & mask != value:
            return []
        index = rel["r_info_sym"]
        name = symtab.get_symbol(index).name if index and symtab is not None else ""
        if name:
            out.append((stub, name))
    return out


def _named_stubs(elf: ELFFile, plt: Plt) -> list[tuple[int, str]]:
    """Local `.symtab` symbols whose name says which function the stub calls."""
    table = elf.get_section_by_name(".symtab")
    if table is None or not hasattr(table, "iter_symbols"):
        return []
    pattern = re.compile(plt.stub_symbol)
    out = []
    for sym in table.iter_symbols():
        match = pattern.search(sym.name) if sym["st_shndx"] != "SHN_UNDEF" else None
        if match and match.group("func"):
            out.append((sym["st_value"], match.group("func")))
    return out


def _coded_stubs(elf: ELFFile, plt: Plt) -> list[tuple[int, str, int]]:
    """Stubs found by their code in the executable sections: each candidate (it starts
    with `stub_prefix`) whose `stub_code` loads a PLT slot (TOC base + displacement is the
    r_offset of a PLT relocation) is that slot's function's stub."""
    assert plt.stub_code is not None
    relocs = elf.get_section_by_name(".rela.plt") or elf.get_section_by_name(".rel.plt")
    base = elf.get_section_by_name(plt.toc_base[0])
    if not isinstance(relocs, RelocationSection) or base is None:
        return []
    symtab: Any = elf.get_section(relocs["sh_link"])
    slots = {rel["r_offset"]: rel["r_info_sym"] for rel in relocs.iter_relocations()}
    toc = base["sh_addr"] + plt.toc_base[1]
    out = []
    for sec in elf.iter_sections():
        if not sec["sh_flags"] & SHF_EXECINSTR or sec["sh_type"] != "SHT_PROGBITS":
            continue
        code = sec.data()
        at = code.find(plt.stub_prefix)
        while at >= 0:
            stub = plt.stub_code(code[at:at + 32])
            index = slots.get(toc + stub[0]) if stub is not None else None
            if stub is not None and index:
                name = symtab.get_symbol(index).name if symtab is not None else ""
                if name:
                    out.append((sec["sh_addr"] + at, name, stub[1]))
            at = code.find(plt.stub_prefix, at + 4)
    return out


class _Loaded:
    """The file's PT_LOAD bytes by link-time address (read once per module)."""

    def __init__(self, elf: ELFFile) -> None:
        self.order: Literal["little", "big"] = "little" if elf.little_endian else "big"
        self.segments = [(seg["p_vaddr"], seg.data()) for seg in elf.iter_segments()
                         if seg["p_type"] == "PT_LOAD"]


def _word(loaded: _Loaded, addr: int, size: int) -> int | None:
    """The `size`-byte word the file puts at link-time address addr."""
    for vaddr, data in loaded.segments:
        if vaddr <= addr and addr + size <= vaddr + len(data):
            return int.from_bytes(data[addr - vaddr:addr - vaddr + size], loaded.order)
    return None
