"""The native target's C loop as the site tracer's engine (`PtraceLoopEngine`, `--target
native`, engine native: the default where the library is built): the algorithm of
int3_python.py, with the traps at armed sites whose work is only an event finished in C
(emutrace/native/ploop.c) — the lazy fast path of the Unicorn hot path (int3_native.py),
over ptrace instead of Unicorn.

C finishes a trap at a site `FastSites` gave it (a call to an armed function whose
arguments are integer words, a return, a jump learnt to record nothing): it simulates the
instruction with GETREGS/SETREGS and a word written to the stack, and appends a record.
With strict cleanup C also arms and disarms at those calls and returns, as the Python path
does (`StrictSites`, backends/strict_ptrace.py), when it knows the functions involved;
entry's probes are C's too where it can step over them (`EntryProbesInLoop`,
entry_ptrace.py).  Everything else reaches the tracer through the run loop as under the
Python loop: first calls (discovery and arming), site hooks, fallbacks.  The records are
drained (`RecordDrain`) each time C returns, before Python handles anything: the event
stream is the Python loop's (tests/test_native_loop.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from emutrace.backends.fastpath import FastSites, RecordDrain
from emutrace.backends.int3_python import Int3Backend, Pending
from emutrace.backends.native_writer import NativeWriter, packed_sink_of
from emutrace.backends.site_engine import install_python_hooks
from emutrace.backends.strict_ptrace import StrictSites
from emutrace.discover import Function, Site
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.native.ploop import (
    C_RESUMES,
    C_RETURNED,
    C_SIMULATED,
    C_STRINGS,
    C_TRAPS,
    C_WRITTEN,
    PtraceLoop,
)
from emutrace.target.ptrace import PtraceTarget
from emutrace.target.ptrace_run import NativeTrapHooks
from emutrace.trace.events import Event

if TYPE_CHECKING:
    from emutrace.target.protocol import TrapHooks
    from emutrace.trace.shadow import ShadowStack
    from emutrace.trace.uftrace_write import RecordSink


class LoopSites(Protocol):
    """What a mechanism keeps in the C loop beside the fast sites (strict cleanup's
    `StrictSites`, entry's `EntryProbesInLoop`): told what the tracer arms."""

    def site_armed(self, site: Site, func: int) -> None:
        """(Including `FastSites.armed` where the site is the fast path's.)"""
        ...

    def site_disarmed(self, addr: int) -> None: ...


class PtraceLoopEngine:
    """The site tracer's engine (site_engine.SiteEngine) on the native target's C loop.
    The Python side's hooks are the reference's (the run loop delivers them); C's records
    are drained each time C hands the tracee back."""

    t: Int3Backend

    def __init__(self, target: PtraceTarget, loop: PtraceLoop, emit: Callable[[Event], None],
                 strict_in_c: bool = False, learn_on_resolve: bool = True) -> None:
        """strict_in_c: C arms and disarms at the calls and returns it finishes (int3
        strict); learn_on_resolve: each resolved transfer teaches C what it may finish next
        (entry's probes see calls themselves)."""
        self.target, self.loop, self._emit_now = target, loop, emit
        self.time = 0  # (Python's clock: C reads it when it runs, `loop.time`)
        self.native_stats: dict[str, int] = {}
        self._strict_in_c, self._learn = strict_in_c, learn_on_resolve
        self.strict: StrictSites | None = None
        self.sites: LoopSites | None = None  # a mechanism's own C sites (None: FastSites)
        self.counters: list[Callable[[dict[str, int]], None]] = []  # C's counts, at finish
        self.on_leave: Callable[[], None] | None = None
        self.writer: NativeWriter | None = None  # `record`, `run`: C writes the records

    def attach(self, tracer: Int3Backend, hooks: TrapHooks) -> None:
        self.t = tracer
        target, loop = self.target, self.loop
        install_python_hooks(tracer, hooks)
        self.fast = FastSites(tracer, loop, target.reg_id, len(loop.arg_names) + loop.n_stack,
                              strict_in_c=self._strict_in_c, strict_jumps=self._strict_in_c)
        self.records = RecordDrain(tracer, target, self._emit_now, loop.arg_names,
                                   loop.ret_names, loop.n_stack)
        loop.on_records = self.records.drain
        loop.time = lambda: tracer.time
        if self._strict_in_c and tracer.strict:
            strict = self.strict = StrictSites(tracer, target, loop, self.fast)
            self.sites = strict
            self.records.after_event = strict.replayed
            loop.before_resume = strict.before_resume
            loop.after_resume = strict.after_resume

    # ------------------------------------------------------------ sections
    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        return emit

    def enter(self) -> None:
        pass

    def leave(self) -> None:
        if self.on_leave is not None:
            self.on_leave()

    def pause(self) -> None:
        pass

    def thread_switched(self) -> None:
        self.leave()

    def block_entered(self) -> None:
        pass

    # ------------------------------------------------------------ the tracer's changes
    def site_arming(self, site: Site) -> None:
        pass

    def site_armed(self, site: Site, func: int) -> None:
        if self.sites is not None:
            self.sites.site_armed(site, func)
        else:
            self.fast.armed(site)

    def site_disarmed(self, addr: int) -> None:
        if self.sites is not None:
            self.sites.site_disarmed(addr)
        else:
            self.fast.disarmed(addr)

    def function_taken(self, func: Function) -> None:
        if self.strict is not None:
            self.strict.taken(func)

    def function_dropped(self, start: int) -> None:
        if self.strict is not None:
            self.strict.dropped(start)

    def rearming(self, old: Function, new: Function) -> None:
        if self.strict is not None:
            self.strict.taken(new)

    def stale_found(self, starts: set[int]) -> None:
        pass

    def code_written(self) -> None:
        pass

    def hook_in_table(self, handle: int) -> bool:
        return False

    def resolve(self, p: Pending, target: int, reference: Callable[[Pending, int], None]
                ) -> None:
        if not self._learn:
            reference(p, target)
            return
        self.fast.resolve(p, target, reference)
        if self.strict is not None:
            self.strict.resolved(p, target)

    # ------------------------------------------------------------ end
    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None:
        """`record` and `run` under lazy cleanup: C's record writer takes the calls and
        returns C finishes (native_writer.py, as on the Unicorn port).  Not under strict
        cleanup (its replay reads every record), nor for entry or hwbp (their records are
        not offered to the writer)."""
        packed = packed_sink_of(sink_now())
        loop = self.loop
        if (packed is None or self.writer is not None or not self._learn or self.t.strict
                or self.sites is not None or loop.hw_in is not None):
            return
        self.writer = NativeWriter(loop.lib, None, shadow_now(), self.t.tails, sink_now, packed,
                                   attach=loop.set_writer)
        self.records.writer = self.writer
        loop.writer = self.writer

    def flush_events(self) -> None:
        pass

    def detach(self) -> None:
        """(A native target's forked children run untraced: no detach is asked.)"""

    def finish(self) -> None:
        loop, stats = self.loop, self.t.stats
        stats["traps"] += loop.counter(C_TRAPS)
        stats["simulated"] += loop.counter(C_SIMULATED)
        for count in self.counters:
            count(stats)
        # where the stops went (bench's profile; not a mechanism counter)
        self.native_stats.update({"c_traps": loop.counter(C_TRAPS),
                                  "python_stops": loop.counter(C_RETURNED),
                                  "c_resumes": loop.counter(C_RESUMES),
                                  "c_strings": loop.counter(C_STRINGS),
                                  "c_written": loop.counter(C_WRITTEN)})
        if self.writer is not None:
            loop.writer = None
            self.writer.close()


def loop_of(target: PtraceTarget) -> PtraceLoop:
    """The target's C loop (the native session makes one when the engine is native)."""
    loop = target.c_loop
    assert loop is not None, "the native engine without a C loop"
    return cast(PtraceLoop, loop)


def create(image: Image, target: PtraceTarget, hooks: NativeTrapHooks,
           emit: Callable[[Event], None], loop: PtraceLoop, cleanup: str = "lazy",
           types: CallTypes | None = None) -> Int3Backend:
    """int3 on the native target's C loop: the site tracer over a `PtraceLoopEngine`."""
    engine = PtraceLoopEngine(target, loop, emit, strict_in_c=True)
    return Int3Backend(image, target, hooks, emit, cleanup, types, engine=engine)
