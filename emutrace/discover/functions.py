"""A function from its symbol: a linear sweep over [start, start + size), bounded by the
executable file data that holds it, and continued past the symbol's end while its code
falls through.

Bound: a symbol's extent is cut at the end of the executable section (SHF_EXECINSTR) that
contains its start, and of the executable segment's file data (nothing outside it is code
the CPU could run from the file; without section headers the segment alone bounds it); a
symbol whose start is in neither has no code at all.  A corrupt or hostile `st_size` (2^63)
therefore costs nothing, and a size-0 symbol at the end of a section (crtn's `_fini`) never
sweeps the read-only data that the linker put after it in the same segment.

Shared tails: code may run past its symbol's end into the next one — GCC's out-of-line
register save/restore routines (ppc `_savegpr0_14` … `_savegpr0_31`, `_restgpr0_N`: one
chain of stores entered at any of its symbols, ending in the single `blr` of the last one;
ELFv2 ABI §2.3.3.1 / the Power ABI's "save and restore functions").  When the last
instruction of the extent falls through (no return, jump, trap or call — a call at the very
end is to a `noreturn` function — and no system call: one at the very end is `exit`), the
sweep goes on through the following code until an
unconditional return or jump ends it, so the return that ends the chain is one of the
function's sites.
"""

from __future__ import annotations

from emutrace.discover.decode import Decoder
from emutrace.discover.model import Function, Site
from emutrace.discover.sites import resolve, site_for
from emutrace.discover.symbols import FuncSymbol, SymbolTable
from emutrace.isa.base import FlowKind

MAX_TAIL_INSNS = 4096  # the longest shared tail followed past a symbol's end


def code_limit(sym: FuncSymbol, table: SymbolTable, decoder: Decoder) -> int:
    """End of the code that holds the symbol's start: its executable section, within the
    executable file data (discover.symbols: `.rodata` may share the text segment)."""
    end = decoder.code_end(sym.start)
    section = table.section_end(sym.start)
    return end if section is None else min(end, section)


def extent(sym: FuncSymbol, table: SymbolTable, decoder: Decoder) -> int:
    """End of the function: its size, or up to the next symbol when the size is 0 (asm);
    never past the executable section and file data holding its start."""
    end = code_limit(sym, table, decoder)
    if sym.size:
        return min(sym.start + sym.size, end)
    nxt = table.next_start(sym.start)
    return min(nxt, end) if nxt is not None and nxt > sym.start else end


def _falls_through(decoder: Decoder, addr: int, alt: bool) -> bool:
    """Does the instruction at addr continue with the next one, always or sometimes?"""
    insn = decoder.insn_at(addr, alt)
    if insn is None or insn.raw == decoder.isa.syscalls.instruction:
        return False  # (a system call that ends a symbol is `exit`: `_start` in asm)
    flow, _ = resolve(decoder, insn)
    return flow.kind in (FlowKind.NONE, FlowKind.EXECUTE) or (
        flow.kind is not FlowKind.CALL and flow.conditional)


def from_symbol(sym: FuncSymbol, table: SymbolTable, decoder: Decoder) -> Function:
    end = extent(sym, table, decoder)
    sites: list[Site] = []
    limit = code_limit(sym, table, decoder)
    last: int | None = None  # the last instruction swept (None after data or bad bytes)
    classify = decoder.cls.classify

    def inside(a: int) -> bool:
        return sym.start <= a < end

    addr = sym.start
    tail = 0
    while addr < end:
        if table.in_data(addr):
            last = None
            addr += decoder.align(sym.alt)
        else:
            # the stretch of code up to the next `$d` data or the end, decoded at once; the
            # instructions no site can come from left out (the ISA's SweepFilter)
            stop = min(end, table.data_after(addr))
            # (past bytes where nothing decodes; `final` None when it ended on such)
            kept, addr, final = decoder.scan(addr, stop, sym.alt, sym.start, end)
            for insn in kept:
                flow = classify(insn)
                if flow.kind is not FlowKind.NONE:  # (no site falls through: site_for)
                    site = site_for(decoder, insn, inside, flow)
                    if site is not None:
                        sites.append(site)
            last = None if final is None else final.addr
        if addr >= end and last is not None and tail < MAX_TAIL_INSNS and addr < limit \
                and not decoder.cls.delay_slot and _falls_through(decoder, last, sym.alt):
            end = addr + 1  # one more instruction: the code runs on into the next symbol
            tail += 1
    end = max(end, addr) if tail else end
    return Function(sym.name, sym.start, end, tuple(sites), sym.alt, sym.local_offset)
