"""`hwbp`: int3's lazy algorithm on N hardware breakpoint slots (hwbp_slots.py, where the
mechanism is told), and the engine that runs it: Python over Unicorn code hooks, the
Unicorn hot path in C (hwbp_native.py) or real debug registers from the native target's C
loop (hwbp_ptrace.py).  The registry (emutrace/mechanisms) names this module; no engine
imports it."""

from __future__ import annotations

from collections.abc import Callable

from emutrace.backends import BackendOptions
from emutrace.backends.hwbp_slots import SlotDelivery
from emutrace.backends.int3_python import Int3Backend
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def create(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
           options: BackendOptions) -> Int3Backend:
    """int3's algorithm under the strict policy, delivered by hardware slots (hook
    delivery: no guest byte is ever written), reporting hwbp's counters."""
    c_loop = getattr(cpu, "c_loop", None)
    if options.engine == "native" and c_loop is None:  # emulation's hot path
        from emutrace.backends import hwbp_native
        from emutrace.target.unicorn_cpu import UnicornCpu
        from emutrace.target.unicorn_run import HookSet

        assert isinstance(cpu, UnicornCpu) and isinstance(hooks, HookSet)
        return hwbp_native.create(image, cpu, hooks, emit, options)
    backend = Int3Backend(image, cpu, hooks, emit, "strict", options.call_types,
                          delivery="hook", name=DESCRIPTOR.name, counters=DESCRIPTOR.counters)
    slots = SlotDelivery(backend, options.hw_slots)
    backend.sites = slots
    if options.engine == "native" and c_loop is not None:  # the native target's C loop
        from emutrace.backends.hwbp_ptrace import CSlots
        from emutrace.native.ploop import PtraceLoop
        from emutrace.target.ptrace import PtraceTarget

        assert isinstance(cpu, PtraceTarget) and isinstance(c_loop, PtraceLoop)
        c_slots = CSlots(backend, slots, cpu, c_loop)
        backend.sites = c_slots
        backend.native_stats = c_slots.native_stats  # type: ignore[attr-defined]
    return backend


DESCRIPTOR = descriptors.HWBP  # what the CLI, bench and cost model know of it
