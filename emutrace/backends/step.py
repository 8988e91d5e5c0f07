"""`step`: every instruction observed, the ground truth, and the engine that runs it: Python,
the reference (step_python.py), the Unicorn hot path in C (step_native.py) or the native
target's C loop (step_ptrace.py), one function per engine port its recipe names
(mechanisms/descriptors.py).  `backends.create` picks the port; no engine imports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from emutrace.backends import BackendOptions
from emutrace.backends.step_python import StepBackend
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> StepBackend:
    return StepBackend(image, cpu, emit, options.call_types)


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> StepBackend:
    from emutrace.backends import step_native
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return step_native.create(image, cast(UnicornCpu, cpu), cast(HookSet, hooks), emit,
                              options.call_types)


def on_c_loop(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
              options: BackendOptions) -> StepBackend:
    from emutrace.backends import step_ptrace
    from emutrace.backends.int3_ptrace import loop_of
    from emutrace.target.ptrace import PtraceTarget

    target = cast(PtraceTarget, cpu)
    return step_ptrace.create(image, target, emit, loop_of(target), options.call_types)


DESCRIPTOR = descriptors.STEP  # what the CLI, bench and cost model know of it
