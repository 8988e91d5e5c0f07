"""The descriptor of every backend (mechanisms/settings.py: name, one line, settings,
counters, main event).  Each backend module exports its own as ``DESCRIPTOR``; they are
written here, in a module that imports no emulator, because the command line, the bench
specs and the cost model read them without loading any backend (tests/test_cost.py: the
cost model imports neither Unicorn nor Capstone).
"""

from __future__ import annotations

from emutrace.mechanisms.settings import (
    BTS_BUFFER,
    CLEANUP,
    GDB_PYTHON,
    HW_SLOTS,
    PTRACE_C,
    PTRACE_PYTHON,
    UNICORN_C,
    UNICORN_PYTHON,
    Descriptor,
    Recipe,
)

# the site tracer's ports (int3, hwbp, entry; step too): the reference on either target,
# the Unicorn hot path, the native target's C loop
_EVERY_PORT = ((UNICORN_PYTHON, "on_reference"), (UNICORN_C, "on_hot_path"),
               (PTRACE_PYTHON, "on_reference"), (PTRACE_C, "on_c_loop"))

INT3 = Descriptor(
    "int3", "lazy call-site breakpoints (fctrace), real breakpoint bytes",
    settings=(CLEANUP,),
    counters=("traps", "patches", "cache_removals", "hooks_added", "simulated", "fallbacks",
              "functions"),
    main_event="traps",
    recipe=Recipe(placement="lazy", cleanup="lazy or strict", delivery="breakpoints",
                  ports=(*_EVERY_PORT, (GDB_PYTHON, "on_stub"))),
    bench_variants=("strict",))

HWBP = Descriptor(
    "hwbp", "N hardware instruction breakpoints, the same lazy algorithm",
    settings=(HW_SLOTS,),
    counters=("hits", "slot_writes", "fallbacks", "stepped", "functions", "max_slots"),
    main_event="hits",
    recipe=Recipe(placement="lazy", cleanup="strict", delivery="hardware slots",
                  ports=(*_EVERY_PORT, (GDB_PYTHON, "on_reference"))),
    bench_variants=("1",))

BTS = Descriptor(
    "bts", "branch records (from, to) in a buffer, decoded when it fills",
    settings=(BTS_BUFFER,),
    counters=("records", "interrupts", "drained", "calls", "returns", "tail_calls"),
    main_event="records",
    recipe=Recipe(observes="a buffer of branch records",
                  ports=((UNICORN_PYTHON, "on_reference"), (UNICORN_C, "on_hot_path"))))

BTF = Descriptor(
    "btf", "a trap on every taken branch (P6 BTF, PTRACE_SINGLEBLOCK)",
    settings=(),
    counters=("traps", "calls", "returns", "tail_calls"),
    main_event="traps",
    recipe=Recipe(observes="taken branches, one trap each",
                  ports=((UNICORN_PYTHON, "on_reference"), (UNICORN_C, "on_hot_path"),
                         (PTRACE_PYTHON, "on_target"), (PTRACE_C, "on_target"))))

ENTRY = Descriptor(
    "entry", "eager probes on every function entry and return, set at start-up",
    settings=(),
    counters=("probes", "patches", "traps", "stepovers", "simulated", "functions"),
    main_event="traps",
    recipe=Recipe(placement="eager", cleanup="lazy", delivery="breakpoints",
                  ports=_EVERY_PORT))

STEP = Descriptor(
    "step", "a trap on every instruction (TF): the ground truth",
    settings=(),
    counters=("steps", "calls", "returns", "tail_calls"),
    main_event="steps",
    recipe=Recipe(observes="every instruction", ports=_EVERY_PORT))
