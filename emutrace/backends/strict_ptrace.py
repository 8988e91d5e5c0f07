"""int3 `--cleanup strict` finished in the native target's C loop (native/ploop.c
pl_strict_*): what C must know to arm and disarm as `Int3Backend._transfer` does, and the
replay of C's work on the backend's own tables.

Strict cleanup keeps only the current function armed: at every call and return the
caller's or callee's breakpoints are written or removed.  C does it at the traps it
finishes when it knows every function involved, so Python tells it:

* each function the backend arms (`taken`): its extent, its sites with the program's byte
  under each, and whether C may write them (`ok`: every site a breakpoint — not a site
  hook — outside the target's own hook breakpoints, in code discovery decoded);
* which function each armed site is armed for (`site_armed`/`site_disarmed`), which
  functions are armed, which function a call target enters (`resolved`);
* the call chain, whenever Python changed it (`before_resume`).

The records C wrote are drained in order; after each, `replayed` runs the backend's own
bookkeeping (`called`, `returned`: the strict cleanup's rule) with the patch writes going
to `_Written`, which only keeps the target's record of patched bytes (`PtraceTarget.originals`): the
armed tables, the call chain and the counters (patches, functions) are the Python path's
(tests/test_native_loop.py compares them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from emutrace import native
from emutrace.discover import Function, Site, SiteKind
from emutrace.native.ploop import PtraceLoop
from emutrace.target.ptrace import PtraceTarget

if TYPE_CHECKING:
    from emutrace.backends.fastpath import FastSites
    from emutrace.backends.int3_python import Int3Backend, Pending


class _Written:
    """The target during a replay: C has written the bytes already; a write only keeps
    `originals` as PtraceTarget._poke does, a read of a site gives the program's byte."""

    def __init__(self, target: PtraceTarget, program: dict[int, int]) -> None:
        self._target, self._program = target, program

    def mem_read(self, addr: int, size: int) -> bytes:
        return bytes(self._program[addr + i] for i in range(size))

    def write_code(self, addr: int, data: bytes) -> None:
        originals = self._target.originals
        for i, byte in enumerate(data):
            old = originals.setdefault(addr + i, self._program[addr + i])
            if byte == old:
                del originals[addr + i]

    def drop_code_cache(self, begin: int, end: int) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class StrictSites:
    """Strict cleanup in the C loop: composed into the ptrace engine (int3_ptrace.py) when
    cleanup is strict."""

    def __init__(self, backend: Int3Backend, target: PtraceTarget, loop: PtraceLoop,
                 fast: FastSites) -> None:
        self.b, self.target, self.loop, self.fast = backend, target, loop, fast
        loop.strict_enable()
        self.program: dict[int, int] = {}  # site → the program's byte there
        self._written = _Written(target, self.program)
        self._funcs: dict[int, Function] = {}  # start → the function object told to C
        self._ok: dict[int, bool] = {}
        self._sent: list[tuple[int, int]] = []  # the chain as C has it
        self.replaying = False

    # ------------------------------------------------------------ told to C
    def taken(self, func: Function) -> None:
        """The backend entered func in armed_funcs (`take`, or `_rearm` with a new extent)."""
        if self.replaying:
            return
        loop = self.loop
        if self._funcs.get(func.start) is not func:
            self._funcs[func.start] = func
            ok = self._usable(func)
            self._ok[func.start] = ok
            sites = []
            for site in func.sites:
                byte = self.program.get(site.addr)
                if byte is None:
                    byte = self.target.originals.get(site.addr)
                    if byte is None:
                        byte = self.target.mem_read_raw(site.addr)
                    self.program[site.addr] = byte
                sites.append((site.addr, byte))
            loop.strict_func(func.start, func.end, ok, sites)
        loop.strict_func_armed(func.start, True)

    def _usable(self, func: Function) -> bool:
        b, points = self.b, self.target.points
        return (b.delivery == "patch" and not b.by_hook(func.start) and b.traceable(func)
                and b.bp is not None and len(b.bp.encoding) == 1
                and not any(s.addr in points or s.alt_mode for s in func.sites))

    def dropped(self, start: int) -> None:
        if not self.replaying:
            self.loop.strict_func_armed(start, False)

    def site_armed(self, site: Site, func: int) -> None:
        """(The engine's `LoopSites`: a site C armed itself is C's already.)"""
        if self.replaying:
            return
        armed = self.b.armed.get(site.addr)
        if armed is not None and armed.func == func:
            self.loop.strict_owner(site.addr, func)
        self.fast.armed(site)

    def site_disarmed(self, addr: int) -> None:
        if self.replaying:
            return
        self.loop.strict_owner(addr, 0)
        self.fast.disarmed(addr)

    def resolved(self, p: Pending, target: int) -> None:
        """After the backend resolved a transfer: a call C may finish from now on (into an
        armed function C may write, with integer-word arguments)."""
        if p.site.kind is not SiteKind.CALL:
            return
        b = self.b
        func = b.function_entered(target)
        if (func is not None and b.armed_funcs.get(func.start) is func
                and self._funcs.get(func.start) is func and self._ok.get(func.start)
                and self.fast.args_fast(target)):
            self.loop.strict_callee(target, func.start)
            self.fast.tell_string_args(target, target)  # (C copies `char *` values)
            self.loop.callee_add(target)

    def before_resume(self) -> None:
        chain = [(f.start, f.end) for f in self.b.chain]
        if chain != self._sent:
            self.loop.strict_chain(chain)
            self._sent = chain

    def after_resume(self) -> None:
        self._sent = [(f.start, f.end) for f in self.b.chain]

    # ------------------------------------------------------------ C's work, replayed
    def replayed(self, kind: int, site: int, target: int) -> None:
        b = self.b
        here = b.armed.get(site)
        current = here.func if here is not None else None
        chain = b.chain
        # the common case first, with the same outcome as the general one below: a call or
        # return that stays in the current function, which is armed (recursion): only
        # the chain changes (`take` of an armed function is a no-op)
        if current in b.armed_funcs:
            if kind == native.EV_CALL:
                callee = b.function_entered(target)
                if callee is not None and callee.start == current:
                    chain.append(callee)
                    return
            elif len(chain) >= 2 and chain[-2].start == current and target in chain[-2]:
                chain.pop()
                return
        cpu, b.cpu = b.cpu, self._written  # type: ignore[assignment]
        self.replaying = True
        try:
            if kind == native.EV_CALL:
                callee = b.function_entered(target)
                assert callee is not None
                b.called(current, callee)
            else:
                b.returned(current, target)
        finally:
            b.cpu = cpu
            self.replaying = False
