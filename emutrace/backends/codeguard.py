"""Self-reading and self-modifying guest code under patched breakpoints.

A real debugger's breakpoint bytes are visible to the program (it reads `0xCC` where its
call was) and are clobbered or copied by code that rewrites itself.  Under emulation we do
better, with three memory hooks bounded to the executable ranges that hold patch sites
(Unicorn calls Python only for accesses inside those ranges; the cost of the bounded
hooks on every other access is measured in bench/bench_codeguard.py and the README):

* read (before the load): every breakpoint under the bytes read is replaced by the
  original bytes, so the load sees the program's own code; the owner's block hook puts the
  breakpoints back at the next block (``settle``; Unicorn's Python binding has no
  read-after hook).  No translated code is dropped: the instruction running is a load, and
  a site's translated block keeps its trap whatever the bytes in memory say meanwhile.
* write (before the store): the owner is told the range ([lo, hi)) so it can restore the
  original bytes under it (the guest's store then lands on clean bytes) and drop every
  function the store touches: such code is never patched again — it runs as the guest
  wrote it, untraced (re-discovering it from guest memory is not done: discovery decodes
  the file's bytes).  QEMU itself retranslates code a guest store changes.
"""

from __future__ import annotations

from collections.abc import Callable

from emutrace.target.protocol import Target

MAX_BP = 4  # the longest breakpoint encoding of any ISA (AArch64 BRK, ppc tw: 4 bytes)


class CodeGuard:
    def __init__(self, cpu: Target, ranges: Callable[[int], tuple[int, int]],
                 on_write: Callable[[int, int], None], hide_reads: bool = True) -> None:
        """``ranges(addr)`` gives the [lo, hi) range to guard around a patch site (the
        executable file data holding it); ``on_write(lo, hi)`` is called before a guest
        store into a guarded range.  ``hide_reads``: only where breakpoint bytes are
        written (a bounded UC_HOOK_MEM_READ, even one that returns at once, breaks MIPS
        dynamic programs in Unicorn 2.1.4: SIGILL in ld.so; MIPS and RISC-V patch nothing)."""
        self.cpu, self.ranges, self.on_write = cpu, ranges, on_write
        self.hide_reads = hide_reads
        self.sites: dict[int, tuple[bytes, bytes]] = {}  # addr -> (original, breakpoint)
        self.guarded: list[tuple[int, int]] = []  # the write hooks' ranges
        self.read_guarded: list[tuple[int, int]] = []  # the read hooks' (patched ranges)
        self.hidden: list[int] = []  # sites un-patched for the load running now
        self.written: list[tuple[int, int]] = []  # guest-written code, merged ranges
        self.stats = {"guarded_reads": 0, "guarded_writes": 0}
        # called when a load hid breakpoints: an owner whose block hook does not always
        # reach Python (the native engine) asks for the next block then, to `settle`
        self.on_hide: Callable[[], None] = lambda: None
        # called first by either hook: an owner whose state C changes (strict cleanup on the
        # native engine) brings it up to date before a load or store is looked at
        self.before: Callable[[], None] = lambda: None

    # ------------------------------------------------------------ owner's side
    def cover(self, addr: int) -> None:
        """Guard the code range holding addr against stores (a function about to be armed,
        a site)."""
        if not any(lo <= addr < hi for lo, hi in self.guarded):
            lo, hi = self.ranges(addr)
            # (installed once the guest can write there: a read-only text segment needs no
            # hook, whose cost Unicorn puts on every store, target/unicorn_cpu.py)
            self.cpu.hook_code_stores(self._before_write, lo, hi - 1)
            self.guarded.append((lo, hi))

    def patched(self, addr: int, original: bytes, breakpoint: bytes) -> None:
        """A breakpoint was written at addr: its range is guarded against loads too, from
        the first breakpoint written there on (a range of site hooks only — code found by
        descent — has no breakpoint bytes to hide, and a read hook would send every load
        of the segment's read-only data, a static program's tables, to Python)."""
        self.sites[addr] = (original, breakpoint)
        self.cover(addr)
        if self.hide_reads and not any(lo <= addr < hi for lo, hi in self.read_guarded):
            lo, hi = self.ranges(addr)
            self.cpu.hook_mem_read(self._before_read, lo, hi - 1)
            self.read_guarded.append((lo, hi))

    def restored(self, addr: int) -> None:
        self.sites.pop(addr, None)

    def was_written(self, lo: int, hi: int) -> bool:
        """Some byte of [lo, hi) was written by the guest (asked at every site armed: most
        guests write no code, and an empty list needs no generator)."""
        return bool(self.written) and any(a < hi and lo < b for a, b in self.written)

    # ------------------------------------------------------------ hooks
    def _under(self, addr: int, size: int) -> list[int]:
        """Patched sites whose breakpoint bytes overlap [addr, addr + size) (only those: an
        ARM literal pool right after a Thumb site is read without un-patching the site,
        whose write back would drop the translated block the load runs in)."""
        return [a for a in range(addr - MAX_BP + 1, addr + size)
                if a in self.sites and a + len(self.sites[a][1]) > addr]

    def _before_read(self, _engine: object, _access: int, addr: int, size: int, _value: int,
                     _d: object) -> None:
        self.before()
        hits = self._under(addr, size)
        if not hits:
            return
        self.stats["guarded_reads"] += 1
        for a in hits:
            self.cpu.write_code(a, self.sites[a][0])
        self.hidden.extend(hits)
        self.on_hide()

    def settle(self) -> None:
        """Breakpoints hidden for loads go back (the owner calls this at every block)."""
        for a in self.hidden:
            site = self.sites.get(a)
            if site is not None:
                self.cpu.write_code(a, site[1])
        self.hidden = []

    def _before_write(self, _engine: object, _access: int, addr: int, size: int, _value: int,
                      _d: object) -> None:
        self.before()
        self.stats["guarded_writes"] += 1
        lo, hi = addr, addr + size
        if self.written and self.written[-1][1] >= lo and self.written[-1][0] <= hi:
            a, b = self.written[-1]  # memcpy writes in order: one growing range
            self.written[-1] = (min(a, lo), max(b, hi))
        else:
            self.written.append((lo, hi))
        self.on_write(lo, hi)
