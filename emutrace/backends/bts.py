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

The tracer is branch_python.py's `BranchBackend` with a `RecordBuffer` (what bts
observes) over an engine: the reference (`branch.BranchObserver`'s block hook) or the
Unicorn hot path (branch_native.py `BtsHotPath`).  Records are decoded in the order they
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
from emutrace.backends.branch_python import BranchBackend, RecordBuffer
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> BranchBackend:
    return BranchBackend("bts", image, cpu, emit, RecordBuffer(options.bts_buffer))


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> BranchBackend:
    """C finds the taken branches (branch_native.py `BtsHotPath`)."""
    from emutrace.backends.branch_native import create_bts
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return create_bts(image, cast(UnicornCpu, cpu), cast(HookSet, hooks), emit,
                      options.bts_buffer)


DESCRIPTOR = descriptors.BTS  # what the CLI, bench and cost model know of it
