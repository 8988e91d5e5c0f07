"""`btf`: a trap on every taken branch — the P6 family's DEBUGCTL.BTF ("single-step on
branches": with TF set, the trap comes after a taken branch instead of after every
instruction), which Linux offers as PTRACE_SINGLEBLOCK on x86.

The trap comes *after* the branch, at its target, with the whole register state there;
the tracer knows only where it came from (`from`, the last branch record) and where it is.
It disassembles `from` to tell a call from a return or a jump (`branch.BranchDecoder`,
with `step`'s rules).  Because the CPU stands at the callee's entry, a call's arguments are
read as a callee sees them (`ArgReader(at_entry=True)`: on x86 the stack slots sit one word
higher than at the call site); a return's value is in the return register.  The stack
pointer before the branch is derived from the one at the target (see `branch`).

Taken branches are those of `branch.BranchObserver` (a block hook stands in for the trap):
the trap count is every taken branch, including jumps inside a function, which a real
tracer would pay for too.  Time is counted per block.

stats: traps (taken branches), calls, returns, tail_calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from emutrace.backends import BackendOptions
from emutrace.backends.branch import BranchDecoder, BranchObserver, BranchRecord, SignalFrames
from emutrace.backends.btf_native import NativeBtfBackend
from emutrace.discover.callabi import CallTypes
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


class BtfBackend(SignalFrames):
    name = "btf"

    def __init__(self, image: Image, cpu: Target, emit: Callable[[Event], None],
                 types: CallTypes | None = None) -> None:
        self.emit, self.cpu = emit, cpu
        self.decoder = BranchDecoder(image, cpu, types, live=True)
        self.observer = BranchObserver(cpu, self.decoder, self._on_trap, sideband_sp=False)
        self.stats = {"traps": 0, "calls": 0, "returns": 0, "tail_calls": 0}

    def _on_trap(self, rec: BranchRecord) -> None:
        """The trap after a taken branch: the CPU is at rec.target."""
        self.stats["traps"] += 1
        ev = self.decoder.event(rec)
        if ev is not None:
            self.emit(ev)

    def start(self, entry: int) -> None:
        """Nothing to arm: every taken branch traps."""

    def finish(self) -> int:
        self.stats.update(self.decoder.stats)
        return self.observer.time


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> BtfBackend:
    return BtfBackend(image, cpu, emit, options.call_types)


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> BtfBackend:
    """C finds the taken branches (branch_native.py)."""
    from emutrace.backends.branch_native import NativeBtfBackend as HotPathBtf
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return cast(BtfBackend, HotPathBtf(image, cast(UnicornCpu, cpu), cast(HookSet, hooks),
                                       emit, options.call_types))


def on_target(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
              options: BackendOptions) -> NativeBtfBackend:
    """Real branch traps: PTRACE_SINGLEBLOCK (btf_native.py); the C loop takes the quiet
    stops when the engine is native."""
    from emutrace.native.ploop import PtraceLoop
    from emutrace.target.ptrace import PtraceTarget

    target = cast(PtraceTarget, cpu)
    loop = cast(PtraceLoop, target.c_loop) if options.engine == "native" else None
    return NativeBtfBackend(image, target, emit, options.call_types, loop)


DESCRIPTOR = descriptors.BTF  # what the CLI, bench and cost model know of it
