"""Function symbols as discovery needs them: the ISA-mode bit of the value (ARM Thumb), the
ELFv2 local entry (st_other bits 5–7), the mapping symbols that mark data in code, and the
executable sections (SHF_EXECINSTR) that bound a function's code.

Why sections: an executable PT_LOAD segment often holds read-only data too (s390x, ppc and
others link `.rodata` into the text segment), so a symbol of size 0 at the end of `.text`
(crti/crtn's `_fini`) or a sweep past a symbol's end must stop where the executable section
ends, never decode `.rodata` as code (a jump table read as `br %r15` got a probe written into
it: the program then jumped through a table entry holding the breakpoint bytes)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from emutrace.discover.ifunc_stubs import ifunc_stubs
from emutrace.discover.memo import file_key, kept
from emutrace.elf import Image
from emutrace.elf_tables import SHN_UNDEF, STT_FUNC, ElfSymbol
from emutrace.isa.base import Isa


@dataclass(frozen=True)
class FuncSymbol:
    name: str
    start: int  # first byte of code (bit 0 cleared on Thumb ISAs)
    size: int
    alt: bool  # bit 0 of st_value was set: Thumb code
    local_offset: int  # ELFv2 local entry − global entry (0 when there is one entry)
    part_of: str | None = None  # a cold partition (`f.cold`, `f.cold.1`): the function f

    @property
    def extent(self) -> int:
        """Bytes from start that name this function: its size, at least its first byte and
        its local entry (an ELFv2 symbol of size 0 is still entered at start + offset)."""
        return max(self.size, self.local_offset + 1)


def _partition_of(name: str) -> str | None:
    """GCC's -freorder-blocks-and-partition moves the unlikely blocks of f into a separate
    local symbol named `f.cold` (`f.cold.N` when several): a part of f reached by jumps, not
    an entry (GCC doc, -freorder-blocks-and-partition; gcc/final.cc names it)."""
    head, sep, tail = name.partition(".cold")
    if sep and head and (not tail or tail[0] == "." and tail[1:].isdigit()):
        return head
    return None


def _local_offset(value: int) -> int:
    """ELFv2 ABI §3.4.1, st_other bits 5–7: 0 and 1 mean one entry, 2–6 mean 2**v bytes."""
    return 1 << value if 2 <= value <= 6 else 0


@dataclass
class SymbolTable:
    funcs: list[FuncSymbol]
    data_ranges: list[tuple[int, int]]  # [start, end) of data in code ($d mapping symbols)
    # [start, end) of every SHF_EXECINSTR section (empty: no section headers, segments rule)
    code_sections: list[tuple[int, int]] = field(default_factory=list)

    # bumped by every change (extend, rename): holders of derived data can tell
    generation: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        self.funcs.sort(key=lambda f: (f.start, -f.size, f.name))
        self.data_ranges.sort()
        self._starts = [f.start for f in self.funcs]
        # _reach[i]: the furthest end of funcs[0..i], so a miss stops walking back at once
        self._reach: list[int] = []
        furthest = 0
        for f in self.funcs:
            furthest = max(furthest, f.start + f.extent)
            self._reach.append(furthest)
        self._data_starts = [d[0] for d in self.data_ranges]
        self.generation += 1

    def extend(self, funcs: list[FuncSymbol], data_ranges: list[tuple[int, int]]) -> None:
        """Add the symbols of a module mapped later (a dynamic program's library)."""
        self.funcs.extend(funcs)
        self.data_ranges.extend(data_ranges)
        self._index()

    def rename(self, names: dict[tuple[int, str], str]) -> None:
        """New names for functions, keyed by (start, old name): module-qualified
        `lib:func` where two modules define the same name."""
        funcs = self.funcs
        for i, f in enumerate(funcs):  # (only those renamed made again: ~5,000 in libc)
            name = names.get((f.start, f.name))
            if name is not None:
                funcs[i] = replace(f, name=name)
        self._index()

    def containing(self, addr: int) -> FuncSymbol | None:
        """The function whose [start, start+size) holds addr (a sized one wins)."""
        i = bisect.bisect_right(self._starts, addr) - 1
        reach = self._reach
        while i >= 0 and reach[i] > addr:  # (no symbol at or before i reaches addr: stop)
            f = self.funcs[i]
            if f.start <= addr < f.start + f.extent:
                return f
            i -= 1
        return None

    def entry_name(self, addr: int) -> str | None:
        """The name of the function entered at addr: its start, or its ELFv2 local entry
        (calls within a module enter there: ELFv2 ABI §3.4.1); None elsewhere."""
        f = self.containing(addr)
        if f is None or addr not in (f.start, f.start + f.local_offset):
            return None
        return f.name

    def namer(self, code_mask: int = ~0, offsets: bool = False) -> Callable[[int], str]:
        """How every trace names an address (the one namer: `run`'s text, `diff`, the
        agreement text).  code_mask is the ISA's (`Isa.code_mask`: ARM's Thumb bit 0);
        an address in no function is hex; inside one, its name, or with offsets
        `name+0x1c` where it is not an entry."""
        def name(addr: int) -> str:
            code = addr & code_mask
            f = self.containing(code)
            if f is None:
                return f"{code:#x}"
            if not offsets or code in (f.start, f.start + f.local_offset):
                return f.name
            return f"{f.name}+{code - f.start:#x}"
        return name

    def next_start(self, addr: int) -> int | None:
        i = bisect.bisect_right(self._starts, addr)
        return self._starts[i] if i < len(self._starts) else None

    def section_end(self, addr: int) -> int | None:
        """End of the executable section holding addr; addr itself when section headers
        exist and none holds it (not code); None without section headers."""
        if not self.code_sections:
            return None
        for start, end in self.code_sections:
            if start <= addr < end:
                return end
        return addr

    def in_data(self, addr: int) -> bool:
        i = bisect.bisect_right(self._data_starts, addr) - 1
        return i >= 0 and addr < self.data_ranges[i][1]

    def data_after(self, addr: int) -> int:
        """Start of the first `$d` data range above addr (a very large number if none)."""
        i = bisect.bisect_right(self._data_starts, addr)
        return self._data_starts[i] if i < len(self._data_starts) else 1 << 64

    def by_name(self, name: str) -> FuncSymbol | None:
        for f in self.funcs:
            if f.name == name:
                return f
        return None


def _from_image(image: Image) -> SymbolTable:
    """The functions the Image itself lists: for files without a .symtab (raw firmware, a
    stripped kernel) whose symbols came from elsewhere (`run --symbols`)."""
    entries = [(s, *image.isa.entry_of(s.addr)) for s in image.symbols if s.kind == "func"]
    return SymbolTable([FuncSymbol(s.name, start, s.size, alt, 0, _partition_of(s.name))
                        for s, start, alt in entries], [])


def read_symbols(image: Image) -> SymbolTable:
    """The image's function symbols at its run-time addresses (kept for the next run of the
    same file: memo.py).  A dynamic program's image carries its module map: then the one
    table of every module mapped so far (it grows as ld.so maps libraries;
    discover.modules)."""
    if image.modules is not None:
        return image.modules.table
    return kept("symbols", file_key(image.path, image.bias), lambda: _read_symbols(image))


def _read_symbols(image: Image) -> SymbolTable:
    """From the tables the Image read with the file (elf_tables), never the file again."""
    tables = image.tables
    if tables is None or tables.symtab is None:  # raw firmware, no .symtab
        return _from_image(image)
    bias = image.bias
    code = [(start + bias, end + bias) for start, end in tables.code_sections]
    funcs, ranges = table_symbols(tables.symtab, image.isa, bias)
    funcs += [FuncSymbol(name, start, size, False, 0)
              for name, start, size in ifunc_stubs(tables.symtab, tables.iplt, bias)]
    return SymbolTable(funcs, ranges, code)


def table_symbols(table: list[ElfSymbol], isa: Isa, bias: int) -> tuple[
        list[FuncSymbol], list[tuple[int, int]]]:
    """Function symbols and data-in-code ranges of one ELF symbol table, `bias` added."""
    cls = isa.classifiers
    local = cls is not None and cls.local_entry
    thumb = isa.thumb_bit  # (elsewhere a symbol's value is its entry: no entry_of per symbol)
    funcs: list[FuncSymbol] = []
    marks: list[tuple[int, bool]] = []  # (addr, is data) from $d / $a $t $x mapping symbols
    for sym in table:
        if sym.shndx == SHN_UNDEF:
            continue
        name = sym.name
        if name[:1] == "$" and (name in ("$d", "$a", "$t", "$x")
                                or name.startswith(("$d.", "$x.", "$a.", "$t."))):
            marks.append((sym.value + bias, name.startswith("$d")))
            continue
        if sym.type != STT_FUNC or not name:
            continue
        start, alt = isa.entry_of(sym.value + bias) if thumb else (sym.value + bias, False)
        off = _local_offset(sym.other >> 5) if local else 0
        part = _partition_of(name) if ".cold" in name else None
        funcs.append(FuncSymbol(name, start, sym.size, alt, off, part))
    return funcs, data_ranges(marks)


def data_ranges(marks: list[tuple[int, bool]]) -> list[tuple[int, int]]:
    """[start, end) of each `$d` mark: up to the next code mark, else one byte.  Sorted,
    a code mark comes before a `$d` at the same address, so the next code mark is always
    above.  One backward pass (AArch64 glibc has thousands of marks: a forward search per
    `$d` was quadratic)."""
    ranges: list[tuple[int, int]] = []
    next_code: int | None = None
    for addr, is_data in sorted(marks, reverse=True):
        if is_data:
            ranges.append((addr, next_code if next_code is not None else addr + 1))
        else:
            next_code = addr
    ranges.reverse()
    return ranges
