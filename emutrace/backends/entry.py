"""`entry`: eager probes on every function entry and return — the site tracer (int3_python.py)
with eager placement (entry_python.py `EagerProbes`, where the mechanism is told), on each
engine port its recipe names (mechanisms/descriptors.py): the Python reference, the Unicorn
hot path in C (entry_native.py) or the native target's C loop (entry_ptrace.py).
`backends.create` picks the port; no engine imports this module."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from emutrace.backends import BackendOptions
from emutrace.backends.entry_python import create_reference
from emutrace.backends.int3_python import Int3Backend
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> Int3Backend:
    return create_reference(image, cpu, hooks, emit, options.call_types)


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> Int3Backend:
    from emutrace.backends import entry_native
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return entry_native.create(image, cast(UnicornCpu, cpu), cast(HookSet, hooks), emit,
                               options.call_types)


def on_c_loop(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
              options: BackendOptions) -> Int3Backend:
    from emutrace.backends import entry_ptrace
    from emutrace.backends.int3_ptrace import loop_of
    from emutrace.target.ptrace import PtraceTarget
    from emutrace.target.ptrace_run import NativeTrapHooks

    target = cast(PtraceTarget, cpu)
    return entry_ptrace.create(image, target, cast(NativeTrapHooks, hooks), emit,
                               loop_of(target), options.call_types)


DESCRIPTOR = descriptors.ENTRY  # what the CLI, bench and cost model know of it
