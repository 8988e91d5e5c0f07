"""`hwbp` on the Unicorn native hot path (`--engine native`): the site tracer's algorithm and
hwbp's slot policy (`SlotDelivery`, unchanged) over the hot path engine (int3_native.py
`HotPathEngine`) with hook delivery, its slots installed through `TableSlots` instead of
Python code hooks.

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
  the span's sites are entries of the table, hit by the block hook as an address slot's;
* a site address two functions share is each one's in the reference (each function's hook
  there fires while that function is armed): C marks it shared (`hs_site_shared`), the block
  hook leaves its hits alone, and each owner's C code hook over it (its span, or one over
  the site alone: `_own`) counts that owner's hits.

What stays Python's (the reference's code hooks, through `_on_slot`, counted the same):
* a site C's table cannot watch (its sp effect unknown, an EXRL target): Python's for every
  function that has it (`_py_cover`: another's table entry there is dropped and a Python
  hook over the site takes its place; a C span over it leaves the dropped address alone),
  and so is the whole slot (span or range) holding it;
* on a Thumb ISA (arm) every slot: strict.c does not switch there, and C's table would
  finish returns without switching.

`native_stats` says how much of a run that was: `python_slot_hits`, `python_stepped`, and
C's `c_slot_hooks`, `c_stepped`, `c_shared_sites`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from emutrace.backends import BackendOptions
from emutrace.backends.hwbp_slots import SlotDelivery
from emutrace.backends.int3_native import HotPathEngine
from emutrace.backends.int3_python import Int3Backend
from emutrace.discover import Function, Site
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.native import strictlib
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.target.unicorn_run import HookSet
from emutrace.trace.events import Event

_IN_TABLE = -1  # Armed.hook of a slot site: nonzero, as a site hook's (strict_native.py)


class TableSlots:
    """SlotDelivery's port (hwbp.SlotPort) on the native int3 backend: slots over sites C's
    table watches are C's (table entries, and C code hooks over spans and shared sites), the
    rest Python code hooks; what is armed mirrored to strict.c."""

    slots: SlotDelivery

    def __init__(self, backend: Int3Backend, engine: HotPathEngine) -> None:
        self.b, self.engine = backend, engine
        self.table = engine.hooked_table
        self.strict = engine.strict_in_c
        self._lib = strictlib.load() if self.strict is not None else None
        # who covers each site address, and how (a function's slots over a site: a table
        # entry, and a C code hook where C counts for it; or a Python hook)
        self._owners: dict[int, set[int]] = {}  # site address → functions covering it
        self._python: set[int] = set()  # site addresses Python's hooks cover, for all
        self._entries: dict[int, dict[int, int]] = {}  # address → owner → entry handle
        self._entry_of: dict[int, tuple[int, int]] = {}  # entry handle → (address, owner)
        self._c_hook_of: dict[int, tuple[int, int, int]] = {}  # C hook → (owner, lo, hi)
        self._py_hook_of: dict[int, tuple[int, list[int]]] = {}  # → (owner, its sites)
        engine.finishers.append(self._finish)
        # strict.c's count of switches, read in place, and its value at Python's last look
        self._switches = ctypes.c_uint64.from_address(
            self._lib.ns_switches_at(self.strict.ns)) \
            if self._lib is not None and self.strict is not None else None
        self._seen = -1
        self.counts = engine.more_native_stats
        self.counts.update(python_slot_hits=0, python_stepped=0, slot_entries=0,
                           python_slot_hooks=0, c_slot_hooks=0, c_stepped=0,
                           c_shared_sites=0)

    def bind(self, slots: SlotDelivery) -> None:
        self.slots = slots
        if self.strict is not None and self._lib is not None:
            self._lib.ns_set_slots(self.strict.ns, slots.slots, int(slots.slot_kind == "range"))
            self.strict.journal_readers.append(self._replayed)

    # ------------------------------------------------------------ SlotPort
    def install(self, func: Function, ranges: list[tuple[int, int]], single: bool) -> list[int]:
        handles = []
        for lo, hi in ranges:
            inside = [s for s in func.sites if lo <= s.addr <= hi]
            if self._c_can(inside):
                handles += self._c_cover(func.start, lo, hi, inside, span=not single)
            else:
                handles += self._py_cover(func.start, lo, lo if single else hi, inside)
        return handles

    def remove(self, handle: int) -> None:
        if handle in self._c_hook_of:
            self._c_hook_of.pop(handle)
            self.engine.del_c_hook(handle)  # (its hs_span stays until the table is freed)
        elif handle in self._entry_of:
            addr, owner = self._entry_of.pop(handle)
            entries = self._entries[addr]
            del entries[owner]
            self._owners[addr].discard(owner)
            if not entries:  # no function's slot watches it in C's table any more
                del self._entries[addr]
                assert self.table is not None
                self.table.drop(addr)
        else:
            owner, addrs = self._py_hook_of.pop(handle, (0, []))
            for addr in addrs:
                self._owners[addr].discard(owner)
            self.b.cpu.hook_del(handle)

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
    def _c_can(self, inside: list[Site]) -> bool:
        """Can C cover these sites of one slot: its table watches each of them (strict.c,
        which says whether a function is armed, beside it), none covered by a Python hook?"""
        table = self.table
        return (table is not None and self.strict is not None
                and all(s.addr not in self._python and table.can_watch(s) for s in inside))

    def _c_cover(self, owner: int, lo: int, hi: int, inside: list[Site], span: bool) -> list[int]:
        """owner's slot over [lo, hi] in C: its sites entries of the table (hit by the block
        hook, as the reference's hook on them); a span (a stepped span, a range slot) also a C
        code hook over it, hotpath.c `hs_on_span`, which counts `stepped`.  The handles."""
        table = self.table
        assert table is not None
        handles = [self._c_hook(owner, lo, hi)] if span else []
        for site in inside:
            table.watch(site)
            handle = table.new_handle()
            self._entries.setdefault(site.addr, {})[owner] = handle
            self._entry_of[handle] = (site.addr, owner)
            self.counts["slot_entries"] += 1
            handles.append(handle)
            handles += self._own(site.addr, owner)
        return handles

    def _own(self, addr: int, owner: int) -> list[int]:
        """owner's slot covers the site at addr.  A site of two functions is each one's in
        the reference (the hook of each fires while its function is armed): C's table then
        leaves its hits to the code hooks (`hs_site_shared`), and every owner whose slot
        there is a table entry alone gets one over the site.  The handles owner got."""
        owners = self._owners.setdefault(addr, set())
        owners.add(owner)
        if len(owners) < 2:
            return []
        assert self.table is not None
        if len(owners) == 2:
            self.table.shared(addr)
            self.counts["c_shared_sites"] += 1
        mine = []
        for other in owners:
            if any(lo <= addr <= hi for o, lo, hi in self._c_hook_of.values() if o == other):
                continue
            handle = self._c_hook(other, addr, addr)
            if other == owner:
                mine.append(handle)
            else:
                self.slots.slot_hooks[other].append(handle)
                self.b.armed_now = self.b.cpu.translates_code  # (the block may hold it)
        return mine

    def _c_hook(self, owner: int, lo: int, hi: int) -> int:
        """A C code hook of owner's over [lo, hi] (hotpath.c `hs_on_span`)."""
        assert self.table is not None
        data = self.table.span(owner)
        if not data:
            raise MemoryError("native hot path: out of memory")
        handle = self.engine.add_c_hook("code", self.table.span_hook, data, lo, hi)
        self.b.drop_cache(lo, hi + 1 - lo)  # a hook added after translation never fires
        self._c_hook_of[handle] = (owner, lo, hi)
        self.counts["c_slot_hooks"] += 1
        return handle

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
        self.b.drop_cache(lo, end + 1 - lo)  # a hook added after translation never fires
        return handle

    def _py_cover(self, owner: int, lo: int, end: int, inside: list[Site]) -> list[int]:
        """owner's slot over [lo, end] as the reference's Python hook.  Its sites become
        Python's for every function: another's table entry there is dropped (a C span of
        its sees the entry dropped and leaves the address alone) and a Python hook over the
        site takes its place.  The handles owner got."""
        handle = self._hook(lo, end, owner)
        self._py_hook_of[handle] = (owner, [s.addr for s in inside])
        for site in inside:
            addr = site.addr
            self._owners.setdefault(addr, set()).add(owner)
            if addr in self._python:
                continue
            self._python.add(addr)
            for other, entry in list(self._entries.get(addr, {}).items()):
                hooks = self.slots.slot_hooks[other]
                for old in [entry, *(h for h, (o, a, z) in self._c_hook_of.items()
                                     if o == other and a == z == addr)]:
                    self.remove(old)
                    hooks.remove(old)
                point = self._hook(addr, addr, other)
                self._py_hook_of[point] = (other, [addr])
                self._owners[addr].add(other)
                hooks.append(point)
                self.b.armed_now = self.b.cpu.translates_code  # (the block may hold it)
        return [handle]

    def _on_slot(self, uc: object, addr: int, size: int, owner: int) -> None:
        """A Python slot hook (a stepped span's is called for every instruction in its
        range): C's switches replayed first when strict.c made any since Python last looked
        (its count read in place, no call), then the reference's handler."""
        stats = self.b.stats
        if self._switches is not None and self._switches.value != self._seen:
            self.engine.drain_c()  # (Python's `armed_funcs` and `armed` are C's again)
            self._seen = self._switches.value
        hits, stepped = stats["hits"], stats["stepped"]
        self.slots.on_slot(uc, addr, size, owner)
        self.counts["python_stepped"] += stats["stepped"] - stepped
        if stats["hits"] != hits:
            self.counts["python_slot_hits"] += 1
            self.engine.refresh_c()  # the pending transfer: Python's block hook resolves it

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
           options: BackendOptions) -> Int3Backend:
    """hwbp.create's native engine under emulation: the site tracer (strict cleanup,
    hook delivery) over a `HotPathEngine`, its slots `TableSlots`."""
    d = descriptors.HWBP
    engine = HotPathEngine(image, cpu, hooks, emit, "strict", delivery="hook",
                           hits_counter=d.main_event)
    backend = Int3Backend(image, cpu, hooks, emit, "strict", options.call_types,
                          delivery="hook", name=d.name, counters=d.counters, engine=engine)
    port = TableSlots(backend, engine)
    slots = SlotDelivery(backend, options.hw_slots, port)
    port.bind(slots)
    backend.sites = slots
    return backend

