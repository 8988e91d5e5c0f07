"""`hwbp`: int3's lazy algorithm on N hardware breakpoint slots — the site tracer
(int3_python.py) under strict cleanup, delivered by `SlotDelivery` (hwbp_slots.py, where the
mechanism is told), on each engine port its recipe names (mechanisms/descriptors.py): Python
over Unicorn code hooks, the Unicorn hot path in C (hwbp_native.py) or real debug registers
from the native target's C loop (hwbp_ptrace.py).  `backends.create` picks the port; no
engine imports this module."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from emutrace.backends import BackendOptions
from emutrace.backends.hwbp_slots import SlotDelivery
from emutrace.backends.int3_python import Int3Backend
from emutrace.backends.site_engine import ReferenceEngine
from emutrace.elf import Image
from emutrace.mechanisms import descriptors
from emutrace.target.protocol import Target, TrapHooks
from emutrace.trace.events import Event


def _on_slots(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
              options: BackendOptions) -> tuple[Int3Backend, SlotDelivery, ReferenceEngine]:
    """int3's algorithm under the strict policy, delivered by hardware slots (hook
    delivery: no guest byte is ever written), reporting hwbp's counters."""
    engine = ReferenceEngine()
    backend = Int3Backend(image, cpu, hooks, emit, "strict", options.call_types,
                          delivery="hook", name=DESCRIPTOR.name, counters=DESCRIPTOR.counters,
                          engine=engine)
    slots = SlotDelivery(backend, options.hw_slots)
    backend.sites = slots
    return backend, slots, engine


def on_reference(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                 options: BackendOptions) -> Int3Backend:
    return _on_slots(image, cpu, hooks, emit, options)[0]


def on_hot_path(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
                options: BackendOptions) -> Int3Backend:
    from emutrace.backends import hwbp_native
    from emutrace.target.unicorn_cpu import UnicornCpu
    from emutrace.target.unicorn_run import HookSet

    return hwbp_native.create(image, cast(UnicornCpu, cpu), cast(HookSet, hooks), emit,
                              options)


def on_c_loop(image: Image, cpu: Target, hooks: TrapHooks, emit: Callable[[Event], None],
              options: BackendOptions) -> Int3Backend:
    """The slots' arming told to the C loop (`CSlots`), which finishes the hits whose whole
    decision it holds."""
    from emutrace.backends.hwbp_ptrace import CSlots
    from emutrace.backends.int3_ptrace import loop_of
    from emutrace.target.ptrace import PtraceTarget

    backend, slots, engine = _on_slots(image, cpu, hooks, emit, options)
    target = cast(PtraceTarget, cpu)
    c_slots = CSlots(backend, slots, target, loop_of(target))
    backend.sites = c_slots
    engine.native_stats = c_slots.native_stats
    return backend


DESCRIPTOR = descriptors.HWBP  # what the CLI, bench and cost model know of it
