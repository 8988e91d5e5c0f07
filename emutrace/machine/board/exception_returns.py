"""Exception returns seen by tracing (kernel images, shadow-stack policy 6).

Unicorn runs `eret`/`mret`/`sret`/`iret` natively and reports nothing, and the backends'
classifiers do not know them (they are neither calls nor returns).  So when an exception
enters a vector, the memory around it (the `WINDOW` that holds the vector, and the next
one: handlers sit next to their vectors) is searched once for the ISA's exception-return
encodings (`KernelSupport.returns`: whole instructions, or opcode bytes that operands
follow), and each match gets a one-address code hook.  A hook fires only where an
instruction starts; it checks that the instruction there begins with one of the encodings
(a match inside data or inside a longer instruction never fires as one), then
tells the backend, which emits `TrapReturn` in order with its own events.

Code the MMU maps elsewhere than its physical address (a Linux image at its link address:
linked_image.py) is searched through `physical`, the image's own translation.  Not covered:
an exception return more than a window away from the vector that was taken (its exception
frame then stays open until the end of the run).  Where the search finds no return at all
(a vector outside RAM, at a virtual address no translation covers), no exception frame is
pushed: the handler's calls nest under the interrupted frame."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.isa.kernel import KernelSupport
from emutrace.target.protocol import Target

WINDOW = 0x10000  # 64 KiB


class ExceptionReturns:
    def __init__(self, cpu: Target, support: KernelSupport, ram: list[tuple[int, int]],
                 returned: Callable[[int], None],
                 physical: Callable[[int], int | None] | None = None) -> None:
        self.cpu, self.encodings, self.align = cpu, support.returns, support.returns_align
        # the physical address of a virtual one (None: not translated, virtual = physical)
        self.physical = physical
        self.ram = ram  # (base, size): only RAM is searched (a device read has effects)
        self.returned = returned
        self.windows: set[int] = set()
        self.hooked: set[int] = set()

    def near(self, vector: int) -> bool:
        """Hook the exception returns in the window of vector and the next one; False if
        there is none there (then no exception frame is pushed: it would never close)."""
        if not self.encodings:
            return False
        first = vector // WINDOW * WINDOW
        for window in (first, first + WINDOW):
            if window in self.windows:
                continue
            self.windows.add(window)
            at_ram = self._at(window)
            if not any(base <= at_ram and at_ram + WINDOW <= base + size
                       for base, size in self.ram):
                continue  # not RAM (a device, nothing): no code to search
            blob = self.cpu.mem_read(at_ram, WINDOW)
            for encoding in self.encodings:
                at = blob.find(encoding)
                while at >= 0:
                    if at % self.align == 0:
                        self._hook(window + at)
                    at = blob.find(encoding, at + 1)
        return any(first <= addr < first + 2 * WINDOW for addr in self.hooked)

    def _at(self, addr: int) -> int:
        """Where addr's bytes are in RAM (-1: nowhere)."""
        if self.physical is None:
            return addr
        at = self.physical(addr)
        return -1 if at is None else at

    def _hook(self, addr: int) -> None:
        if addr in self.hooked:
            return
        self.hooked.add(addr)
        self.cpu.hook_code(self._on_return, addr, addr)
        self.cpu.drop_code_cache(addr, addr + 4)  # translated before the hook existed

    def _on_return(self, _engine: object, addr: int, size: int, _d: object) -> None:
        insn = self.cpu.mem_read(self._at(addr), size)
        if any(insn.startswith(encoding) for encoding in self.encodings):
            self.returned(addr)
