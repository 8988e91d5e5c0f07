"""`int3`: fctrace's lazy call-site breakpoints — the site tracer (int3_python.py, where the
algorithm is told) with lazy placement and the `--cleanup` policy, on each engine port its
recipe names (mechanisms/descriptors.py): the Python reference, the Unicorn hot path in C
(int3_native.py `HotPathEngine`), the native target's C loop (int3_ptrace.py
`PtraceLoopEngine`) or the reference on a GDB remote stub (`on_stub`).  `backends.create`
picks the port; no engine imports this module."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from emutrace.backends import BackendOptions
from emutrace.backends.int3_python import Int3Backend
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> Int3Backend:
    return Int3Backend(image, cpu, hooks, emit, options.cleanup, options.call_types)


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> Int3Backend:
    from emutrace.backends import int3_native
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return int3_native.create(image, cast(UnicornCpu, cpu), cast(HookSet, hooks), emit,
                              options.cleanup, options.call_types)


def on_c_loop(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
              options: BackendOptions) -> Int3Backend:
    from emutrace.backends import int3_ptrace
    from emutrace.target.ptrace import PtraceTarget
    from emutrace.target.ptrace_run import NativeTrapHooks

    target = cast(PtraceTarget, cpu)
    return int3_ptrace.create(image, target, cast(NativeTrapHooks, hooks), emit,
                              int3_ptrace.loop_of(target), options.cleanup,
                              options.call_types)


def on_stub(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
            options: BackendOptions) -> Int3Backend:
    """On a GDB remote stub (target/gdb_remote.py): the reference, its breakpoints placed
    as the stub's Z0 breakpoints by the target's `write_code` (bytes where it has none)."""
    return Int3Backend(image, cpu, hooks, emit, options.cleanup, options.call_types)


DESCRIPTOR = descriptors.INT3  # what the CLI, bench and cost model know of it
