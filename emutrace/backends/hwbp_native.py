"""`hwbp` on the Unicorn native hot path (`--engine native`): backends/hwbp.py's algorithm and
slot policy (`SlotDelivery`, unchanged) on the native int3 backend (backends/int3_native.py)
with hook delivery, its slots installed through `TableSlots` instead of Python code hooks.

What C does:
* an address slot — one site, one instruction (a function with at most N sites) — is an
  entry of C's site table (backends/hooked_sites.py, hotpath.c `hs_*`): the block holding
  the site leaves its transfer pending, the next block resolves it, in C when it can
  (hotpath.c `hs_finish`), as int3's site hooks.  Nothing is written to the guest, and no
  Unicorn hook is added per slot (../shared/DESIGN.md §5: bounded hooks cost linear in
  their number, even in C);
* strict cleanup's switches at those sites are strict.c's (`ns_switch`), which counts what
  `SlotDelivery.arm` counts for each function it arms (strict.c `count_slots`: slot_writes,
  fallbacks, max_slots) and frees a disarmed function's slots; Python replays the journal
  (`StrictInC.replay_journal`) and takes the counts and each function's slots (`_replayed`).

* a stepped span (an address-slot function with more sites than slots: its fall-back) and
  a range slot (s390x PER) are a C code hook over the range (hotpath.c `hs_on_span`, user
  data an `hs_span`), as the reference's Python hook: idle while the function is not armed
  (strict.c's table says), else an instruction that is no armed site counts as `stepped`;
  the span's sites are entries of the table, hit by the block hook as an address slot's.

What stays Python's (the reference's code hooks, through `_on_slot`, counted the same):
* a span with a site C's table cannot watch or a site two functions share: the whole span;
* a site C's table cannot watch (its sp effect unknown, an EXRL target), and a site address
  two functions share (each function's hook there is its own in the reference: an idle
  owner's hook must stay idle while the other's is armed) — `_claim` moves the first
  function's table entry back to a Python hook when a second one claims the address;
* on a Thumb ISA (arm) every slot: strict.c does not switch there, and C's table would
  finish returns without switching.

`native_stats` says how much of a run that was: `python_slot_hits`, `python_stepped` (and
C's: `c_spans`, `c_stepped`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from unicorn.unicorn_const import UC_HOOK_CODE

from emutrace.backends import BackendOptions, descriptors
from emutrace.backends.hwbp import SlotDelivery
from emutrace.backends.int3_native import NativeInt3Backend
from emutrace.discover import Function, Site
from emutrace.elf import Image
from emutrace.native import strictlib
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Event

_IN_TABLE = -1  # Armed.hook of a slot site: nonzero, as a site hook's (strict_native.py)


class TableSlots:
    """SlotDelivery's port (hwbp.SlotPort) on the native int3 backend: address slots in C's
    site table, the rest Python code hooks; what is armed mirrored to strict.c."""

    slots: SlotDelivery

    def __init__(self, backend: NativeInt3Backend) -> None:
        self.b = backend
        self.table = backend.hooked_table
        self.strict = backend.strict_in_c
        self._lib = strictlib.load() if self.strict is not None else None
        self._c_handles: dict[int, int] = {}  # a table entry's handle → its address
        self._c_entry: dict[int, tuple[int, int]] = {}  # address → (owner, handle)
        self._c_spans: set[int] = set()  # the Unicorn handles of C's span hooks
        backend.finishers.append(self._finish)
        self._site_owner: dict[int, int] = {}  # site address → first function installed
        self._shared: set[int] = set()  # site addresses of two functions
        # strict.c's count of switches, read in place, and its value at Python's last look
        self._switches = ctypes.c_uint64.from_address(
            self._lib.ns_switches_at(self.strict.ns)) \
            if self._lib is not None and self.strict is not None else None
        self._seen = -1
        self.counts = backend.more_native_stats
        self.counts.update(python_slot_hits=0, python_stepped=0, slot_entries=0,
                           python_slot_hooks=0, c_spans=0, c_stepped=0)

    def bind(self, slots: SlotDelivery) -> None:
        self.slots = slots
        if self.strict is not None and self._lib is not None:
            self._lib.ns_set_slots(self.strict.ns, slots.slots, int(slots.slot_kind == "range"))
            self.strict.journal_readers.append(self._replayed)

    # ------------------------------------------------------------ SlotPort
    def install(self, func: Function, ranges: list[tuple[int, int]], single: bool) -> list[int]:
        self._claim(func)
        sites = {s.addr: s for s in func.sites} if single else {}
        handles = []
        for lo, hi in ranges:
            site = sites.get(lo)
            if (site is not None and self.table is not None and lo not in self._shared
                    and self.table.watch(site)):
                handles.append(self._entry(func.start, site))
            elif not single and (inside := self._span_sites(func, lo, hi)) is not None:
                handles.extend(self._span(func.start, lo, hi, inside))
            else:
                handles.append(self._hook(lo, lo if single else hi, func.start))
        return handles

    def remove(self, handle: int) -> None:
        if handle in self._c_spans:
            self._c_spans.discard(handle)
            self.b.del_c_hook(handle)  # (its hs_span stays until the table is freed)
            return
        addr = self._c_handles.pop(handle, None)
        if addr is None:
            self.b.cpu.hook_del(handle)
            return
        del self._c_entry[addr]
        assert self.table is not None
        self.table.drop(addr)

    def armed(self, site: Site, func: int) -> None:
        b = self.b
        b.armed[site.addr].hook = _IN_TABLE
        b.idle_hooks.pop(site.addr, None)
        if self.strict is not None:
            self.strict.site_armed(site, func)
        if self.table is not None:
            self.table.active(site.addr, True)

    def disarmed(self, addr: int) -> None:
        # (as a site hook goes idle: strict.c's replay arms it again from idle_hooks)
        self.b.idle_hooks[addr] = _IN_TABLE
        if self.strict is not None:
            self.strict.site_disarmed(addr)
        if self.table is not None:
            self.table.active(addr, False)

    def programmed(self, func: int, slots: int) -> None:
        if self.strict is not None and self._lib is not None:
            self._lib.ns_func_slots(self.strict.ns, func, slots)

    # ------------------------------------------------------------ C's slots
    def _entry(self, owner: int, site: Site) -> int:
        """site, which C's table watches now, as a slot of owner's: its handle."""
        assert self.table is not None
        handle = self.table.new_handle()
        self._c_handles[handle] = site.addr
        self._c_entry[site.addr] = (owner, handle)
        self.counts["slot_entries"] += 1
        return handle

    def _span_sites(self, func: Function, lo: int, hi: int) -> list[Site] | None:
        """The sites of func in [lo, hi] when C can take the span (strict.c says whether
        func is armed; C's table watches each site, none of them shared), else None."""
        table = self.table
        if table is None or self.strict is None:
            return None
        inside = [s for s in func.sites if lo <= s.addr <= hi]
        if any(s.addr in self._shared or not table.can_watch(s) for s in inside):
            return None
        return inside

    def _span(self, owner: int, lo: int, hi: int, inside: list[Site]) -> list[int]:
        """A stepped span or range slot in C: a code hook over [lo, hi] calling hotpath.c's
        `hs_on_span` (which counts `stepped`), its sites entries of the table (the block
        hook's hits, as an address slot's); the handles."""
        table = self.table
        assert table is not None
        data = table.span(owner)
        if not data:
            return [self._hook(lo, hi, owner)]
        for site in inside:
            table.watch(site)
        handles = [self._entry(owner, site) for site in inside]
        handle = self.b.add_c_hook(UC_HOOK_CODE, table.span_hook, data, lo, hi)
        self.b._drop_cache(lo, hi + 1 - lo)  # a hook added after translation never fires
        self._c_spans.add(handle)
        self.counts["c_spans"] += 1
        return [*handles, handle]

    def _finish(self) -> None:
        """C's count of stepped instructions, into the reference's counter."""
        if self.table is not None:
            stepped = self.table.stepped()
            self.b.stats["stepped"] += stepped
            self.counts["c_stepped"] = stepped

    # ------------------------------------------------------------ Python's slots
    def _hook(self, lo: int, end: int, owner: int) -> int:
        self.counts["python_slot_hooks"] += 1
        handle = self.b.cpu.hook_hw(self._on_slot, lo, end, owner)
        self.b._drop_cache(lo, end + 1 - lo)  # a hook added after translation never fires
        return handle

    def _claim(self, func: Function) -> None:
        """func's sites are its own unless another function installed there first: such an
        address is then Python's for both (a table entry of the first is moved to a hook)."""
        for site in func.sites:
            addr = site.addr
            if self._site_owner.setdefault(addr, func.start) == func.start:
                continue
            self._shared.add(addr)
            entry = self._c_entry.get(addr)
            if entry is None or entry[0] == func.start:
                continue
            owner, handle = entry
            self.remove(handle)
            hooks = self.slots.slot_hooks[owner]
            hooks[hooks.index(handle)] = self._hook(addr, addr, owner)
            self.b._armed_now = self.b.cpu.translates_code  # (the block may hold it)

    def _on_slot(self, uc: object, addr: int, size: int, owner: int) -> None:
        """A Python slot hook (a stepped span's is called for every instruction in its
        range): C's switches replayed first when strict.c made any since Python last looked
        (its count read in place, no call), then the reference's handler."""
        b, stats = self.b, self.b.stats
        if self._switches is not None and self._switches.value != self._seen:
            b.drain_c()  # (Python's `armed_funcs` and `armed` are C's again)
            self._seen = self._switches.value
        hits, stepped = stats["hits"], stats["stepped"]
        self.slots._on_slot(uc, addr, size, owner)
        self.counts["python_stepped"] += stats["stepped"] - stepped
        if stats["hits"] != hits:
            self.counts["python_slot_hits"] += 1
            b.refresh_c()  # the pending transfer: Python's block hook resolves it

    # ------------------------------------------------------------ C → Python
    def _replayed(self, last: dict[int, int]) -> None:
        """strict.c armed and disarmed the functions in last: their slots, and what it
        counted, become Python's (SlotDelivery's `in_use` and counters)."""
        assert self.strict is not None and self._lib is not None
        lib, ns, stats = self._lib, self.strict.ns, self.b.stats
        stats["slot_writes"] += int(lib.ns_journal_slot_writes(ns))
        stats["fallbacks"] += int(lib.ns_journal_fallbacks(ns))
        stats["max_slots"] = max(stats["max_slots"], int(lib.ns_journal_max_slots(ns)))
        in_use = self.slots.in_use
        for start, kind in last.items():
            if kind == strictlib.ARMED:
                in_use[start] = int(lib.ns_func_in_use(ns, start))
            else:
                in_use.pop(start, None)


def create(image: Image, cpu: UnicornCpu, hooks: HookSet, emit: Callable[[Event], None],
           options: BackendOptions) -> NativeInt3Backend:
    """hwbp.create's native engine under emulation."""
    d = descriptors.HWBP
    backend = NativeInt3Backend(image, cpu, hooks, emit, "strict", options.call_types,
                                delivery="hook",
                                name=d.name, counters=d.counters, hits_counter=d.main_event)
    port = TableSlots(backend)
    slots = SlotDelivery(backend, options.hw_slots, port)
    port.bind(slots)
    backend.sites = slots
    return backend

