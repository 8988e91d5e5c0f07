"""`entry`: eager probes on every function entry and return, and the engine that runs them:
Python, the reference (entry_python.py, where the mechanism is told), the Unicorn hot path
in C (entry_native.py) or the native target's C loop (entry_ptrace.py).  The registry
(emutrace/mechanisms) names this module; no engine imports it."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends import BackendOptions
from emutrace.backends.entry_python import EntryBackend
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def create(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
           options: BackendOptions) -> EntryBackend:
    c_loop = getattr(cpu, "c_loop", None)
    if options.engine == "native" and c_loop is not None:  # the native target's C loop
        from emutrace.backends.entry_ptrace import PtraceEntryBackend
        from emutrace.native.ploop import PtraceLoop
        from emutrace.target.ptrace import PtraceTarget
        from emutrace.target.ptrace_run import NativeTrapHooks

        assert isinstance(cpu, PtraceTarget) and isinstance(hooks, NativeTrapHooks)
        assert isinstance(c_loop, PtraceLoop)
        return PtraceEntryBackend(image, cpu, hooks, emit, c_loop, options.call_types)
    if options.engine == "native":  # the Unicorn hot path
        from emutrace.backends.entry_native import NativeEntryBackend
        from emutrace.target.unicorn_cpu import UnicornCpu
        from emutrace.target.unicorn_run import HookSet

        assert isinstance(cpu, UnicornCpu) and isinstance(hooks, HookSet)
        return NativeEntryBackend(image, cpu, hooks, emit, options.call_types)
    return EntryBackend(image, cpu, hooks, emit, options.call_types)


DESCRIPTOR = descriptors.ENTRY  # what the CLI, bench and cost model know of it
