"""`step`'s engine on the native target with the C loop (`StepLoop`, engine native): the
backend of step_python.py unchanged, with the single-steps whose hook C can take done in C
(native/ploop.c `pl_step`) and counted in a batch.

C takes the hook at an instruction when the reference hook (`on_insn`) would do no more
than (a) resolve a waiting jump that records nothing — a conditional one that fell through,
or one to an address that is not among the tail rule's entries (`TailRule.is_tail` is then
false and changes nothing); the entries are mirrored in C as they grow (every call target)
— and then (b) count the instruction and, for a jump (no call or return, not
`maybe_return`), remember it as waiting.  A jump C remembered and cannot resolve comes back
as this backend's `pending`, with the time and SP the reference would have given it.  Every
other hook (calls, returns, tail calls, code not decoded yet) runs here, in Python, on the
live tracee, so values are read as the reference reads them."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends.step_python import Pending as StepPending
from emutrace.backends.step_python import ReferenceStep, StepBackend
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import Flow, FlowKind
from emutrace.native import ploop
from emutrace.native.ploop import PtraceLoop
from emutrace.target.ptrace import PtraceTarget
from emutrace.trace.events import Event
from emutrace.trace.shadow import ShadowStack
from emutrace.trace.uftrace_write import RecordSink

QUIET_KINDS = (FlowKind.NONE, FlowKind.STOP)
CALL_OR_RETURN = (FlowKind.CALL, FlowKind.RETURN)


class StepLoop:
    """step's engine (step_python.StepEngine) on the native target's C loop: the
    reference's Python hook (the run loop delivers it), with the quiet single-steps C can
    take counted there."""

    b: StepBackend

    def __init__(self, loop: PtraceLoop) -> None:
        self._loop = loop
        self._reference = ReferenceStep()  # (the Python hook and the do-nothing parts)
        self.time = 0
        self.native_stats: dict[str, int] = {"c_steps": 0}
        self._entries_told: set[int] = set()
        self._time_at_step = 0

    def attach(self, backend: StepBackend) -> None:
        self.b = backend
        self._reference.attach(backend)
        self._tell_entries()
        self._loop.pending_in = self._pending_in
        self._loop.took = self._took

    def _tell_entries(self) -> None:
        new = self.b.tails.entries - self._entries_told
        for addr in new:
            self._loop.entry_add(addr)
        self._entries_told |= new

    def _pending_in(self, out: ploop.Pending) -> None:
        self._time_at_step = self.time
        p = self.b.pending
        out.index = ploop.NO_INDEX
        if p is None:
            out.state = ploop.PEND_NONE
        elif p.kind in CALL_OR_RETURN or p.maybe_return or p.countdown:
            out.state = ploop.PEND_PYTHON
        else:
            out.state, out.site, out.fallthrough = ploop.PEND_JUMP, p.site, p.fallthrough
            out.conditional = int(p.conditional)

    def _took(self, n: int, got: ploop.Pending) -> None:
        b = self.b
        if got.state == ploop.PEND_NONE:
            b.pending = None
        elif got.state == ploop.PEND_JUMP and got.index != ploop.NO_INDEX:
            b.pending = StepPending(FlowKind.JUMP, got.site, got.fallthrough,
                                    self._time_at_step + got.index, got.sp, (), 0,
                                    bool(got.conditional))
        self._time_at_step += n
        self.time += n
        self.native_stats["c_steps"] += n

    def flow_decoded(self, addr: int, flow: Flow, length: int) -> None:
        if flow.kind in QUIET_KINDS:
            self._loop.quiet_add(addr)  # its hook from now on: C's count
        elif not (flow.kind in CALL_OR_RETURN or flow.maybe_return or self.b.delay):
            self._loop.jump_add(addr, addr + length, flow.conditional)

    def resolved(self) -> None:
        if len(self.b.tails.entries) != len(self._entries_told):
            self._tell_entries()  # a call made its target an entry

    def wrap_emit(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        return emit

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

    def detach(self) -> None:
        """(A native target's forked children run untraced: no detach is asked.)"""

    def finish(self) -> None:
        pass


def create(image: Image, target: PtraceTarget, emit: Callable[[Event], None],
           loop: PtraceLoop, types: CallTypes | None = None) -> StepBackend:
    """step on the native target's C loop: the backend over a `StepLoop` engine."""
    return StepBackend(image, target, emit, types, engine=StepLoop(loop))
