"""Instrumentation mechanisms.  Each backend watches a running CPU and reports raw
:mod:`emutrace.trace.events` to a sink; the shadow stack and the formatters are shared.

Every backend module (emutrace/backends/<name>.py) has one function per engine port its
recipe names (emutrace/mechanisms/descriptors.py: `on_reference`, `on_hot_path`,
`on_c_loop`, each ``(image, cpu, hooks, emit, options)``) and a ``DESCRIPTOR``; `create`
picks the function of the port the target and the engine make.  ``none`` is no backend at
all (the program just runs).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from emutrace.errors import Unsupported
from emutrace.mechanisms import BACKENDS, runs_on
from emutrace.mechanisms.settings import UNICORN_C, BackendSettings

if TYPE_CHECKING:
    from emutrace.discover.callabi import CallTypes
    from emutrace.elf import Image
    from emutrace.target.protocol import Target, TrapHooks
    from emutrace.trace.events import Event, SignalDelivery

# backends with a native hot path under emulation (`--engine native`, emutrace/native):
# their recipes' Unicorn C port; `auto` runs each of them natively
NATIVE_BACKENDS = runs_on(UNICORN_C)
# auto (the default): native where the backend has a native path and the library is built
ENGINES = ("auto", "python", "native")


@dataclass(frozen=True)
class BackendOptions(BackendSettings):
    """What a backend is created with: the settings (mechanisms/settings.py) and these."""

    # prototypes and -A counts for typed arguments (None: the image's, no -A)
    call_types: CallTypes | None = None
    # "python" (the reference) or "native" (the C hot path, emutrace/native; NATIVE_BACKENDS)
    engine: str = "python"


class Backend(Protocol):
    name: str
    stats: dict[str, int]

    def start(self, entry: int) -> None: ...

    def finish(self) -> int:
        """End of the run: the time (guest instructions) to close open frames at."""
        ...

    def detach(self) -> None:
        """Untraced from here on (a forked child that is not followed): no probe of the
        mechanism's left in the program's code and none of its hooks left to run but the
        one the run's system calls and exceptions pass through; nothing more is emitted.
        `finish` still ends the run."""
        ...


@runtime_checkable
class TrapAware(Protocol):
    """A backend that reports exceptions (kernel images) and signal handlers (Linux
    programs): the board calls these at the exception's entry to the guest's vector and
    before an exception return, the Linux layer when it enters a signal handler (`signal`
    set) and at the `rt_sigreturn` its return reaches; the backend emits `Trap` /
    `TrapReturn` in order with its own events (shadow-stack policies 6 and 7)."""

    def trap_entered(self, vector: int, signal: SignalDelivery | None = None) -> None: ...

    def trap_returned(self, site: int) -> None: ...


def port_of(target_kind: str, engine: str) -> str:
    """The engine port (mechanisms.settings.PORTS) a target of that kind and an engine make."""
    return f"{target_kind}/{engine}"


def create(name: str, image: Image, cpu: Target, hooks: TrapHooks,
           emit: Callable[[Event], None], options: BackendOptions) -> Backend:
    """The mechanism name on cpu with options.engine: the function its recipe names for
    that port, from its module."""
    descriptor = BACKENDS[name]
    port = port_of(cpu.kind, options.engine)
    factory = descriptor.recipe.factory(port)
    if factory is None:
        raise Unsupported(f"backend {name}: no {options.engine} engine on the {cpu.kind} "
                          f"target")
    module = importlib.import_module(f"emutrace.backends.{descriptor.name}")
    backend: Backend = getattr(module, factory)(image, cpu, hooks, emit, options)
    return backend
