"""`step` on the native target with the C loop (engine native): backends/step.py's
algorithm unchanged, with the single-steps whose hook would only count the instruction
taken by C (native/ploop.c `pl_step`) and counted in a batch.

C takes the hook at an instruction the decoder classified as no transfer (FlowKind NONE
or STOP: "quiet"; `_on_insn` returns after `time += 1`) when no transfer awaits
resolution there, or when the one that does is a jump that records nothing: a conditional
one that fell through, or one to an address that is not among the tail rule's entries
(`TailRule.is_tail` is then false and changes nothing).  The entries are mirrored in C as
they grow (every call target).  Every other hook runs here, in Python, on the live tracee,
so values are read as the reference reads them."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends.step import Pending as StepPending
from emutrace.backends.step import StepBackend
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.isa.base import Flow, FlowKind
from emutrace.native.ploop import QUIET, QUIET_JUMP, QUIET_NONE, PtraceLoop
from emutrace.target.ptrace import PtraceTarget
from emutrace.trace.events import Event

QUIET_KINDS = (FlowKind.NONE, FlowKind.STOP)


class PtraceStepBackend(StepBackend):
    def __init__(self, image: Image, target: PtraceTarget, emit: Callable[[Event], None],
                 loop: PtraceLoop, types: CallTypes | None = None) -> None:
        super().__init__(image, target, emit, types)
        self._loop = loop
        self._entries_told: set[int] = set()
        self._tell_entries()
        loop.quiet_ready = self._quiet_now
        loop.on_quiet = self._took
        self.native_stats: dict[str, int] = {"c_steps": 0, "c_jumps": 0}

    def _tell_entries(self) -> None:
        new = self.tails.entries - self._entries_told
        for addr in new:
            self._loop.entry_add(addr)
        self._entries_told |= new

    def _quiet_now(self) -> tuple[int, int, bool]:
        p = self.pending
        if p is None:
            return QUIET, 0, False
        if (p.kind in (FlowKind.CALL, FlowKind.RETURN) or p.maybe_return or p.countdown):
            return QUIET_NONE, 0, False
        return QUIET_JUMP, p.fallthrough, p.conditional

    def _took(self, n: int, consumed: bool) -> None:
        if consumed:
            self.pending = None
            self.native_stats["c_jumps"] += 1
        self.time += n
        self.native_stats["c_steps"] += n

    def _flow(self, addr: int, size: int) -> tuple[Flow, int]:
        got = super()._flow(addr, size)
        if got[0].kind in QUIET_KINDS:
            self._loop.quiet_add(addr)  # its hook from now on: C's count
        return got

    def _resolve(self, p: StepPending, pc: int) -> None:
        super()._resolve(p, pc)
        if len(self.tails.entries) != len(self._entries_told):
            self._tell_entries()  # a call made its target an entry
