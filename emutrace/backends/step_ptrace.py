"""`step`'s engine on the native target with the C loop (`StepLoop`, engine native): the
backend of step_python.py unchanged, with the single-steps whose hook C can take done in C
(native/ploop.c `pl_step`, through step.c's hook body `st_step_quietly` and its pending
transfer) and counted in a batch.

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
from emutrace.native import steplib
from emutrace.native.ploop import PtraceLoop
from emutrace.target.ptrace import PtraceTarget
from emutrace.trace.events import Event
from emutrace.trace.shadow import ShadowStack
from emutrace.trace.uftrace_write import RecordSink

QUIET_KINDS = (FlowKind.NONE, FlowKind.STOP)
CALL_OR_RETURN = (FlowKind.CALL, FlowKind.RETURN)
_K_JUMP = 3  # abi.h K_*: the kinds C tells apart in a waiting transfer
_KIND_CODE = {FlowKind.CALL: 1, FlowKind.RETURN: 2, FlowKind.JUMP: _K_JUMP}


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

    def attach(self, backend: StepBackend) -> None:
        self.b = backend
        self._reference.attach(backend)
        self._tell_entries()
        self._loop.pending_in = self._pending_in
        self._loop.took = self._took
        self._loop.pending_out = self._pending_out

    def _tell_entries(self) -> None:
        new = self.b.tails.entries - self._entries_told
        for addr in new:
            self._loop.entry_add(addr)
        self._entries_told |= new

    def _pending_in(self) -> tuple[int, list[int] | None]:
        """The clock, and the waiting transfer as step.c's words (its kind, flags and
        countdown say whether C may resolve it)."""
        p = self.b.pending
        if p is None:
            return self.time, None
        kind = _KIND_CODE.get(p.kind, _K_JUMP)  # (a branch or execute waits as a jump)
        flow = kind << steplib.KIND_SHIFT
        if p.conditional:
            flow |= steplib.CONDITIONAL
        if p.maybe_return:
            flow |= steplib.MAYBE_RETURN
        return self.time, [flow, p.site, p.fallthrough, p.time, p.sp, p.countdown]

    def _took(self, n: int) -> None:
        self.time += n
        self.native_stats["c_steps"] += n

    def _pending_out(self, words: list[int] | None) -> None:
        """C took hooks: its waiting transfer (a jump, or none) is the backend's."""
        if words is None:
            self.b.pending = None
            return
        flow, site, fallthrough, time, sp, _countdown = words
        self.b.pending = StepPending(FlowKind.JUMP, site, fallthrough, time, sp, (), 0,
                                     bool(flow & steplib.CONDITIONAL))

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
