"""Strict cleanup switched in C (`--engine native --cleanup strict`, emutrace/native/strict.c),
composed into the native int3 backend (backends/int3_native.py).

The Python backend keeps the algorithm and its state (`armed`, `armed_funcs`, `chain`, the
code guard, the counters).  This object mirrors that state into strict.c as Python changes
it — the bytes under each patch site (read once, when Python arms the site the first time),
which sites are armed and for which function, which functions are armed, the call chain —
so that a later call into a function C knows, or a return to the chain's next function, is
switched by C: disarm the function left, arm the one entered, write the breakpoint or the
original bytes and drop the translated code, as `Int3Backend._called` and
`_returned_strict` do.

C notes each switch in a journal; when Python next runs (it drains C's buffers before it looks
at anything), `replay` runs the same two methods on Python's state with guest memory left
alone (C wrote it): `patched` and `restored` stand in for `_arm_site` and `_disarm_site`,
counting one patch and one cache removal each, as they do.  So the Python state, the
counters and the guard's list of patched bytes are the Python engine's at every point
Python can observe (tests/test_native_engine.py compares traces and counters)."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from unicorn import Uc
from unicorn.unicorn_py3.unicorn import uclib

from emutrace import native
from emutrace.backends.int3 import Armed
from emutrace.discover import Function, Site
from emutrace.native import strictlib

if TYPE_CHECKING:
    from emutrace.backends.int3_native import NativeInt3Backend


def _words(values: list[int]) -> ctypes.Array[ctypes.c_uint64]:
    return (ctypes.c_uint64 * max(1, len(values)))(*values)


class StrictInC:
    def __init__(self, backend: NativeInt3Backend, nt: int, uc: Uc, code_mask: int) -> None:
        """(Made before the backend's own __init__ has run: it sees every arming.)"""
        self.b = backend
        self.lib = lib = strictlib.load()
        self.ns = lib.ns_new(uc._uch, ctypes.cast(uclib.uc_mem_write, ctypes.c_void_p),
                             ctypes.cast(uclib.uc_ctl, ctypes.c_void_p), code_mask)
        if not self.ns:
            raise MemoryError("native hot path: out of memory")
        lib.nt_set_strict(nt, self.ns)
        self.replaying = False
        self._originals: dict[int, bytes] = {}  # site → the bytes under its breakpoint
        self._told: set[int] = set()  # functions whose sites C knows
        self._targets: dict[int, Function] = {}  # call target → the function it enters
        self._chain: list[tuple[int, int]] = []  # the chain as C has it: (start, end)

    # ------------------------------------------------------------ Python → C
    def site_armed(self, site: Site, func: int) -> None:
        """Python armed a site: a patch site's bytes (the first time) and its owner."""
        armed = self.b.armed.get(site.addr)
        if armed is None or armed.hook:
            return
        if site.addr not in self._originals:
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
            self._targets[target] = func
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
        """The switches C made since Python last ran, in order (the backend's `_drain`)."""
        lib, ns = self.lib, self.ns
        n = lib.ns_journal_count(ns)
        if not n:
            return
        data = ctypes.string_at(lib.ns_journal(ns), n * strictlib.JOURNAL_ENTRY.size)
        lib.ns_journal_clear(ns)
        b, armed, targets, chain = self.b, self.b.armed, self._targets, self._chain
        self.replaying = True
        try:
            # each a call or return C switched: the same switch on Python's state
            for kind, site, target in strictlib.JOURNAL_ENTRY.iter_unpack(data):
                current = armed[site].func
                if kind == native.EV_CALL:
                    callee = targets[target]
                    b._called(current, callee)
                    chain.append((callee.start, callee.end))
                else:
                    b._returned_strict(current, target)
                    del chain[len(b.chain):]
        finally:
            self.replaying = False

    def patched(self, site: Site, func: int) -> None:
        """`_arm_site` for a breakpoint C wrote: one patch, one cache removal."""
        b, original = self.b, self._originals[site.addr]
        b.stats["patches"] += 1
        b.stats["cache_removals"] += 1
        b.armed[site.addr] = Armed(site, func, original=original)
        if b.guard is not None:
            b.guard.patched(site.addr, original, b.breakpoint_bytes(site))

    def restored(self, addr: int) -> None:
        """`_disarm_site` for original bytes C wrote back: one patch, one cache removal."""
        b = self.b
        b.armed.pop(addr)
        if b.guard is not None:
            b.guard.restored(addr)
        b.stats["patches"] += 1
        b.stats["cache_removals"] += 1

    def switches(self) -> int:
        return int(self.lib.ns_switches(self.ns))

    def close(self) -> None:
        self.lib.ns_free(self.ns)
        self.ns = None
