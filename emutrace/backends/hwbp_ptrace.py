"""`hwbp` on the native target with the C loop (engine native): backends/hwbp.py's slot
policy unchanged, with the debug-register hits whose whole decision C holds finished in C
(native/ploop.c `hw_finish`, deciding and switching with strict.c's table under slots, the
Unicorn port's).

C is taught, per function Python arms by address slots (no stepped fall-back): its extent,
its sites in register order (DRi = the i-th, as `SlotDelivery.arm` programs them after a
disarm freed all four), and whether a call to its start may be recorded in C (integer-word
arguments); and each site's lowered instruction (`FastSites`).  Before C resumes the tracee
(`_hand_over`), it is told the one armed function and the top of the call chain — only when
Python's state is that simple: one function armed by exactly its taught slots, nothing
pending.  C then finishes a hit at one of its sites when it is a call to a taught function's
start, a return to a caller the chain holds (`_caller`'s rule), or a conditional jump not
taken: it records the event, and strict.c pushes or pops its chain and, when the current
function changes, frees the slots and has the port program the new one's with
PTRACE_POKEUSER, counting hits and slot writes as `SlotDelivery` counts them.  Every other
hit comes back unhandled.

After C (`_take_back`), the records are drained (`RecordDrain`: the Python path's values
and tail-rule frames), the counters and chain taken over, and if C changed the current
function, Python's own disarm + arm run once (their slot writes not counted again: C
counted them), which leaves `PtraceTarget.hw_slots` and the backend's tables as the Python
loop would have them (tests/test_native_loop.py)."""

from __future__ import annotations

from emutrace.backends.fastpath import FastSites, RecordDrain
from emutrace.backends.hwbp_slots import SlotDelivery, slot_ranges
from emutrace.backends.int3_python import Int3Backend
from emutrace.discover import Function
from emutrace.native.ploop import HW_CHAIN, HW_SLOTS, PtraceLoop
from emutrace.target.ptrace import PtraceTarget


class CSlots:
    """The backend's FunctionDelivery: `SlotDelivery`'s arming, plus what C is told."""

    def __init__(self, backend: Int3Backend, slots: SlotDelivery, target: PtraceTarget,
                 loop: PtraceLoop) -> None:
        self.b, self.slots, self.target, self.loop = backend, slots, target, loop
        self.fast = FastSites(backend, loop, target.reg_id, len(loop.arg_names) + loop.n_stack,
                              strict_in_c=True)
        records = RecordDrain(backend, target, backend.emit, loop.arg_names, loop.ret_names,
                              loop.n_stack)
        loop.on_records = records.drain
        loop.time = lambda: backend.time
        loop.hw_in, loop.hw_out = self._hand_over, self._take_back
        self.taught: dict[int, tuple[Function, int]] = {}  # start → (function, its slots)
        self._handed: tuple[int, int, list[Function]] | None = None  # cur, base, window
        self.native_stats = {"c_hits": 0, "c_slot_writes": 0}

    # ------------------------------------------------------------ FunctionDelivery
    def arm(self, func: Function) -> None:
        self.slots.arm(func)
        self._teach(func)

    def disarm(self, func: Function) -> None:
        self.slots.disarm(func)

    def rearm(self, old: Function, new: Function) -> None:
        self._forget(old.start)
        self.slots.rearm(old, new)

    # ------------------------------------------------------------ what C is told
    def _teach(self, func: Function) -> None:
        known = self.taught.get(func.start)
        if known is not None and known[0] is func:
            return
        sites = func.sites
        ranges, fell_back = slot_ranges([(s.addr, s.size) for s in sites], self.slots.slots,
                                        self.slots.slot_kind)
        if (fell_back or self.slots.slot_kind != "address" or len(ranges) > HW_SLOTS
                or self.slots.in_use.get(func.start) != len(ranges)
                or not self.b.decoder.in_code(func.start)):
            self._forget(func.start)  # stepped, or armed beside another: Python's
            return
        for site in sites:
            self.fast.armed(site)
        calls = self.fast.call_fast(func.start)
        if calls:  # (its `char *` arguments: C copies their strings at the hit)
            self.fast.tell_string_args(func.start, func.start)
        self.loop.hw_func_set(func.start, func.end, [lo for lo, _hi in ranges], calls)
        self.taught[func.start] = (func, len(ranges))

    def _forget(self, start: int) -> None:
        if self.taught.pop(start, None) is not None:
            self.loop.hw_func_drop(start)

    def _hand_over(self) -> None:
        """Before C resumes: C may finish hits only from a state it can mirror."""
        b = self.b
        cur = next(iter(b.armed_funcs)) if len(b.armed_funcs) == 1 else None
        known = self.taught.get(cur) if cur is not None else None
        ok = (known is not None and cur is not None and b.armed_funcs[cur] is known[0]
              and b.pending is None and not b.rearm and b.chain != []
              and b.chain[-1].start == cur and self.slots.in_use == {cur: known[1]}
              and len(self.target.hw_slots) == known[1] and not self.target.range_hooks)
        if not ok or cur is None:
            self._handed = None
            self.loop.hw_begin(False, 0, [])
            return
        base = max(0, len(b.chain) - HW_CHAIN)
        window = b.chain[base:]
        self._handed = (cur, base, window)
        self.loop.hw_begin(True, cur, [(f.start, f.end) for f in window])

    def _take_back(self, stopped: bool) -> None:
        """After C: its counters, its chain and its current function become Python's
        (the registers too, while the tracee is there: stopped)."""
        if self._handed is None:
            return
        cur, base, window = self._handed
        self._handed = None
        b, stats = self.b, self.b.stats
        now, starts, hits, writes = self.loop.hw_state()
        stats["hits"] += hits
        stats["slot_writes"] += writes
        self.native_stats["c_hits"] += hits
        self.native_stats["c_slot_writes"] += writes
        chain = b.chain[:base]
        for i, start in enumerate(starts):
            chain.append(window[i] if i < len(window) and window[i].start == start
                         else self.taught[start][0])
        b.chain = chain
        if now != cur and stopped:  # Python's tables and debug registers follow C's
            saved = stats["slot_writes"]
            b.disarm(cur)
            b.arm(self.taught[now][0])
            stats["slot_writes"] = saved
