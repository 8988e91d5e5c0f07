"""Function names as uftrace 0.13 gives them from a data directory's `.sym` file (pure):
the writer keys its argument specs by these names, the viewers print them."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

SYM_END = "__sym_end"  # the boundary after the last function (utils/symbol.c is_symbol_end)
FUNC_END = "__func_end"  # a boundary where named code ends before the next symbol starts
# uftrace 0.13 (utils/symbol.c load_module_symbol_file): a line of kind `?` (ST_UNKNOWN) or
# one of these names ends the symbol before it (sets its size) and names nothing itself
END_NAMES = frozenset({SYM_END, FUNC_END, "__dynsym_end"})
BOUNDARY_KIND = "?"


def is_boundary(kind: str, name: str) -> bool:
    """Whether a `.sym` line `address kind name` is a boundary, not a symbol."""
    return kind == BOUNDARY_KIND or name in END_NAMES


def sym_entries(functions: Iterable[tuple[int, int, str]]) -> list[tuple[int, str, str]]:
    """The lines of a `.sym` file, (address, kind, name) in address order, for functions
    (start, end, name) given in the order their names should win at one address: each
    start, and a boundary wherever the code named so far ends before the next start (and
    after the last).  uftrace derives a symbol's size from the next line, so without the
    boundary the unnamed code after a function (a stripped program's own functions, ld.so's
    internals) would be credited to it; with it, uftrace and our reader name that code by
    its address, as `run` does (SymbolTable.containing)."""
    funcs = sorted(functions, key=lambda f: f[0])  # stable: the first name at a start first
    lines: list[tuple[int, str, str]] = []
    reach = None  # the furthest end of the functions written so far
    for start, end, name in funcs:
        end = max(end, start + 1)  # (an ELFv2 local entry of a symbol of size 0: its byte)
        if reach is not None and reach < start:
            lines.append((reach, BOUNDARY_KIND, FUNC_END))
        lines.append((start, "T", name))
        reach = end if reach is None or reach < start else max(reach, end)
    if reach is not None:
        lines.append((reach, BOUNDARY_KIND, SYM_END))
    return lines


def uftrace_symbolizer(symbols: Iterable[tuple[int, str]]) -> Callable[[int], str]:
    """(address, name) pairs in file order -> symbolize(addr), as uftrace 0.13 reads a `.sym`
    file (utils/symbol.c load_module_symbol_file): of several names at one address the
    first in the file; an address takes the name of the symbol it lies in, up to the next
    line's address (a boundary, `END_NAMES`, ends a symbol and names nothing); outside
    every symbol `<hex>` (utils/symbol.c symbol_getname)."""
    first: dict[int, str] = {}
    for addr, name in symbols:
        first.setdefault(addr, name)
    ordered = sorted(first)
    labels = [first[a] for a in ordered]

    def symbolize(addr: int) -> str:
        i = bisect.bisect_right(ordered, addr) - 1
        if i < 0 or labels[i] in END_NAMES:
            return f"<{addr:x}>"
        return labels[i]

    return symbolize


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def printable(name: str, keep: str = "") -> str:
    """`name` safe to print on a terminal and to write as one line of a text file: a
    control character (or any other character Python does not call printable: a line
    separator, a bidi control) is shown escaped, `\\n`, `\\t`, `\\r`, else `\\xNN` /
    `\\uNNNN`.  A name without one is returned unchanged (nearly every name).  The `.sym`
    writer keeps names in this form, and the viewers show every name through it.  `keep`:
    characters left as they are (a tab in a value's text, which `run` prints as a tab)."""
    if name.isprintable():
        return name
    out = []
    for c in name:
        if c.isprintable() or c in keep:
            out.append(c)
        elif c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
    return "".join(out)
