"""The guest's address space: which pages are mapped, where new mappings go, brk.

Unicorn keeps the real memory; this keeps the bookkeeping Linux needs on top of it (free-gap
search for mmap, the brk area) and talks to the CPU only through map/unmap/protect calls.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol

PAGE = 0x1000
# --max-memory's default: guest mappings (image, stack, brk, mmap) beyond this are ENOMEM,
# so a malloc loop cannot take the host's memory (Unicorn allocates what is mapped)
DEFAULT_MAX_MEMORY = 4 << 30
# Debian's vm.mmap_min_addr (65536): below it MAP_FIXED is EPERM, and the run loop's
# NULL-pointer fault hook (target/unicorn_run.NULL_REGION) relies on it staying unmapped
MMAP_MIN_ADDR = 0x10000


class OutOfMemory(Exception):
    """A mapping would pass the memory cap, or Unicorn could not allocate it (ENOMEM)."""


def page_down(x: int) -> int:
    return x & ~(PAGE - 1)


def page_up(x: int) -> int:
    return (x + PAGE - 1) & ~(PAGE - 1)


class MemoryPort(Protocol):
    def mem_map(self, addr: int, size: int, perms: int = 7) -> None: ...

    def mem_unmap(self, addr: int, size: int) -> None: ...

    def mem_protect(self, addr: int, size: int, perms: int) -> None: ...

    def mem_write(self, addr: int, data: bytes) -> None: ...

    def mem_read(self, addr: int, size: int) -> bytes: ...


@dataclass(frozen=True)
class Layout:
    """Where things go, per word size (chosen to fit every ISA's emulated address width)."""

    pie_base: int  # load bias for static-PIE executables
    mmap_top: int  # mmap allocates top-down below this
    mmap_bottom: int
    stack_top: int
    stack_size: int
    # the end of the user address space (Linux's TASK_SIZE role): a mapping that would
    # reach past it is ENOMEM, as mm/mmap.c's get_unmapped_area answers; x86_64's 47 bits
    # bound every 64-bit ISA here, 32-bit ones end at 4 GiB
    user_top: int = 1 << 47

    @staticmethod
    def for_word_size(word: int) -> Layout:
        if word == 8:
            return Layout(0x10_0000_0000, 0x7E_0000_0000, 0x20_0000_0000, 0x7F_0000_0000,
                          8 << 20)
        # 32-bit: stay below 0x80000000 (MIPS kseg0 starts there)
        return Layout(0x0040_0000, 0x7700_0000, 0x1000_0000, 0x7FFF_0000, 8 << 20, 1 << 32)


class AddressSpace:
    """Sorted, non-overlapping [start, end) intervals of mapped pages."""

    def __init__(self, cpu: MemoryPort, layout: Layout,
                 max_memory: int = DEFAULT_MAX_MEMORY) -> None:
        self.cpu = cpu
        self.layout = layout
        self.max_memory = max_memory
        self.total = 0  # bytes mapped
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.brk_start = 0
        self.brk = 0

    # ------------------------------------------------------------ bookkeeping
    def mapped(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of [start, end) that are mapped."""
        out = []
        i = max(bisect.bisect_right(self._starts, start) - 1, 0)
        while i < len(self._starts) and self._starts[i] < end:
            lo, hi = max(self._starts[i], start), min(self._ends[i], end)
            if lo < hi:
                out.append((lo, hi))
            i += 1
        return out

    def is_free(self, start: int, end: int) -> bool:
        return not self.mapped(start, end)

    def _add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._ends.insert(i, end)
        self.total += end - start

    def _remove(self, start: int, end: int) -> None:
        pieces = []
        for s, e in zip(self._starts, self._ends, strict=True):
            if e <= start or s >= end:
                pieces.append((s, e))
                continue
            if s < start:
                pieces.append((s, start))
            if e > end:
                pieces.append((end, e))
        self._starts = [p[0] for p in pieces]
        self._ends = [p[1] for p in pieces]
        self.total = sum(e - s for s, e in pieces)

    def _allocate(self, start: int, size: int, perms: int, replaced: int = 0) -> None:
        """Map fresh pages in Unicorn, within the cap; OutOfMemory otherwise."""
        if self.total - replaced + size > self.max_memory:
            raise OutOfMemory(f"{size:#x} bytes more would pass the memory cap")
        try:
            self.cpu.mem_map(start, size, perms)
        except Exception as e:  # Unicorn's UC_ERR_NOMEM (this layer imports no emulator)
            if "NOMEM" in str(e) or "memory" in str(e).lower():
                raise OutOfMemory(str(e)) from None
            raise

    # ------------------------------------------------------------ operations
    def map(self, start: int, size: int, perms: int) -> None:
        start, end = page_down(start), page_up(start + size)
        if end > self.layout.user_top:  # fuzz-found: Unicorn's UC_ERR_ARG past 2^64
            raise OutOfMemory(f"[{start:#x}, {end:#x}) passes the user address space")
        replaced = self.mapped(start, end)
        if self.total - sum(hi - lo for lo, hi in replaced) + end - start > self.max_memory:
            raise OutOfMemory(f"{end - start:#x} bytes more would pass the memory cap")
        for lo, hi in replaced:  # MAP_FIXED semantics: replace what is there
            self.unmap(lo, hi - lo)
        self._allocate(start, end - start, perms)
        self._add(start, end)

    def unmap(self, start: int, size: int) -> None:
        start, end = page_down(start), page_up(start + size)
        for lo, hi in self.mapped(start, end):
            self.cpu.mem_unmap(lo, hi - lo)
        self._remove(start, end)

    def protect(self, start: int, size: int, perms: int) -> bool:
        start, end = page_down(start), page_up(start + size)
        parts = self.mapped(start, end)
        if sum(hi - lo for lo, hi in parts) != end - start:
            return False
        for lo, hi in parts:
            self.cpu.mem_protect(lo, hi - lo, perms)
        return True

    def find_free(self, size: int, hint: int = 0) -> int | None:
        size = page_up(size)
        if hint and self.layout.mmap_bottom <= hint and self.is_free(hint, hint + size):
            return page_down(hint)
        top = self.layout.mmap_top
        while top - size >= self.layout.mmap_bottom:
            blockers = self.mapped(top - size, top)
            if not blockers:
                return top - size
            top = page_down(blockers[0][0])
        return None

    # ------------------------------------------------------------ brk
    def init_brk(self, addr: int) -> None:
        self.brk_start = self.brk = page_up(addr)

    def set_brk(self, new: int) -> int:
        """brk(2): grow or shrink the heap; returns the (possibly unchanged) break."""
        if new < self.brk_start:
            return self.brk
        old_top, new_top = page_up(self.brk), page_up(new)
        if new_top > old_top:
            if not self.is_free(old_top, new_top):
                return self.brk
            try:
                self._allocate(old_top, new_top - old_top, 3)
            except OutOfMemory:
                return self.brk  # brk(2) fails by returning the old break
            self._add(old_top, new_top)
        elif new_top < old_top:
            self.unmap(new_top, old_top - new_top)
        self.brk = new
        return new
