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

What stays Python's (the reference's code hooks, through `_on_slot`, counted the same):
* a stepped span (an address-slot function with more sites than slots: its fall-back) and
  every range slot (s390x PER): every instruction in the range is a hook call;
* a site C's table cannot watch (its sp effect unknown, an EXRL target), and a site address
  two functions share (each function's hook there is its own in the reference: an idle
  owner's hook must stay idle while the other's is armed) — `_claim` moves the first
  function's table entry back to a Python hook when a second one claims the address;
* on a Thumb ISA (arm) every slot: strict.c does not switch there, and C's table would
  finish returns without switching.

`native_stats` says how much of a run that was: `python_slot_hits`, `python_stepped`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

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
        self._next_handle = -2
        self._site_owner: dict[int, int] = {}  # site address → first function installed
        self._shared: set[int] = set()  # site addresses of two functions
        # strict.c's count of switches, read in place, and its value at Python's last look
        self._switches = ctypes.c_uint64.from_address(
            self._lib.ns_switches_at(self.strict.ns)) \
            if self._lib is not None and self.strict is not None else None
        self._seen = -1
        self.counts = backend.more_native_stats
        self.counts.update(python_slot_hits=0, python_stepped=0, slot_entries=0,
                           python_slot_hooks=0)

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
                handle, self._next_handle = self._next_handle, self._next_handle - 1
                self._c_handles[handle] = lo
                self._c_entry[lo] = (func.start, handle)
                self.counts["slot_entries"] += 1
                handles.append(handle)
            else:
                handles.append(self._hook(lo, lo if single else hi, func.start))
        return handles

    def remove(self, handle: int) -> None:
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

