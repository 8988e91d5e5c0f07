"""`step`: observe every instruction (a global code hook), classify calls, returns and tail
jumps with the ISA's classifiers — slow and simple, the ground truth the other backends are
compared with.

A classified instruction is resolved on the next instruction executed (after the delay slot
on ISAs that have one): it took effect if the PC did not fall through.  Time is the number of
guest instructions executed before the event's instruction.

One class on every engine: `StepBackend` is composed with a `StepEngine` — the Python
reference (`ReferenceStep`: a Python code hook), the Unicorn hot path (step_native.py
`StepHotPath`: step.c's code hook) or the native target's C loop (step_ptrace.py
`StepLoop`: quiet single-steps counted in C) — which it tells what it decodes and resolves
and around which it brackets its Python sections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from emutrace.backends.args import ArgReader, handler_frame
from emutrace.backends.tails import TailRule
from emutrace.discover.callabi import CallTypes
from emutrace.discover.decode import Decoder
from emutrace.discover.symbols import read_symbols
from emutrace.elf import Image
from emutrace.isa.base import NO_FLOW, Flow, FlowKind
from emutrace.target.protocol import Target
from emutrace.trace.events import (
    Call,
    Event,
    Return,
    SignalDelivery,
    TailCall,
    TrapReturn,
)
from emutrace.trace.values import Value

if TYPE_CHECKING:
    from emutrace.trace.shadow import ShadowStack
    from emutrace.trace.uftrace_write import RecordSink


@dataclass
class Pending:
    kind: FlowKind
    site: int
    fallthrough: int
    time: int
    sp: int
    args: tuple[Value, ...]
    countdown: int  # instructions still to run before the effect (delay slots)
    conditional: bool = False
    maybe_return: bool = False  # a jump through an alternate link register (TailRule)
    alt_link: bool = False  # a call through one (trace.events.Call.before_frame)


class StepEngine(Protocol):
    """Where step's per-instruction work runs (the reference, or C): it owns the clock, is
    told what the backend decodes and resolves, and brackets its Python sections."""

    time: int
    native_stats: dict[str, int]

    def attach(self, backend: StepBackend) -> None:
        """The end of the backend's set-up: the engine's hook installed."""
        ...

    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]: ...

    def flow_decoded(self, addr: int, flow: Flow, length: int) -> None: ...

    def resolved(self) -> None: ...

    def thread_leaving(self, tid: int) -> None:
        """Thread tid stops (before the backend swaps its state out)."""
        ...

    def thread_entered(self, tid: int) -> None:
        """Thread tid runs (its state swapped in)."""
        ...

    def trap_entering(self) -> None:
        """Before a trap frame: what C holds onto the backend (its pending transfer)."""
        ...

    def leave(self) -> None:
        """After a Python section: what Python changed, to C."""
        ...

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None: ...

    def flush_events(self) -> None: ...

    def detach(self) -> None:
        """The engine's instruction hook goes (Backend.detach)."""
        ...

    def finish(self) -> None: ...


class ReferenceStep:
    """The Python reference: the backend's own code hook on the target protocol."""

    def __init__(self) -> None:
        self.time = 0
        self.native_stats: dict[str, int] = {}

    def attach(self, backend: StepBackend) -> None:
        backend.code_hook = backend.cpu.hook_code(backend.on_insn)
        self._backend = backend

    def detach(self) -> None:
        b = self._backend
        b.cpu.hook_del(b.code_hook)
        b.code_hook = 0

    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        return emit

    def flow_decoded(self, addr: int, flow: Flow, length: int) -> None:
        pass

    def resolved(self) -> None:
        pass

    def thread_leaving(self, tid: int) -> None:
        pass

    def thread_entered(self, tid: int) -> None:
        pass

    def trap_entering(self) -> None:
        pass

    def leave(self) -> None:
        pass

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None:
        pass

    def flush_events(self) -> None:
        pass

    def finish(self) -> None:
        pass


class StepBackend:
    name = "step"

    def __init__(self, image: Image, cpu: Target, emit: Callable[[Event], None],
                 types: CallTypes | None = None, engine: StepEngine | None = None) -> None:
        self.image = image
        self.cpu = cpu
        self.engine: StepEngine = engine or ReferenceStep()
        self.emit = self.engine.wrap_emit(emit)
        self.decoder = Decoder(image)
        self.cls = self.decoder.cls
        self.tails = TailRule(read_symbols(image), image.isa.code_mask)
        self.delay = self.cls.delay_bytes
        regs = image.isa.registers
        # values are read when a transfer resolves: at the callee's first instruction, or
        # at the return's target
        self.args = ArgReader(cpu, types or CallTypes.for_image(image), at_entry=True)
        self.sp_reg, self.ret_reg = regs.sp, regs.retval
        self.pending: Pending | None = None
        self._tid = 0  # the guest thread running (switch_thread)
        self._thread_state: dict[int, tuple[Pending | None, list[int], list[int | None]]] = {}
        self.flows: dict[int, tuple[Flow, int]] = {}
        self.stats = {"steps": 0, "calls": 0, "returns": 0, "tail_calls": 0}
        self.code_hook = 0  # the reference's Python hook (ReferenceStep, StepLoop)
        self._finished = False
        self.engine.attach(self)

    @property
    def time(self) -> int:
        """Guest instructions run (the engine keeps the count: C's, natively)."""
        return self.engine.time

    @time.setter
    def time(self, value: int) -> None:
        self.engine.time = value

    @property
    def native_stats(self) -> dict[str, int]:
        return self.engine.native_stats

    def attach_writer(self, shadow_now: Callable[[], ShadowStack],
                      sink_now: Callable[[], RecordSink]) -> None:
        self.engine.attach_writer(shadow_now, sink_now)

    def flush_events(self) -> None:
        self.engine.flush_events()

    # ------------------------------------------------------------ classification
    def flow_of(self, addr: int, size: int) -> tuple[Flow, int]:
        """(flow, size) of the instruction at addr (the engine told)."""
        thumb = self.cpu.in_alt_mode()
        got = self.decoder.flow_at(addr, thumb)
        flow, length = (NO_FLOW, size) if got is None else (got[0], got[1].size)
        self.engine.flow_decoded(addr, flow, length)
        return flow, length

    # ------------------------------------------------------------ the hook
    def on_insn(self, uc: Any, addr: int, size: int, _d: object) -> None:
        time = self.time
        self.time += 1
        pending = self.pending
        if pending is not None:
            if pending.countdown:
                pending.countdown -= 1
            else:
                self.pending = None
                self.resolve(pending, addr)
        entry = self.flows.get(addr)
        if entry is None:
            entry = self.flows[addr] = self.flow_of(addr, size)
        flow, length = entry
        if flow.kind is FlowKind.NONE or flow.kind is FlowKind.STOP:
            return
        cpu = self.cpu
        args: tuple[Value, ...] = ()
        self.pending = Pending(flow.kind, addr, addr + length + self.delay, time,
                               cpu.reg_read(self.sp_reg), args, 1 if self.delay else 0,
                               flow.conditional, flow.maybe_return, flow.alt_link)

    def resolve(self, p: Pending, pc: int) -> None:
        """The transfer p took effect at pc (or not): its event; then the engine told."""
        self._transfer(p, pc)
        self.engine.resolved()

    def _transfer(self, p: Pending, pc: int) -> None:
        kind = self.tails.taken(p.kind, p.conditional, p.maybe_return, pc, p.fallthrough)
        if kind is None:
            return
        if kind is FlowKind.CALL:
            self.stats["calls"] += 1
            self.tails.called(pc, p.fallthrough)
            self.emit(Call(p.time, p.site, pc, p.sp, p.fallthrough, self.args.read(pc),
                           p.alt_link))
        elif kind is FlowKind.RETURN:
            self.stats["returns"] += 1
            self.tails.returned()
            self.emit(Return(p.time, p.site, p.sp, self.args.read_return(p.site), pc))
        elif self.tails.is_tail(pc):
            self.stats["tail_calls"] += 1
            self.emit(TailCall(p.time, p.site, pc, p.sp, self.args.read(pc)))

    def switch_thread(self, tid: int) -> None:
        """Another guest thread gets the CPU: the transfer awaiting its next instruction
        and the tail rule's frames belong to the thread that stops (as Int3Backend)."""
        self.engine.thread_leaving(self._tid)
        self._thread_state[self._tid] = (self.pending, self.tails.frames,
                                         self.tails.return_addrs)
        state = self._thread_state.pop(tid, None)
        self._tid = tid
        self.pending, self.tails.frames, self.tails.return_addrs = state or (None, [], [])
        self.engine.thread_entered(tid)

    def finish(self) -> int:
        if not self._finished:
            self._finished = True
            self.engine.finish()
            self.stats["steps"] = self.time
        return self.time

    def detach(self) -> None:
        """(Backend.detach.)  The engine's instruction hook goes: nothing is seen."""
        self.pending = None
        self.engine.detach()

    def start(self, entry: int) -> None:
        """Nothing to arm: the global code hook sees everything."""

    def trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None:
        """The trapping instruction was counted by its hook (a trap taken after it, as
        `svc`; or on it, as an undefined instruction, which then never ran).  A signal
        delivered between blocks comes after a call, return or jump whose next
        instruction has not run yet: it went to the interrupted code (`resume`), not to
        the handler."""
        self.engine.trap_entering()
        pending, self.pending = self.pending, None  # a trap ends no call, return or jump
        if signal is not None and pending is not None and not pending.countdown:
            self.resolve(pending, signal.resume)
        self.emit(handler_frame(self.time, self.cpu, vector, signal, self.args))
        self.engine.leave()

    def context_loaded(self, site: int, target: int) -> None:
        """(Int3Backend.context_loaded.)  A context loaded inside the system call at site
        goes on at target with no branch: at a function's entry, a jump into it."""
        if not self.tails.is_tail(target):
            return
        self.engine.trap_entering()
        self.pending = None  # (none is left by a system call)
        self.emit(TailCall(self.time, site, target, self.cpu.reg_read(self.sp_reg),
                           self.args.read(target)))
        self.engine.leave()

    def trap_returned(self, site: int) -> None:
        """The exception return at site runs next."""
        self.emit(TrapReturn(self.time, site))
        self.engine.leave()

