"""`step`: observe every instruction (a global code hook), classify calls, returns and tail
jumps with the ISA's classifiers — slow and simple, the ground truth the other backends are
compared with.

A classified instruction is resolved on the next instruction executed (after the delay slot
on ISAs that have one): it took effect if the PC did not fall through.  Time is the number of
guest instructions executed before the event's instruction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import unicorn

from emutrace.backends.args import ArgReader
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
    Trap,
    TrapReturn,
)
from emutrace.trace.values import Value


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


class StepBackend:
    name = "step"

    def __init__(self, image: Image, cpu: Target, emit: Callable[[Event], None],
                 types: CallTypes | None = None) -> None:
        self.image = image
        self.cpu = cpu
        self.emit = emit
        self.decoder = Decoder(image)
        self.cls = self.decoder.cls
        self.tails = TailRule(read_symbols(image), image.isa.code_mask)
        self.delay = self.cls.delay_bytes
        regs = image.isa.registers
        # values are read when a transfer resolves: at the callee's first instruction, or
        # at the return's target
        self.args = ArgReader(cpu, types or CallTypes.for_image(image), at_entry=True)
        self.sp_reg, self.ret_reg = regs.sp, regs.retval
        self.time = 0
        self.pending: Pending | None = None
        self._tid = 0  # the guest thread running (switch_thread)
        self._thread_state: dict[int, tuple[Pending | None, list[int], list[int | None]]] = {}
        self.flows: dict[int, tuple[Flow, int]] = {}
        self.stats = {"steps": 0, "calls": 0, "returns": 0, "tail_calls": 0}
        self.code_hook = cpu.hook_code(self._on_insn)

    # ------------------------------------------------------------ classification
    def _flow(self, addr: int, size: int) -> tuple[Flow, int]:
        """(flow, size) of the instruction at addr, decoded once."""
        thumb = self.cpu.in_alt_mode()
        got = self.decoder.flow_at(addr, thumb)
        if got is None:
            return NO_FLOW, size
        return got[0], got[1].size

    # ------------------------------------------------------------ the hook
    def _on_insn(self, uc: unicorn.Uc, addr: int, size: int, _d: object) -> None:
        time = self.time
        self.time += 1
        pending = self.pending
        if pending is not None:
            if pending.countdown:
                pending.countdown -= 1
            else:
                self.pending = None
                self._resolve(pending, addr)
        entry = self.flows.get(addr)
        if entry is None:
            entry = self.flows[addr] = self._flow(addr, size)
        flow, length = entry
        if flow.kind is FlowKind.NONE or flow.kind is FlowKind.STOP:
            return
        cpu = self.cpu
        args: tuple[Value, ...] = ()
        self.pending = Pending(flow.kind, addr, addr + length + self.delay, time,
                               cpu.reg_read(self.sp_reg), args, 1 if self.delay else 0,
                               flow.conditional, flow.maybe_return, flow.alt_link)

    def _resolve(self, p: Pending, pc: int) -> None:
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
        self._thread_state[self._tid] = (self.pending, self.tails.frames,
                                         self.tails.return_addrs)
        state = self._thread_state.pop(tid, None)
        self._tid = tid
        self.pending, self.tails.frames, self.tails.return_addrs = state or (None, [], [])

    def finish(self) -> int:
        self.stats["steps"] = self.time
        return self.time

    def start(self, entry: int) -> None:
        """Nothing to arm: the global code hook sees everything."""

    def trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None:
        """The trapping instruction was counted by its hook (a trap taken after it, as
        `svc`; or on it, as an undefined instruction, which then never ran).  A signal
        delivered between blocks comes after a call, return or jump whose next
        instruction has not run yet: it went to the interrupted code (`resume`), not to
        the handler."""
        pending, self.pending = self.pending, None  # a trap ends no call, return or jump
        if signal is not None and pending is not None and not pending.countdown:
            self._resolve(pending, signal.resume)
        self.emit(Trap(self.time, vector, self.cpu.reg_read(self.sp_reg),
                       signal.stack if signal is not None else None))

    def trap_returned(self, site: int) -> None:
        """The exception return at site runs next."""
        self.emit(TrapReturn(self.time, site))

