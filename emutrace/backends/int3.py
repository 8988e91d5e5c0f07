"""`int3`: fctrace's lazy call-site breakpoints, and the engine that runs them: Python, the
reference (int3_python.py, where the algorithm is told), the Unicorn hot path in C
(int3_native.py) or the native target's C loop (int3_ptrace.py).  The registry
(emutrace/mechanisms) names this module; no engine imports it."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends import BackendOptions
from emutrace.backends.int3_python import Int3Backend
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def create(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
           options: BackendOptions) -> Int3Backend:
    c_loop = getattr(cpu, "c_loop", None)
    if options.engine == "native" and c_loop is not None:  # the native target's C loop
        from emutrace.backends.int3_ptrace import PtraceInt3Backend
        from emutrace.native.ploop import PtraceLoop
        from emutrace.target.ptrace import PtraceTarget
        from emutrace.target.ptrace_run import NativeTrapHooks

        assert isinstance(cpu, PtraceTarget) and isinstance(hooks, NativeTrapHooks)
        assert isinstance(c_loop, PtraceLoop)
        return PtraceInt3Backend(image, cpu, hooks, emit, c_loop, options.cleanup,
                                 options.call_types)
    if options.engine == "native":
        from emutrace.target.unicorn_cpu import UnicornCpu
        from emutrace.target.unicorn_run import HookSet

        assert isinstance(cpu, UnicornCpu) and isinstance(hooks, HookSet)
        from emutrace.backends.int3_native import NativeInt3Backend

        return NativeInt3Backend(image, cpu, hooks, emit, options.cleanup, options.call_types)
    return Int3Backend(image, cpu, hooks, emit, options.cleanup, options.call_types)


DESCRIPTOR = descriptors.INT3  # what the CLI, bench and cost model know of it
