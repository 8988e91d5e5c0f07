"""The module map of a dynamic program: every ELF object in the process (the program, its
interpreter ld.so, each library ld.so maps), where it is loaded, its function symbols and
its executable bytes — one symbol table and one code list for discovery and the backends,
growing while the program runs.  Pure: pyelftools only.

How a library is found: Linux user space maps an ELF object with mmap of the file, each
PT_LOAD from its page-aligned file offset (glibc `_dl_map_segments`); the Linux layer reports
every file mapping made with PROT_EXEC, and the mapping whose offset is the page of an
executable PT_LOAD gives the load bias: `where - page_down(p_vaddr)`.

Symbols per module: `.symtab`, else `.dynsym` (distribution libraries are stripped); of
aliases at one address (`printf`, `_IO_printf`) the name with the fewest leading
underscores, then the shortest, is kept.  PLT stubs get `func@plt` from the ISA's PLT layout
(isa.base.Plt) and the PLT relocations (mips, ppc, ppc64: discover.plt_stubs).  A function
name defined by two modules is shown `module:func` for both (module: the file name up to
`.so`, e.g. `libc:free`).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from emutrace.discover.debuginfo import find_debug_file, guest_path
from emutrace.discover.elf_words import LoadedWords, alias_rank
from emutrace.discover.plt_stubs import linker_stubs
from emutrace.discover.symbols import FuncSymbol, SymbolTable, table_symbols
from emutrace.elf import PF_X, Image, load_image
from emutrace.elf_tables import ElfSymbol, SymbolTables, read_file_tables
from emutrace.errors import EmutraceError
from emutrace.isa.base import Isa

PAGE = 4096


def short_name(path: str) -> str:
    """`libc.so.6` → `libc`, `ld-linux-aarch64.so.1` → `ld-linux-aarch64`; a program keeps
    its file name."""
    base = os.path.basename(path)
    head, sep, _ = base.partition(".so")
    return head if sep and head else base


@dataclass(frozen=True)
class Module:
    name: str  # short_name of its file
    path: str  # host path of the file
    bias: int  # load bias: run-time address − link-time address
    start: int  # run-time extent of its PT_LOAD segments
    end: int
    names: frozenset[str]  # its function names, unqualified
    # what is code in it is known: mapping symbols ($a/$t/$d) mark data in code, or the
    # ISA keeps no data in code; False (a stripped ARM library: literal pools unmarked)
    # means breakpoint bytes must never be written there (int3 uses site hooks)
    code_known: bool = True
    debug: str | None = None  # the separate debug file its symbols came from, if one


def _one_name_per_address(funcs: list[FuncSymbol]) -> list[FuncSymbol]:
    """Of aliases (same start and size), the name a user would call."""
    best: dict[tuple[int, int], FuncSymbol] = {}
    for f in funcs:
        key = (f.start, f.size)
        have = best.get(key)
        if have is None or alias_rank(f.name) < alias_rank(have.name):
            best[key] = f
    return list(best.values())


def plt_symbols(elf: ELFFile, isa: Isa, bias: int,
                dynsym: list[ElfSymbol] | None = None) -> list[FuncSymbol]:
    """`func@plt` for each PLT stub: stub i belongs to the i-th PLT relocation.  dynsym:
    the module's `.dynsym` as elf_tables read it (the relocations' symbols are named from
    it by index, without pyelftools' per-symbol parse)."""
    plt = isa.plt
    if plt is None:
        return []
    if plt.stub_section or plt.lazy_table or plt.stub_symbol:
        return linker_stubs(elf, plt, bias)  # no .plt of stubs: mips, ppc, ppc64
    sec = elf.get_section_by_name(".plt.sec") if plt.sec_entry else None
    if sec is not None:
        base, size = sec["sh_addr"], plt.sec_entry
    else:
        sec = elf.get_section_by_name(".plt")
        if sec is None or sec["sh_type"] != "SHT_PROGBITS":
            return []
        base, size = sec["sh_addr"] + plt.header, plt.entry
    end = sec["sh_addr"] + sec["sh_size"]
    relocs = elf.get_section_by_name(".rela.plt") or elf.get_section_by_name(".rel.plt")
    if not isinstance(relocs, RelocationSection):
        return []
    symtab: Any = elf.get_section(relocs["sh_link"])
    by_slot = sec.name == ".plt" and plt.lazy_offset is not None
    if not by_slot and (end - base) != size * relocs.num_relocations():
        return []  # not the layout assumed (ARM Thumb entry stubs, long entries): unnamed
    names = dynsym if dynsym is not None and symtab is not None \
        and symtab.name == ".dynsym" and len(dynsym) == symtab.num_symbols() else None
    words = LoadedWords(elf) if by_slot else None
    out = []
    for i, (r_offset, index) in enumerate(_plt_relocations(elf, relocs)):
        if words is not None:
            assert plt.lazy_offset is not None
            slot = words.at(r_offset)
            start = slot - plt.lazy_offset if slot is not None else -1
            if not base <= start < end or (start - base) % size:
                continue
        else:
            start = base + i * size
        if start + size > end:
            continue
        if not index or symtab is None:
            name = ""
        elif names is not None:
            name = names[index].name if index < len(names) else ""
        else:
            name = symtab.get_symbol(index).name
        if name:  # (IRELATIVE relocations have no symbol: the stub stays unnamed)
            out.append(FuncSymbol(f"{name}@plt", start + bias, size, False, 0))
    return out


def _plt_relocations(elf: ELFFile, relocs: RelocationSection) -> list[tuple[int, int]]:
    """(r_offset, symbol index) of each relocation of the section, unpacked with `struct`
    (gABI "Relocation": Elf32_Rel/Rela r_offset, r_info [, r_addend] in 4-byte words,
    ELF32_R_SYM = r_info >> 8; Elf64 in 8-byte words, ELF64_R_SYM = r_info >> 32)."""
    wide = elf.elfclass == 64
    word = "Q" if wide else "I"
    fmt = ("<" if elf.little_endian else ">") + word * 2
    entry = relocs["sh_entsize"] or (3 if relocs.is_RELA() else 2) * (8 if wide else 4)
    data = relocs.data()
    shift = 32 if wide else 8
    return [(r_offset, r_info >> shift)
            for r_offset, r_info in (struct.unpack_from(fmt, data, at)
                                     for at in range(0, len(data) - entry + 1, entry))]


def module_symbols(path: str, isa: Isa, bias: int, root: str = "/",
                   tables: SymbolTables | None = None) -> tuple[
        list[FuncSymbol], list[tuple[int, int]], str | None]:
    """Function symbols and PLT stubs of one module, at run-time addresses, the
    data-in-code ranges of its mapping symbols and the debug file read: its `.symtab`, else
    the `.symtab` of its separate debug file under the root (discover.debuginfo), else
    `.dynsym` (aliases folded).  `tables`: the module's symbol tables as its Image read
    them (else read here)."""
    if tables is None:
        tables = read_file_tables(path)
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        funcs: list[FuncSymbol] = []
        ranges: list[tuple[int, int]] = []
        debug = None
        if tables.symtab is None:
            debug = find_debug_file(elf, guest_path(path, root), root)
        if debug is not None:
            dtable = read_file_tables(str(debug)).symtab
            if dtable is not None:
                funcs, ranges = table_symbols(dtable, isa, bias)
        elif tables.symtab is not None:
            funcs, ranges = table_symbols(tables.symtab, isa, bias)
        if not funcs and tables.dynsym is not None:
            funcs = _one_name_per_address(table_symbols(tables.dynsym, isa, bias)[0])
        stubs = plt_symbols(elf, isa, bias, tables.dynsym)
        funcs += stubs
        if isa.plt is not None and isa.plt.data[1]:
            off, size = isa.plt.data
            ranges = ranges + [(s.start + off, s.start + off + size) for s in stubs]
    return funcs, ranges, None if debug is None else str(debug)


class ModuleMap:
    """The modules of one process; `table` and `code` are shared with discovery."""

    def __init__(self, isa: Isa, root: str = "/") -> None:
        self.isa = isa
        self.root = root  # separate debug files are looked up inside it
        self.modules: list[Module] = []
        self.table = SymbolTable([], [])
        self.code: list[tuple[int, bytes]] = []  # (run-time address, bytes) of PF_X data
        self._starts: list[int] = []
        self._owners: dict[str, list[Module]] = {}  # function name → modules defining it
        self.listed = False  # names given on the command line (--symbols) are in the table
        # told of each module added, after its symbols and code (discover/module_store.py)
        self.on_add: list[Callable[[Module], None]] = []

    def add(self, image: Image, bias: int) -> Module:
        """A module `image` (as parsed: link-time addresses) loaded `bias` bytes up."""
        for old in self.modules:
            if old.path == image.path and old.bias == bias:
                return old
        debug = None
        try:
            funcs, ranges, debug = module_symbols(image.path, self.isa, bias, self.root,
                                                  image.tables)
        except Exception:  # noqa: BLE001 - damaged symbol sections: code without names
            funcs, ranges = [], []
        cls = self.isa.classifiers
        pools = cls is not None and cls.literal is not None
        module = Module(short_name(image.path), image.path, bias,
                        min(s.vaddr for s in image.segments) + bias,
                        max(s.vaddr + s.memsz for s in image.segments) + bias,
                        frozenset(f.name for f in funcs), bool(ranges) or not pools, debug)
        at = bisect.bisect(self._starts, module.start)
        self._starts.insert(at, module.start)
        self.modules.insert(at, module)
        self.code.extend((s.vaddr + bias, s.data) for s in image.segments if s.flags & PF_X)
        self.table.extend(funcs, ranges)
        self._qualify(module)
        for told in self.on_add:
            told(module)
        return module

    def _qualify(self, module: Module) -> None:
        """Names now defined by two modules become `module:func` in both."""
        shared: set[str] = set()
        for name in module.names:
            owners = self._owners.setdefault(name, [])
            owners.append(module)
            if len(owners) >= 2:
                shared.add(name)
        renames: dict[tuple[int, str], str] = {}
        if shared:  # (one walk over the table for all of them)
            for f in self.table.funcs:
                if f.name in shared:
                    owner = self.module_of(f.start)
                    if owner is not None:
                        renames[(f.start, f.name)] = f"{owner.name}:{f.name}"
        if renames:
            self.table.rename(renames)

    def module_of(self, addr: int) -> Module | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.modules[i].end:
            return self.modules[i]
        return None

    def add_listed(self, funcs: list[FuncSymbol]) -> None:
        """Symbols given on the command line (`--symbols`), at run-time addresses."""
        self.listed = self.listed or bool(funcs)
        self.table.extend(funcs, [])

    def code_known(self, addr: int) -> bool:
        """Is what is code around addr known (Module.code_known)?"""
        module = self.module_of(addr)
        return module is not None and module.code_known

    def exec_mapped(self, host_path: str, where: int, offset: int) -> Module | None:
        """The Linux layer mapped `offset` of a file at `where` with PROT_EXEC: if it is an
        executable PT_LOAD of an ELF object of this ISA, the object is a module."""
        try:
            image = load_image(host_path, dynamic=True)
        except EmutraceError:
            return None  # not an ELF object we can read: code without symbols
        if image.isa.name != self.isa.name:
            return None
        for seg in image.segments:
            if seg.flags & PF_X and seg.offset & ~(PAGE - 1) == offset:
                return self.add(image, where - (seg.vaddr & ~(PAGE - 1)))
        return None

    def resolve_name(self, spec: str) -> str | None:
        """The name the trace shows for `func` or `module:func` (module: `libc` or
        `libc.so.6`), or None when no module defines it."""
        if self.table.by_name(spec) is not None:
            return spec
        mod, sep, func = spec.rpartition(":")
        if not sep:
            return None
        for module in self.modules:
            if mod in (module.name, os.path.basename(module.path)) and func in module.names:
                qualified = f"{module.name}:{func}"
                return qualified if self.table.by_name(qualified) is not None else func
        return None
