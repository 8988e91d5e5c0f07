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

The tracer is branch_python.py's `BranchBackend` with `BranchTraps` (what btf observes)
over an engine: the reference (`branch.BranchObserver`, a block hook standing in for the
trap), the Unicorn hot path (branch_native.py `BtfHotPath`) or the native target's block
steps (btf_native.py `BlockSteps`).  Taken branches are those of `branch.BranchObserver`:
the trap count is every taken branch, including jumps inside a function, which a real
tracer would pay for too.  Time is counted per block.

stats: traps (taken branches), calls, returns, tail_calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from emutrace.backends import BackendOptions
from emutrace.backends.branch_python import BranchBackend, BranchTraps
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> BranchBackend:
    return BranchBackend("btf", image, cpu, emit, BranchTraps(), types=options.call_types)


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> BranchBackend:
    """C finds the taken branches (branch_native.py `BtfHotPath`)."""
    from emutrace.backends.branch_native import create_btf
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return create_btf(image, cast(UnicornCpu, cpu), cast(HookSet, hooks), emit,
                      options.call_types)


def on_target(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
              options: BackendOptions) -> BranchBackend:
    """Real branch traps: PTRACE_SINGLEBLOCK (btf_native.py `BlockSteps`); the C loop takes
    the quiet stops when the engine is native."""
    from emutrace.backends import btf_native
    from emutrace.native.ploop import PtraceLoop
    from emutrace.target.ptrace import PtraceTarget

    target = cast(PtraceTarget, cpu)
    loop = cast(PtraceLoop, target.c_loop) if options.engine == "native" else None
    return btf_native.create(image, target, emit, options.call_types, loop)


DESCRIPTOR = descriptors.BTF  # what the CLI, bench and cost model know of it
