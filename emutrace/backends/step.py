"""`step`: every instruction observed, the ground truth, and the engine that runs it: Python,
the reference (step_python.py), the Unicorn hot path in C (step_native.py) or the native
target's C loop (step_ptrace.py).  The registry (emutrace/mechanisms) names this module; no
engine imports it."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends import BackendOptions
from emutrace.backends.step_python import StepBackend
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def create(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
           options: BackendOptions) -> StepBackend:
    c_loop = getattr(cpu, "c_loop", None)
    if options.engine == "native" and c_loop is not None:  # the native target's C loop
        from emutrace.backends.step_ptrace import PtraceStepBackend
        from emutrace.native.ploop import PtraceLoop
        from emutrace.target.ptrace import PtraceTarget

        assert isinstance(cpu, PtraceTarget) and isinstance(c_loop, PtraceLoop)
        return PtraceStepBackend(image, cpu, emit, c_loop, options.call_types)
    if options.engine == "native":
        from emutrace.target.unicorn_cpu import UnicornCpu
        from emutrace.target.unicorn_run import HookSet

        assert isinstance(cpu, UnicornCpu) and isinstance(hooks, HookSet)
        from emutrace.backends.step_native import NativeStepBackend

        return NativeStepBackend(image, cpu, hooks, emit, options.call_types)
    return StepBackend(image, cpu, emit, options.call_types)


DESCRIPTOR = descriptors.STEP  # what the CLI, bench and cost model know of it
