"""`int3` on the native target with the C loop (`--target native`, engine native: the
default where the library is built): the algorithm of backends/int3.py, with the traps at
armed sites whose work is only an event finished in C (emutrace/native/ploop.c) — the lazy
fast path of backends/int3_native.py, over ptrace instead of Unicorn.

C finishes a trap at a site `FastSites` gave it (a call to an armed function whose
arguments are integer words, a return, a jump learnt to record nothing): it simulates the
instruction with GETREGS/SETREGS and a word written to the stack, and appends a record.
With strict cleanup C also arms and disarms at those calls and returns, as the Python path
does (`StrictSites`, backends/strict_ptrace.py), when it knows the functions involved.
Everything else reaches this class through the run loop as under the Python loop: first
calls (discovery and arming), site hooks, fallbacks.  The records are drained
(`RecordDrain`) each time C returns, before Python handles anything: the event stream is
the Python loop's (tests/test_native_loop.py)."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends.fastpath import FastSites, RecordDrain
from emutrace.backends.int3_python import Int3Backend, Pending
from emutrace.backends.strict_ptrace import StrictSites
from emutrace.discover import Function, Site
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.native.ploop import C_RESUMES, C_RETURNED, C_SIMULATED, C_TRAPS, PtraceLoop
from emutrace.target.ptrace import PtraceTarget
from emutrace.target.ptrace_run import NativeTrapHooks
from emutrace.trace.events import Event


class PtraceInt3Backend(Int3Backend):
    name = "int3"

    def __init__(self, image: Image, target: PtraceTarget, hooks: NativeTrapHooks,
                 emit: Callable[[Event], None], loop: PtraceLoop, cleanup: str = "lazy",
                 types: CallTypes | None = None) -> None:
        self._strict: StrictSites | None = None  # (before arming: super() arms nothing)
        super().__init__(image, target, hooks, emit, cleanup, types)
        self._loop = loop
        self._fast = FastSites(self, loop, target.reg_id, len(loop.arg_names) + loop.n_stack,
                               strict_in_c=True, strict_jumps=True)
        records = RecordDrain(self, target, emit, loop.arg_names, loop.ret_names, loop.n_stack)
        loop.on_records = records.drain
        loop.time = lambda: self.time
        if self.strict:
            strict = self._strict = StrictSites(self, target, loop, self._fast)
            records.after_event = strict.replayed
            loop.before_resume = strict.before_resume
            loop.after_resume = strict.after_resume
        self.native_stats: dict[str, int] = {}

    def _take(self, func: Function | None) -> bool:
        took = super()._take(func)
        if took and self._strict is not None:
            assert func is not None
            self._strict.taken(func)
        return took

    def _disarm(self, func_start: int) -> None:
        if self._strict is not None and func_start in self.armed_funcs:
            self._strict.dropped(func_start)
        super()._disarm(func_start)

    def _rearm(self, old: Function, new: Function) -> None:
        super()._rearm(old, new)
        if self._strict is not None:
            self._strict.taken(new)

    def _arm_site(self, site: Site, func: int) -> None:
        super()._arm_site(site, func)
        if self._strict is not None:
            if self._strict.replaying:
                return  # (C has armed it)
            self._strict.site_armed(site, func)
        self._fast.armed(site)

    def _disarm_site(self, addr: int) -> None:
        super()._disarm_site(addr)
        if self._strict is not None:
            if self._strict.replaying:
                return
            self._strict.site_disarmed(addr)
        self._fast.disarmed(addr)

    def _resolve(self, p: Pending, target: int) -> None:
        self._fast.resolve(p, target, super()._resolve)
        if self._strict is not None:
            self._strict.resolved(p, target)

    def finish(self) -> int:
        loop = self._loop
        if not self.native_stats:  # (once: the counters join the Python path's)
            self.stats["traps"] += loop.counter(C_TRAPS)
            self.stats["simulated"] += loop.counter(C_SIMULATED)
            # where the stops went (bench's profile; not a mechanism counter)
            self.native_stats = {"c_traps": loop.counter(C_TRAPS),
                                 "python_stops": loop.counter(C_RETURNED),
                                 "c_resumes": loop.counter(C_RESUMES)}
        return super().finish()
