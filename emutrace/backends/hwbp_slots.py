"""`hwbp`: the lazy call-site algorithm on N hardware instruction-breakpoint slots.

What is modelled: a debugger that has only the ISA's instruction-address breakpoint
registers (x86 DR0–DR3, AArch64 DBGBVR, POWER CIABR, s390x one PER instruction-fetch range;
`isa.<name>.DEBUG_HARDWARE` gives the count and its source; `--hw-slots` overrides it).  No
guest byte is ever written.  Because slots are few, only the *current* function is armed
(fctrace's strict rule): on a call the caller's slots are released and the callee's
programmed, on a return the caller's are programmed again.

Natively (`--target native`) a slot is a real debug register (DR0-DR3 through
PTRACE_POKEUSER, `Target.hook_hw`, given the site's first byte), freed when its function is
disarmed; a stepped span is single-stepped.  With the C loop, C finishes the hits it can
decide and switches the registers itself (backends/hwbp_ptrace.py).  Under emulation a
slot is a Unicorn code hook bounded to the slot's range (one instruction for an address
slot); every slot hook calls the one handler, which looks
the address up in the table of armed sites. At most N slots are programmed at a time
(`stats["max_slots"]` shows it): the table holds the programmed slots. A function's hooks
are installed the first time it is armed (`hook_add`, plus dropping the translated code of
the range: a hook added after translation never fires in Unicorn 2.1.4) and then stay, idle
while the function is not armed — the handler ignores an idle hook. Re-programming is then a
table write; deleting and re-adding hooks at every switch would make Unicorn retranslate the
function each time (busybox `sort` went past 120 s that way).

Fall-back policy (declared, counted):
* address slots: a function with at most N sites gets one slot per site.  A function with
  more sites than slots is *stepped* instead: one hook over the span from its first site to
  the end of its last (the TF fall-back, from where the function is entered until it calls
  or returns).  `fallbacks` counts such armings, `stepped` the instructions trapped there
  that were not sites.
* range slots (s390x PER): the function's sites, in address order, are cut into at most N
  ranges at the widest gaps between them; every instruction fetched in a range traps, so
  fetches of non-site instructions inside a range are counted in `stepped` too.  That is not
  a fall-back, it is how PER works.
Either way every site is covered, so the trace is complete.

Events are resolved as with int3's hook delivery: the hit records the site, the block the
CPU enters next gives where the transfer went.
"""

from __future__ import annotations

from typing import Protocol

from emutrace.backends.int3_python import Armed, Int3Backend
from emutrace.discover import Function, Site
from emutrace.target.protocol import CodeHook


def slot_ranges(sites: list[tuple[int, int]], slots: int, kind: str) -> tuple[
        list[tuple[int, int]], bool]:
    """Cover the sites ((addr, size) pairs) with at most `slots` inclusive address ranges.
    Returns (ranges, fell_back).  Pure, so the policy is tested on its own."""
    spans = sorted((a, a + n - 1) for a, n in sites)
    if not spans:
        return [], False
    if len(spans) <= slots:
        return spans, False
    if kind == "address":  # more sites than registers: step across all of them
        return [(spans[0][0], max(end for _, end in spans))], True
    # range slots: keep the slots - 1 widest gaps open, merge the rest
    gaps = sorted(range(1, len(spans)), key=lambda i: spans[i][0] - spans[i - 1][1],
                  reverse=True)[:slots - 1]
    cuts = sorted(gaps)
    ranges, first = [], 0
    for cut in [*cuts, len(spans)]:
        group = spans[first:cut]
        ranges.append((group[0][0], max(end for _, end in group)))
        first = cut
    return ranges, False


class SlotPort(Protocol):
    """How SlotDelivery's slots reach the CPU: `install` a function's slots (its ranges, once;
    the handles it gives back are `remove`d when a stale descent replaces the function); and
    what was armed, disarmed and programmed, for a port that mirrors the tables (the native
    engine's, backends/hwbp_native.py)."""

    def install(self, func: Function, ranges: list[tuple[int, int]], single: bool) -> list[int]:
        ...

    def remove(self, handle: int) -> None: ...

    def armed(self, site: Site, func: int) -> None: ...

    def disarmed(self, addr: int) -> None: ...

    def programmed(self, func: int, slots: int) -> None: ...


class HookSlots:
    """The reference's port: a slot is a bounded code hook (a debug register natively),
    calling `on_slot`."""

    def __init__(self, backend: Int3Backend, on_slot: CodeHook) -> None:
        self.b, self.on_slot = backend, on_slot

    def install(self, func: Function, ranges: list[tuple[int, int]], single: bool) -> list[int]:
        """single: an address slot holds one instruction, the register is its first byte (a
        wider range is a stepped span: a native target single-steps it)."""
        b, handles = self.b, []
        for lo, hi in ranges:
            handles.append(b.cpu.hook_hw(self.on_slot, lo, lo if single else hi, func.start))
            b.drop_cache(lo, hi + 1 - lo)  # a hook added after translation never fires
            # (`drop_cache` takes a size: given the end address, it dropped [lo, 2·lo) —
            # seconds per arming at a dynamic library's addresses)
        return handles

    def remove(self, handle: int) -> None:
        self.b.cpu.hook_del(handle)

    def armed(self, site: Site, func: int) -> None:
        pass

    def disarmed(self, addr: int) -> None:
        pass

    def programmed(self, func: int, slots: int) -> None:
        pass


class SlotDelivery:
    """The delivery of N hardware slots (FunctionDelivery): a function's sites are covered by
    at most N slots (`slot_ranges`); a slot is a hook bounded to its range, installed the
    first time the function is armed and then left idle while it is not (see the module
    docstring).  Every slot hook calls `on_slot`, which looks the address up in the
    backend's table of armed sites.  `port`: how the slots are installed (default: code
    hooks, `HookSlots`)."""

    def __init__(self, backend: Int3Backend, slots: int | None,
                 port: SlotPort | None = None) -> None:
        hardware = backend.image.isa.debug_hardware
        self.backend = backend
        self.slots = slots if slots is not None else hardware.slots
        self.slot_kind = hardware.kind
        self.port: SlotPort = port if port is not None else HookSlots(backend, self.on_slot)
        self.slot_hooks: dict[int, list[int]] = {}  # function → its hooks (installed)
        self.hooked: dict[int, Function] = {}  # function → what its hooks were made for
        self.in_use: dict[int, int] = {}  # armed function → slots it programs
        backend.stats.update(hits=0, slot_writes=0, stepped=0, max_slots=0)

    def arm(self, func: Function) -> None:
        b, stats, port = self.backend, self.backend.stats, self.port
        free = [s for s in func.sites if s.addr not in b.armed]
        ranges, fell_back = slot_ranges([(s.addr, s.size) for s in free], self.slots,
                                        self.slot_kind)
        stats["fallbacks"] += fell_back
        stats["slot_writes"] += len(ranges)
        for site in free:
            b.armed[site.addr] = Armed(site, func.start)
            port.armed(site, func.start)
        self.in_use[func.start] = len(ranges)
        port.programmed(func.start, len(ranges))
        stats["max_slots"] = max(stats["max_slots"], sum(self.in_use.values()))
        if func.start in self.slot_hooks:
            if self.hooked.get(func.start) is func:
                return  # installed before, idle since: arming it again is the table write
            for handle in self.slot_hooks.pop(func.start):  # a stale descent's extent
                port.remove(handle)
        self.hooked[func.start] = func
        self.slot_hooks[func.start] = port.install(
            func, ranges, self.slot_kind == "address" and not fell_back)
        # (a translating engine restarts the block so that the new hooks are in it; a CPU
        # checks its debug registers at every fetch)
        b.armed_now = bool(ranges) and b.cpu.translates_code

    def disarm(self, func: Function) -> None:
        b = self.backend
        for site in func.sites:
            armed = b.armed.get(site.addr)
            if armed is not None and armed.func == func.start:
                del b.armed[site.addr]
                self.port.disarmed(site.addr)
        if self.in_use.pop(func.start, None) is not None:  # its hooks stay installed, idle
            self.port.programmed(func.start, 0)
        if not b.cpu.translates_code:  # real registers: free them (nothing to retranslate)
            for handle in self.slot_hooks.pop(func.start, []):
                self.port.remove(handle)
            self.hooked.pop(func.start, None)

    def rearm(self, old: Function, new: Function) -> None:
        """Slots cover whole functions: the stale one's slots go to the new extent."""
        self.backend.disarm(old.start)
        self.backend.arm(new)

    def on_slot(self, uc: object, addr: int, size: int, owner: int) -> None:
        b = self.backend
        if owner not in b.armed_funcs:
            return  # an idle hook: its function's slots are not programmed now
        armed = b.armed.get(addr)
        if armed is None:
            b.stats["stepped"] += 1  # inside a stepped span or a PER range, not a site
            return
        b.stats["hits"] += 1
        b.pending = b.pending_at(armed.site)
        b.cpu.want_blocks()  # the transfer is learnt from the block entered next

