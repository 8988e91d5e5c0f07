"""The oracle of the optimised tier (testbins `calls.<level>.instr`, README "Optimised tier"):
the binary's own record of `> function site` lines, reduced to the calls that happened at the
machine level, as canonical text; and emutrace's trace of the same binary in the same terms.

An event whose site (the hook's return address, minus one to stand inside the hook's call)
lies, innermost, in a DWARF `DW_TAG_inlined_subroutine` of the function it names comes from
a copy of the function the compiler inlined (into another function, or into itself:
recursive inlining): no call instruction ran, so it is dropped.  The DWARF inline ranges are
the compiler's own account, independent of emutrace's discovery.  Names are compared
without clone suffixes on both sides.  The profiling hooks (`__cyg_profile_func_*`) and
everything they call are not in the record, so they are not kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from elftools.elf.elffile import ELFFile

from emutrace.discover.symbols import SymbolTable, read_symbols
from emutrace.elf import load_image
from emutrace.trace.canonical import canonical_text, instr_records
from emutrace.trace.events import Record

_LINE = re.compile(r"([<>]) 0x([0-9a-f]+) 0x([0-9a-f]+)")


def base(name: str) -> str:
    """`fact.constprop.0` → `fact`: GCC's clone and partition suffixes follow a dot."""
    return name.split(".", 1)[0]


def symbols(path: str) -> SymbolTable:
    return read_symbols(load_image(path))


def namer(table: SymbolTable, thumb: bool) -> Callable[[int], str]:
    def name(addr: int) -> str:
        f = table.containing(addr & ~1 if thumb else addr)
        return base(f.name) if f is not None else hex(addr)
    return name


def _origin_name(die) -> str:  # type: ignore[no-untyped-def]
    while "DW_AT_name" not in die.attributes:
        ref = next((a for a in ("DW_AT_abstract_origin", "DW_AT_specification")
                    if a in die.attributes), None)
        if ref is None:
            return "?"
        die = die.get_DIE_from_attribute(ref)
    return str(die.attributes["DW_AT_name"].value.decode())


def _ranges(dwarf, cu, die) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    attrs = die.attributes
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        lo, hi = attrs["DW_AT_low_pc"].value, attrs["DW_AT_high_pc"]
        return [(lo, hi.value if hi.form == "DW_FORM_addr" else lo + hi.value)]
    if "DW_AT_ranges" not in attrs:
        return []
    top = cu.get_top_DIE().attributes
    base_addr = top["DW_AT_low_pc"].value if "DW_AT_low_pc" in top else 0
    out = []
    for entry in dwarf.range_lists().get_range_list_at_offset(attrs["DW_AT_ranges"].value,
                                                              cu=cu):
        if hasattr(entry, "base_address"):
            base_addr = entry.base_address
            continue
        off = 0 if getattr(entry, "is_absolute", False) else base_addr
        out.append((entry.begin_offset + off, entry.end_offset + off))
    return out


def inlined_ranges(path: str) -> list[tuple[int, int, str]]:
    """(start, end, function name) of every inlined copy, innermost (smallest) first."""
    out = []
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        if not elf.has_dwarf_info():
            return out
        dwarf = elf.get_dwarf_info()
        for cu in dwarf.iter_CUs():
            for die in cu.iter_DIEs():
                if die.tag == "DW_TAG_inlined_subroutine":
                    name = _origin_name(die)
                    out += [(lo, hi, name) for lo, hi in _ranges(dwarf, cu, die)]
    return sorted(out, key=lambda r: r[1] - r[0])


def machine_events(record: str, table: SymbolTable, thumb: bool,
                   inlined: list[tuple[int, int, str]]) -> list[tuple[str, int]]:
    """(`>`/`<`, function address) of the record's events that are machine-level calls."""
    name = namer(table, thumb)
    out = []
    for number, line in enumerate(record.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"line {number}: not a record line: {line!r}")
        fn, site = int(m.group(2), 16), int(m.group(3), 16)
        at = (site & ~1 if thumb else site) - 1  # inside the call (Thumb: bit 0 is the mode)
        copy = next((n for lo, hi, n in inlined if lo <= at < hi), None)
        if copy != name(fn):
            out.append((m.group(1), fn))
    return out


def oracle(record: str, path: str, table: SymbolTable,
           thumb: bool) -> tuple[str, set[str]]:
    """The canonical text of the record's machine-level calls, and the names it keeps."""
    events = machine_events(record, table, thumb, inlined_ranges(path))
    name = namer(table, thumb)
    keep = {name(fn) for _, fn in events}
    return canonical_text(instr_records(events), name, keep), keep


def traced(records: list[Record], table: SymbolTable, thumb: bool, keep: set[str]) -> str:
    return canonical_text(records, namer(table, thumb), keep)
