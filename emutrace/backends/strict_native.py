"""Strict cleanup switched in C (`--engine native --cleanup strict`, emutrace/native/strict.c),
composed into the native int3 backend (backends/int3_native.py).

The Python backend keeps the algorithm and its state (`armed`, `armed_funcs`, `chain`, the
code guard, the counters).  This object mirrors that state into strict.c as Python changes
it — the bytes under each patch site (read once, when Python arms the site the first time),
which sites are armed and for which function, which functions are armed, the call chain —
so that a later call into a function C knows, or a return to the chain's next function, is
switched by C: disarm the function left, arm the one entered, write the breakpoint or the
original bytes and drop the translated code, as `Int3Backend.called` and `returned` do
under strict cleanup (cleanup.py `StrictCleanup`).

C notes each function it arms or disarms in a journal, counts the sites it writes, and marks
how far down it changed the chain; when Python next runs (it drains C's buffers before it
looks at anything), `replay_journal` brings Python's state to C's: the functions the journal
names armed or not as their last entry says (`take`, or dropped from `armed_funcs`), their
sites armed for C's owner or not (`armed`, `idle_hooks`, the guard's list of patched bytes;
guest memory left alone: C wrote it), the counters advanced by C's counts (one patch per site
written, one cache removal per patch site, as `arm_site` and `disarm_site` count), and the
chain's changed frames.  C's tables mirror Python's, so that state is what replaying each
switch in order would leave, and the Python state and counters are the Python engine's at
every point Python can observe (tests/test_native_engine.py compares traces and counters);
the cost is one pass over the functions switched since Python last ran, not one per switch.

Site hooks (hook delivery: mips, mipsel, riscv64; backends/hooked_sites.py) switch the same
way with nothing written: the reference keeps a disarmed site's hook installed and idle
(`Int3Backend.idle_hooks`) and arms it again with a table write, so C flips the site in
hotpath.c's hooked-site table; the replay moves the handle between `idle_hooks` and
`armed`, and C counts one patch per flip, as `arm_site`/`disarm_site` count it (no cache
removal: the reference drops translated code only when it adds a hook, which stays
Python's)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING

from emutrace.backends.int3_python import Armed
from emutrace.discover import Function, Site
from emutrace.native import strictlib

if TYPE_CHECKING:
    from emutrace.backends.hooked_sites import HookedSites
    from emutrace.backends.int3_python import Int3Backend
    from emutrace.target.protocol import CPort


def _words(values: list[int]) -> ctypes.Array[ctypes.c_uint64]:
    return (ctypes.c_uint64 * max(1, len(values)))(*values)


class StrictInC:
    def __init__(self, backend: Int3Backend, nt: int, port: CPort, code_mask: int) -> None:
        """(Made before anything is armed: it sees every arming.)"""
        self.b = backend
        self.lib = lib = strictlib.load()
        self.ns = lib.ns_new(port.handle, ctypes.c_void_p(port.function("mem_write")),
                             ctypes.c_void_p(port.function("ctl")), code_mask)
        if not self.ns:
            raise MemoryError("native hot path: out of memory")
        lib.nt_set_strict(nt, self.ns)
        self.replaying = False
        self._originals: dict[int, bytes] = {}  # site → the bytes under its breakpoint
        self._told: set[int] = set()  # functions whose sites C knows
        self._targets: dict[int, Function] = {}  # call target → the function it enters
        self._functions: dict[int, Function] = {}  # start → the function C was told
        self._chain: list[tuple[int, int]] = []  # the chain as C has it: (start, end)
        self._hooked: HookedSites | None = None  # site hooks C switches too (bind_hooked)
        # called at each replay with the functions C switched (start → ARMED or DISARMED,
        # the last), before C's journal and its counts are cleared
        self.journal_readers: list[Callable[[dict[int, int]], None]] = []  # (hwbp_native)

    def bind_hooked(self, hooked: HookedSites) -> None:
        """Site hooks (hook delivery, code found by descent): a site hook C arms or disarms
        is flipped in the hooked-site table (hotpath.c hs_site_active); a patch site's in
        hotpath.c's patch-site table, as before."""
        self._hooked = hooked
        self.lib.ns_bind_hooked(self.ns, hooked.ns, ctypes.cast(hooked.lib.hs_site_active,
                                                         ctypes.c_void_p))

    # ------------------------------------------------------------ Python → C
    def site_armed(self, site: Site, func: int) -> None:
        """Python armed a site: a patch site's bytes (the first time) or that it is a site
        hook (which stays installed when disarmed), and its owner."""
        armed = self.b.armed.get(site.addr)
        if armed is None or (armed.hook and self._hooked is None):
            return
        if armed.hook:
            self.lib.ns_site_hooked(self.ns, site.addr)
        elif site.addr not in self._originals:
            bp = self.b.breakpoint_bytes(site)
            self._originals[site.addr] = armed.original
            self.lib.ns_site_bytes(self.ns, site.addr, len(bp), bp, armed.original)
        self.lib.ns_site_armed(self.ns, site.addr, 1, func)

    def site_disarmed(self, addr: int) -> None:
        self.lib.ns_site_armed(self.ns, addr, 0, 0)

    def taken(self, func: Function) -> None:
        """Python entered func in its armed functions."""
        if func.start not in self._told:
            self._told.add(func.start)
            self._functions[func.start] = func
            addrs = [s.addr for s in func.sites]
            self.lib.ns_func_sites(self.ns, func.start, func.end, len(addrs), _words(addrs))
        self.lib.ns_func_armed(self.ns, func.start, 1)

    def dropped(self, start: int) -> None:
        self.lib.ns_func_armed(self.ns, start, 0)

    def forget(self, start: int) -> None:
        """func's extent changed (a stale descent): Python's alone from now on."""
        self._told.discard(start)
        self.lib.ns_func_forget(self.ns, start)

    def callee(self, target: int, func: Function) -> None:
        if self._targets.get(target) is not func:
            self._targets[target] = self._functions[func.start] = func
            self.lib.ns_target(self.ns, target, func.start)

    def push_chain(self, chain: list[Function]) -> None:
        now = [(f.start, f.end) for f in chain]
        if now != self._chain:
            self._chain = now
            self.lib.ns_chain_set(self.ns, len(now), _words([s for s, _e in now]),
                                  _words([e for _s, e in now]))

    def disable(self) -> None:
        self.lib.ns_disable(self.ns)

    # ------------------------------------------------------------ C → Python
    def replay_journal(self) -> None:
        """What C changed since Python last ran (the backend's `_drain`), then the chain.

        Not switch by switch: C's tables are the Python state's mirror, so the state that
        replaying each switch (`arm`, `disarm`) would leave is C's state now — the
        functions the journal names armed or not as their last entry says, the sites of
        those functions armed for the owner C has — and the counters are what C counted
        (one patch per site written, one cache removal per patch site)."""
        lib, ns = self.lib, self.ns
        n = lib.ns_journal_count(ns)
        if n:
            data = ctypes.string_at(lib.ns_journal(ns), n * strictlib.JOURNAL_ENTRY.size)
            b = self.b
            b.stats["patches"] += int(lib.ns_journal_patches(ns))
            b.stats["cache_removals"] += int(lib.ns_journal_removals(ns))
            last = {start: kind for kind, start in strictlib.JOURNAL_ENTRY.iter_unpack(data)}
            for read in self.journal_readers:  # (what else C counted, before it is cleared)
                read(last)
            lib.ns_journal_clear(ns)
            self.replaying = True
            try:
                for start, kind in last.items():
                    if kind == strictlib.ARMED:
                        b.take(self._functions[start])  # (no-op when it is armed)
                    else:
                        b.armed_funcs.pop(start, None)
            finally:
                self.replaying = False
            self._take_sites(list(last))
        self._take_chain()

    def _take_sites(self, starts: list[int]) -> None:
        """The sites of the functions at starts, armed or not and for whom, as C has them
        (what `arm_site`/`disarm_site` leave, without counting: C counted)."""
        b, functions = self.b, self._functions
        pairs = [(start, site) for start in starts for site in functions[start].sites]
        n = len(pairs)
        owners, armed = (ctypes.c_uint64 * max(1, n))(), (ctypes.c_uint8 * max(1, n))()
        self.lib.ns_sites_state(self.ns, n, _words([site.addr for _s, site in pairs]),
                                owners, armed)
        for k, (start, site) in enumerate(pairs):
            addr, now = site.addr, b.armed.get(site.addr)
            if armed[k] and owners[k] == start:
                if now is not None and now.func == start:
                    continue
                if now is not None:  # armed for another function before: C's owner now
                    b.armed[addr] = Armed(site, start, original=now.original, hook=now.hook)
                else:
                    self._arm_as_c(site, start)
            elif not armed[k] and now is not None:
                self._disarm_as_c(addr)

    def _arm_as_c(self, site: Site, func: int) -> None:
        """`arm_site`'s state for a site C armed: an idle site hook taken back, or a
        breakpoint over the original bytes."""
        b = self.b
        handle = b.idle_hooks.pop(site.addr, 0)
        if handle:
            b.armed[site.addr] = Armed(site, func, hook=handle)
            assert self._hooked is not None
            self._hooked.rearmed_by_c(site)
            return
        original = self._originals[site.addr]
        b.armed[site.addr] = Armed(site, func, original=original)
        if b.guard is not None:
            b.guard.patched(site.addr, original, b.breakpoint_bytes(site))

    def _disarm_as_c(self, addr: int) -> None:
        """`disarm_site`'s state for a site C disarmed: its hook idle, or its bytes back."""
        b = self.b
        armed = b.armed.pop(addr)
        if armed.hook:
            b.idle_hooks[addr] = armed.hook
        elif b.guard is not None:
            b.guard.restored(addr)

    def _take_chain(self) -> None:
        """The frames C pushed or popped since Python last looked, into Python's chain (the
        frames C pushed are functions it was told as call targets)."""
        lib, ns = self.lib, self.ns
        depth, low = int(lib.ns_chain_depth(ns)), int(lib.ns_chain_low(ns))
        if low == depth == len(self._chain):
            return
        data = ctypes.string_at(lib.ns_chain(ns) + low * strictlib.FRAME.size,
                                (depth - low) * strictlib.FRAME.size)
        frames = [(start, end) for start, end, _f in strictlib.FRAME.iter_unpack(data)]
        del self._chain[low:]
        self._chain.extend(frames)
        del self.b.chain[low:]
        self.b.chain.extend(self._functions[start] for start, _end in frames)
        lib.ns_chain_seen(ns)

    def switches(self) -> int:
        return int(self.lib.ns_switches(self.ns))

    def close(self) -> None:
        self.lib.ns_free(self.ns)
        self.ns = None
