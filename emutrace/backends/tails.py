"""When is a jump a tail call, and when is it a return?  One rule for every backend, so that
they agree by construction.

Tail call: a jump whose target is a known function entry — a symbol's entry (ELFv2: or its
local entry), or an address an earlier call went to — and not the entry of the function
running now (a loop back to its own start).  Without symbols, entries are learnt from calls.
A cold partition (`f.cold`, see discover.symbols) is a part of its function, not an entry.

Return through an alternate link register: where the ISA lets a call leave its return
address in a register other than the usual one (RISC-V `jal t0, __riscv_save_N` returns with
`jr t0`), the jump through it is classified `maybe_return`; it is a return exactly when it
goes to the return address of the running frame's call, and a jump otherwise (a tail call
through that register, as `c.jr t0` in hand-written code).

Taken or not (`TailRule.taken`): the one rule int3, step, bts and btf resolve a transfer
with, once the address the CPU went to is known.
"""

from __future__ import annotations

from emutrace.discover.symbols import SymbolTable
from emutrace.isa.base import FlowKind

_ALWAYS_LEAVE = (FlowKind.CALL, FlowKind.RETURN)


class TailRule:
    def __init__(self, symbols: SymbolTable, code_mask: int) -> None:
        self.mask = code_mask  # the ISA's (isa.base.Isa.code_mask): ARM's bit 0 is no address
        self.entries: set[int] = set()
        self.symbols = symbols
        self._generation = -1  # of the symbol table when its entries were last taken
        self._take_entries()
        # per open call: entry of the running function, return address of the call
        self.frames: list[int] = []
        self.return_addrs: list[int | None] = []

    def _take_entries(self) -> None:
        """The table's entries (again when it grew: a dynamic program's library mapped)."""
        if self._generation == self.symbols.generation:
            return
        self._generation = self.symbols.generation
        for f in self.symbols.funcs:
            if f.part_of is None:
                self.entries.update((f.start, f.start + f.local_offset))

    def taken(self, kind: FlowKind, conditional: bool, maybe_return: bool, target: int,
              fallthrough: int) -> FlowKind | None:
        """Which transfer a call, return or jump of this kind was, the CPU having gone
        on to target: None if it was not taken (it fell through: a conditional one, or a
        call or return to the next instruction, which a call does only to read the PC;
        an unconditional jump there is taken — a function may start right there).
        Otherwise its kind, as this rule sees it: a `maybe_return` jump to the running
        call's return address is a RETURN, a return into a function's entry a JUMP."""
        if target == fallthrough and (conditional or kind in _ALWAYS_LEAVE):
            return None
        if maybe_return and self.returns_to(target):
            return FlowKind.RETURN  # `jr t0` back to where `jal t0` came from
        if kind is FlowKind.RETURN and self.enters(target):
            return FlowKind.JUMP  # a return into a function's entry (i386 ld.so resolver)
        return kind

    def called(self, target: int, return_addr: int | None = None) -> None:
        code = target & self.mask
        self.entries.add(code)
        self.frames.append(code)
        self.return_addrs.append(None if return_addr is None else return_addr & self.mask)

    def returned(self) -> None:
        if self.frames:
            self.frames.pop()
            self.return_addrs.pop()

    def returns_to(self, target: int) -> bool:
        """Does a jump to target return from the running frame (to its call's return
        address)?  Only asked of jumps the ISA classifies `maybe_return`."""
        return bool(self.return_addrs) and self.return_addrs[-1] == target & self.mask

    def enters(self, target: int) -> bool:
        """Does a return go into a function's entry rather than back to the running call's
        return address?  Then it is a jump: i386's lazy-binding resolver ends with
        `ret $0xc` into the function it bound (glibc sysdeps/i386/dl-trampoline.S)."""
        code = target & self.mask
        if self.return_addrs and self.return_addrs[-1] == code:
            return False
        if code not in self.entries:
            self._take_entries()
        return code in self.entries

    def is_tail(self, target: int) -> bool:
        """Decide and, for a tail call, make the target the running function."""
        code = target & self.mask
        if code not in self.entries:
            self._take_entries()
        if code not in self.entries or (self.frames and self.frames[-1] == code):
            return False
        if self.frames:
            self.frames[-1] = code
        return True
