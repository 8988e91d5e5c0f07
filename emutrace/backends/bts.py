"""`bts`: Intel Branch Trace Store.  Every taken branch appends a record (from, to) to a
buffer in memory; when the buffer is full the CPU raises an interrupt (the BTS buffer
threshold), the tracer decodes the records and empties the buffer.  The program runs
untouched between interrupts: the cost is one interrupt per `bts_buffer` branches.

A record holds the two addresses and nothing else: no register values.  So a call has no
arguments (`Call.args == ()`) and a return no value (`Return.retval is None`) — this is what
BTS gives.  The tracer decodes a record by disassembling `from` (`branch.BranchDecoder`,
with `step`'s rules).  Two sideband values are kept with each record, as a tracer would
get them from a timestamp and the target's stack: the time (instructions executed before
the branch) and the stack pointer at the target, from which the event's sp is derived
(see `branch`).

Taken branches come from `branch.BranchObserver`; records are decoded in the order they
were taken, so the events are the same as if each were decoded at once (TailRule's state
follows the record order, not the decode time).  `finish()` drains what is left in the
buffer; that is not an interrupt.  A crash or exit mid-run loses nothing: the run always
ends with finish().  Hence interrupts == records // bts_buffer.

stats: records, interrupts, drained (records decoded at finish), calls, returns, tail_calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from emutrace.backends import BackendOptions
from emutrace.backends.branch import BranchDecoder, BranchObserver, BranchRecord, SignalFrames
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


class BtsBackend(SignalFrames):
    name = "bts"

    def __init__(self, image: Image, cpu: Target, emit: Callable[[Event], None],
                 buffer: int = 4096) -> None:
        if buffer < 1:
            raise ValueError(f"bts buffer of {buffer} records: at least 1")
        self.emit, self.cpu = emit, cpu
        self.capacity = buffer
        self.buffer: list[BranchRecord] = []
        self.decoder = BranchDecoder(image, cpu)  # no register state in a record
        self.observer = BranchObserver(cpu, self.decoder, self._on_branch)
        self.stats = {"records": 0, "interrupts": 0, "drained": 0, "calls": 0, "returns": 0,
                      "tail_calls": 0}

    def _on_branch(self, rec: BranchRecord) -> None:
        self.buffer.append(rec)
        self.stats["records"] += 1
        if len(self.buffer) >= self.capacity:
            self.stats["interrupts"] += 1
            self._decode()

    def _decode(self) -> int:
        """Decode and emit the buffered records in order, empty the buffer."""
        records, self.buffer = self.buffer, []
        event = self.decoder.event
        for rec in records:
            ev = event(rec)
            if ev is not None:
                self.emit(ev)
        return len(records)

    def before(self) -> None:
        """A signal: its frame goes after the branches recorded so far."""
        self._decode()

    def start(self, entry: int) -> None:
        """Nothing to arm: the hardware records every taken branch."""

    def finish(self) -> int:
        self.stats["drained"] += self._decode()
        self.stats.update(self.decoder.stats)
        return self.observer.time


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> BtsBackend:
    return BtsBackend(image, cpu, emit, options.bts_buffer)


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> BtsBackend:
    """C finds the taken branches (branch_native.py)."""
    from emutrace.backends.branch_native import NativeBtsBackend
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return cast(BtsBackend, NativeBtsBackend(image, cast(UnicornCpu, cpu),
                                             cast(HookSet, hooks), emit, options.bts_buffer))


DESCRIPTOR = descriptors.BTS  # what the CLI, bench and cost model know of it
