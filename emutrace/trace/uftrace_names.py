"""Function names as uftrace 0.13 gives them from a data directory's `.sym` file (pure):
the writer keys its argument specs by these names, the viewers print them."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

SYM_END = "__sym_end"  # the sentinel after the last function (utils/symbol.c is_symbol_end)


def uftrace_symbolizer(symbols: Iterable[tuple[int, str]]) -> Callable[[int], str]:
    """(address, name) pairs in file order -> symbolize(addr), as uftrace 0.13 reads a `.sym`
    file (utils/symbol.c load_symbol_file): of several names at one address the first in
    the file; an address takes the name of the symbol it lies in, up to the next symbol's
    start (a PLT slot inside `_init` is `_init`); `__sym_end` only ends the last range;
    outside every range `<hex>` (utils/symbol.c symbol_getname)."""
    first: dict[int, str] = {}
    for addr, name in symbols:
        first.setdefault(addr, name)
    ordered = sorted(first)
    labels = [first[a] for a in ordered]

    def symbolize(addr: int) -> str:
        i = bisect.bisect_right(ordered, addr) - 1
        if i < 0 or labels[i] == SYM_END:
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
