"""When is a jump a tail call?  One rule for every backend, so that they agree by
construction: a jump whose target is a known function entry — a symbol's entry (ELFv2: or
its local entry), or an address an earlier call went to — and not the entry of the function
running now (a loop back to its own start).  Without symbols, entries are learnt from calls.
"""

from __future__ import annotations

from emutrace.discover.symbols import SymbolTable


class TailRule:
    def __init__(self, symbols: SymbolTable, thumb_bit: bool) -> None:
        self.mask = ~1 if thumb_bit else ~0
        self.entries: set[int] = set()
        for f in symbols.funcs:
            self.entries.update((f.start, f.start + f.local_offset))
        self.frames: list[int] = []  # entry of the running function, per open call

    def called(self, target: int) -> None:
        code = target & self.mask
        self.entries.add(code)
        self.frames.append(code)

    def returned(self) -> None:
        if self.frames:
            self.frames.pop()

    def is_tail(self, target: int) -> bool:
        """Decide and, for a tail call, make the target the running function."""
        code = target & self.mask
        if code not in self.entries or (self.frames and self.frames[-1] == code):
            return False
        if self.frames:
            self.frames[-1] = code
        return True
