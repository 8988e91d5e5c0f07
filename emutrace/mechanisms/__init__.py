"""What emutrace knows of each tracing mechanism without running it: its descriptor (name,
one line, settings, counters, main event, its recipe and the engine ports it runs on;
`settings.py`), the six written out in `descriptors.py`, and the registry of them by name.
The command line's options, the bench specs, the cost model and which mechanism runs where
(`runs_on`) are read from here; nothing here imports an emulator or a backend (the backends
themselves, and `create`, are emutrace/backends/).
"""

from __future__ import annotations

from typing import Any

from emutrace.mechanisms import descriptors
from emutrace.mechanisms.settings import PORTS, Descriptor, Setting

# name → its descriptor; the backend is the module of that name under emutrace.backends
# (a dict: tests register a fake one)
BACKENDS: dict[str, Descriptor] = {d.name: d for d in (
    descriptors.INT3, descriptors.HWBP, descriptors.BTS, descriptors.BTF, descriptors.ENTRY,
    descriptors.STEP)}


def descriptor(name: str) -> Descriptor:
    return BACKENDS[name]


def all_descriptors() -> list[Descriptor]:
    return list(BACKENDS.values())


def backend_settings() -> list[tuple[Setting[Any], str]]:
    """Every registered backend's settings, each once, with the backends that read it
    ("int3" or "int3, hwbp"), in registry order: the command line's options."""
    owners: dict[str, tuple[Setting[Any], list[str]]] = {}
    for d in all_descriptors():
        for s in d.settings:
            owners.setdefault(s.name, (s, []))[1].append(d.name)
    return [(s, ", ".join(names)) for s, names in owners.values()]


def runs_on(port: str) -> tuple[str, ...]:
    """The mechanisms that have an engine at port (settings.PORTS), in registry order."""
    assert port in PORTS, port
    return tuple(d.name for d in all_descriptors() if d.runs_on(port))


def bench_specs() -> tuple[str, ...]:
    """Every mechanism as a bench column, and its variants ("int3:strict", "hwbp:1")."""
    return tuple(s for d in all_descriptors()
                 for s in (d.name, *(f"{d.name}:{v}" for v in d.bench_variants)))
