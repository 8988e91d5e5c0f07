"""A function from its symbol: a linear sweep over [start, start + size)."""

from __future__ import annotations

from emutrace.discover.decode import Decoder
from emutrace.discover.model import Function, Site
from emutrace.discover.sites import site_for
from emutrace.discover.symbols import FuncSymbol, SymbolTable


def extent(sym: FuncSymbol, table: SymbolTable, decoder: Decoder) -> int:
    """End of the function: its size, or up to the next symbol when the size is 0 (asm)."""
    if sym.size:
        return sym.start + sym.size
    nxt = table.next_start(sym.start)
    end = decoder.code_end(sym.start)
    return min(nxt, end) if nxt is not None and nxt > sym.start else end


def from_symbol(sym: FuncSymbol, table: SymbolTable, decoder: Decoder) -> Function:
    end = extent(sym, table, decoder)
    sites: list[Site] = []

    def inside(a: int) -> bool:
        return sym.start <= a < end

    addr = sym.start
    while addr < end:
        if table.in_data(addr):
            addr += decoder.align(sym.alt)
            continue
        insn = decoder.insn_at(addr, sym.alt)
        if insn is None:
            addr += decoder.align(sym.alt)
            continue
        site = site_for(decoder, insn, inside)
        if site is not None:
            sites.append(site)
        addr += insn.size
    return Function(sym.name, sym.start, end, tuple(sites), sym.alt, sym.local_offset)
