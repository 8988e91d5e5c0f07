"""`hwbp`: the lazy call-site algorithm on N hardware instruction-breakpoint slots.

What is modelled: a debugger that has only the ISA's instruction-address breakpoint
registers (x86 DR0–DR3, AArch64 DBGBVR, POWER CIABR, s390x one PER instruction-fetch range;
`isa.<name>.DEBUG_HARDWARE` gives the count and its source; `--hw-slots` overrides it).  No
guest byte is ever written.  Because slots are few, only the *current* function is armed
(fctrace's strict rule): on a call the caller's slots are released and the callee's
programmed, on a return the caller's are programmed again.

Natively (`--target native`) a slot is a real debug register (DR0-DR3 through
PTRACE_POKEUSER, `Target.hook_hw`), freed when its function is disarmed; a stepped span is
single-stepped. Under emulation a slot is a Unicorn code hook bounded to the slot's range
(one instruction for an address slot); every slot hook calls the one handler, which looks
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

from collections.abc import Callable

from emutrace.backends import BackendOptions, descriptors
from emutrace.backends.int3 import Armed, Int3Backend
from emutrace.discover import Function, Site
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


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


class HwbpBackend(Int3Backend):
    name = "hwbp"

    def __init__(self, image: Image, cpu: Target, hooks: TrapHooks,
                 emit: Callable[[Event], None], slots: int | None = None,
                 types: CallTypes | None = None) -> None:
        hardware = image.isa.debug_hardware
        self.slots = slots if slots is not None else hardware.slots
        self.slot_kind = hardware.kind
        self.slot_hooks: dict[int, list[int]] = {}  # function → its hooks (installed)
        self.hooked: dict[int, Function] = {}  # function → what its hooks were made for
        self.in_use: dict[int, int] = {}  # armed function → slots it programs
        super().__init__(image, cpu, hooks, emit, "strict", types, delivery="hook")
        self.stats.update(hits=0, slot_writes=0, stepped=0, max_slots=0)

    def _arm(self, func: Function | None) -> None:
        if not self._take(func):
            return
        assert func is not None
        free = [s for s in func.sites if s.addr not in self.armed]
        ranges, fell_back = slot_ranges([(s.addr, s.size) for s in free], self.slots,
                                        self.slot_kind)
        self.stats["fallbacks"] += fell_back
        self.stats["slot_writes"] += len(ranges)
        for site in free:
            self.armed[site.addr] = Armed(site, func.start)
        self.in_use[func.start] = len(ranges)
        self.stats["max_slots"] = max(self.stats["max_slots"], sum(self.in_use.values()))
        if func.start in self.slot_hooks:
            if self.hooked.get(func.start) is func:
                return  # installed before, idle since: arming it again is the table write
            for handle in self.slot_hooks.pop(func.start):  # a stale descent's extent
                self.cpu.hook_del(handle)
        self.hooked[func.start] = func
        handles = []
        for lo, hi in ranges:
            handles.append(self.cpu.hook_hw(self._on_slot, lo, hi, func.start))
            self._drop_cache(lo, hi + 1 - lo)  # a hook added after translation never fires
            # (`_drop_cache` takes a size: given the end address, it dropped [lo, 2·lo) —
            # seconds per arming at a dynamic library's addresses)
        self.slot_hooks[func.start] = handles
        # (a translating engine restarts the block so that the new hooks are in it; a CPU
        # checks its debug registers at every fetch)
        self._armed_now = bool(ranges) and self.cpu.translates_code

    def _disarm(self, func_start: int) -> None:
        func = self.armed_funcs.pop(func_start, None)
        if func is None:
            return
        for site in func.sites:
            armed = self.armed.get(site.addr)
            if armed is not None and armed.func == func_start:
                del self.armed[site.addr]
        self.in_use.pop(func_start, None)  # its hooks stay installed, idle
        if not self.cpu.translates_code:  # real registers: free them (nothing to retranslate)
            for handle in self.slot_hooks.pop(func_start, []):
                self.cpu.hook_del(handle)
            self.hooked.pop(func_start, None)

    def _on_slot(self, uc: object, addr: int, size: int, owner: int) -> None:
        if owner not in self.armed_funcs:
            return  # an idle hook: its function's slots are not programmed now
        armed = self.armed.get(addr)
        if armed is None:
            self.stats["stepped"] += 1  # inside a stepped span or a PER range, not a site
            return
        self.stats["hits"] += 1
        self.pending = self._pending(armed.site)
        self.cpu.want_blocks()  # the transfer is learnt from the block entered next

    def finish(self) -> int:
        """The counters of this mechanism (int3's bookkeeping ones are dropped)."""
        self.stats = {k: self.stats[k] for k in DESCRIPTOR.counters}
        return super().finish()

    def _rearm(self, old: Function, new: Function) -> None:
        """Slots cover whole functions: the stale one's slots go to the new extent."""
        self._disarm(old.start)
        self._arm(new)

    def _arm_site(self, site: Site, func: int) -> None:  # pragma: no cover - never per site
        raise AssertionError("hwbp arms whole functions (_arm)")


def create(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
           options: BackendOptions) -> HwbpBackend:
    return HwbpBackend(image, cpu, hooks, emit, options.hw_slots, options.call_types)


DESCRIPTOR = descriptors.HWBP  # what the CLI, bench and cost model know of it
