"""The branch tracer (`BranchBackend`) that `bts` and `btf` run, composed of what the
mechanism observes and an engine.

* **What it observes** (`BranchDelivery`): how a taken branch reaches the tracer.  bts: a
  record in the BTS buffer (`RecordBuffer`), decoded when the buffer fills (the BTS
  interrupt), before a signal frame and at the end; the record carries no register values,
  only the sideband sp.  btf: a trap at the branch's target (`BranchTraps`), decoded at
  once on the live CPU (arguments and return values read there).
* **Engine** (`BranchEngine`): what finds the taken branches and keeps the clock.  The
  reference (`ReferenceBranches`: branch.py's `BranchObserver`, a Python block hook, hands
  each branch to the delivery), the Unicorn hot path (branch_native.py `BtsHotPath`,
  `BtfHotPath`: C's block hook, native/branch.c) and the native target's block steps
  (btf_native.py `BlockSteps`: PTRACE_SINGLEBLOCK, its quiet stops in ploop.c with the C
  loop).

Signal handlers (the TrapAware protocol): a handler is entered without a branch, so no
record shows it; the tracer has its engine hand over what it holds first (`drain`), drop
the branch pending at the interruption (`interrupted`), then emits `Trap`; at the handler's
rt_sigreturn it drains again, emits `TrapReturn` and tells the engine (`resumed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from emutrace.backends.args import handler_frame
from emutrace.backends.branch import BranchDecoder, BranchObserver, BranchRecord
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.target.protocol import Target
from emutrace.trace.events import Event, SignalDelivery, TailCall, TrapReturn

DECODER_STATS = ("calls", "returns", "tail_calls")  # BranchDecoder.stats


class BranchDelivery(Protocol):
    """How a taken branch reaches the tracer (module docstring)."""

    live: bool  # decoded at the branch's target with the CPU's registers (no sideband sp)
    counters: tuple[str, ...]  # its own counters, before the decoder's

    def attach(self, backend: BranchBackend) -> None: ...

    def taken(self, rec: BranchRecord) -> None:
        """A taken branch (the engine found it; in the order they were taken)."""
        ...

    def drain(self) -> int:
        """What it holds, decoded and emitted now; how many records that was."""
        ...

    def finish(self) -> None:
        """The run ended: what it still holds, decoded (its counters final)."""
        ...


class RecordBuffer:
    """bts: each taken branch a record in a buffer of `capacity`; a full buffer is the BTS
    interrupt, its records decoded in order.  stats: records, interrupts, drained (records
    decoded at the end: no interrupt)."""

    live: bool = False
    counters: tuple[str, ...] = ("records", "interrupts", "drained")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"bts buffer of {capacity} records: at least 1")
        self.capacity = capacity
        self.records: list[BranchRecord] = []
        self.b: BranchBackend

    def attach(self, backend: BranchBackend) -> None:
        self.b = backend

    def taken(self, rec: BranchRecord) -> None:
        self.records.append(rec)
        stats = self.b.stats
        stats["records"] += 1
        if len(self.records) >= self.capacity:
            stats["interrupts"] += 1
            self.drain()

    def hold(self, records: list[BranchRecord]) -> None:
        """Records an engine buffered and counted itself (C), kept for the next decode."""
        self.records.extend(records)

    def drain(self) -> int:
        records, self.records = self.records, []
        decode = self.b.decode
        for rec in records:
            decode(rec)
        return len(records)

    def finish(self) -> None:
        self.b.stats["drained"] += self.drain()


class BranchTraps:
    """btf: each taken branch a trap at its target, decoded there.  stats: traps."""

    live: bool = True
    counters: tuple[str, ...] = ("traps",)

    def __init__(self) -> None:
        self.b: BranchBackend

    def attach(self, backend: BranchBackend) -> None:
        self.b = backend

    def taken(self, rec: BranchRecord) -> None:
        self.b.stats["traps"] += 1
        self.b.decode(rec)

    def drain(self) -> int:
        return 0

    def finish(self) -> None:
        pass


class BranchEngine(Protocol):
    """What finds the taken branches under a branch tracer and keeps its clock."""

    native_stats: dict[str, int]  # how much of the run C did (bench's profile)
    degraded_at: int | None  # btf natively: where a block step trapped after no branch

    @property
    def time(self) -> int:
        """Guest instructions run (the engine's clock)."""
        ...

    def attach(self, backend: BranchBackend) -> None:
        """The end of the tracer's set-up: the engine's hook installed."""
        ...

    def drain(self) -> None:
        """Before the tracer emits a frame of its own: what the engine holds, emitted."""
        ...

    def interrupted(self) -> None:
        """A signal handler is entered: the branch pending at the interruption never runs."""
        ...

    def resumed(self) -> None:
        """A handler's rt_sigreturn runs next: the interrupted code resumes, no branch."""
        ...

    def flush_events(self) -> None:
        """The end of the run, before the open frames are read: buffered events out."""
        ...

    def detach(self) -> None:
        """The engine's block hook goes (Backend.detach)."""
        ...

    def finish(self) -> None:
        """The run ended: what is held, decoded; the engine's counters into the stats."""
        ...


class ReferenceBranches:
    """The Python reference: branch.py's `BranchObserver` (a block hook on the target
    protocol) hands each taken branch to the delivery."""

    degraded_at: int | None = None

    def __init__(self) -> None:
        self.native_stats: dict[str, int] = {}
        self.observer: BranchObserver
        self.b: BranchBackend

    def attach(self, backend: BranchBackend) -> None:
        self.b = backend
        delivery = backend.delivery
        self.observer = BranchObserver(backend.cpu, backend.decoder, delivery.taken,
                                       sideband_sp=not delivery.live)

    @property
    def time(self) -> int:
        return self.observer.time

    def drain(self) -> None:
        self.b.delivery.drain()

    def interrupted(self) -> None:
        self.observer.interrupted()

    def resumed(self) -> None:
        pass

    def flush_events(self) -> None:
        pass

    def detach(self) -> None:
        self.b.cpu.hook_del(self.observer.hook)

    def finish(self) -> None:
        self.b.delivery.finish()


class BranchBackend:
    """The branch tracer (module docstring): `bts` with a `RecordBuffer`, `btf` with
    `BranchTraps`, on any engine."""

    def __init__(self, name: str, image: Image, cpu: Target, emit: Callable[[Event], None],
                 delivery: BranchDelivery, engine: BranchEngine | None = None,
                 types: CallTypes | None = None) -> None:
        self.name, self.cpu, self.emit = name, cpu, emit
        self.delivery = delivery
        self.engine: BranchEngine = engine or ReferenceBranches()
        self.decoder = BranchDecoder(image, cpu, types, live=delivery.live)
        self.stats = dict.fromkeys((*delivery.counters, *DECODER_STATS), 0)
        self._finished = False
        delivery.attach(self)
        self.engine.attach(self)

    @property
    def time(self) -> int:
        """Guest instructions run (the engine's count)."""
        return self.engine.time

    @property
    def native_stats(self) -> dict[str, int]:
        return self.engine.native_stats

    @property
    def degraded_at(self) -> int | None:
        """btf on the native target: where PTRACE_SINGLEBLOCK trapped after an instruction
        that is no branch (None: it did not, or another engine)."""
        return self.engine.degraded_at

    def decode(self, rec: BranchRecord) -> None:
        """A taken branch's event, if it is one, emitted (in the order taken)."""
        ev = self.decoder.event(rec)
        if ev is not None:
            self.emit(ev)

    def start(self, entry: int) -> None:
        """Nothing to arm: every taken branch is recorded or traps."""

    def trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None:
        """A signal handler's frame, after the branches taken before it."""
        engine = self.engine
        engine.drain()
        engine.interrupted()
        # (decoder.args None: bts records no values)
        self.emit(handler_frame(engine.time, self.cpu, vector, signal, self.decoder.args))

    def context_loaded(self, site: int, target: int) -> None:
        """(Int3Backend.context_loaded.)  A context loaded inside the system call at site
        goes on at target with no branch: at a function's entry, a jump into it, after the
        branches taken before it."""
        decoder = self.decoder
        if not decoder.tails.is_tail(target):
            return
        self.engine.drain()
        args = decoder.args.read(target) if decoder.args is not None else ()
        self.emit(TailCall(self.engine.time, site, target,
                           self.cpu.reg_read(decoder.sp_reg), args))

    def trap_returned(self, site: int) -> None:
        """The handler's rt_sigreturn at site runs next."""
        self.engine.drain()
        self.emit(TrapReturn(self.engine.time, site))
        self.engine.resumed()

    def flush_events(self) -> None:
        self.engine.flush_events()

    def finish(self) -> int:
        if not self._finished:
            self._finished = True
            self.engine.finish()
            self.stats.update(self.decoder.stats)
        return self.time

    def detach(self) -> None:
        """(Backend.detach.)  The engine's block hook goes: no branch is seen."""
        self.engine.detach()
