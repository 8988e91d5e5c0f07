"""What describes a backend, spelled once: its settings (flag, type, default, parser, help)
and its descriptor (name, one line, settings, counters, main event).

Every backend module exports one ``DESCRIPTOR``; the `run`/`record` options (cli/run.py),
the bench specs (benchgrid/spec.py) and the cost model's counters (cost/prices.py) are read
from the descriptors.  The typed values travel in :class:`BackendSettings`, whose fields
are the settings' names and defaults: `RunConfig`, `BoardConfig`, `BackendSpec` and
`BackendOptions` *are* BackendSettings (subclasses), so no option is spelled again there.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

from emutrace.quantities import positive_count

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One backend setting.  `name` is the BackendSettings field, `flag` the command-line
    option; `parse` turns text into the value (argparse.ArgumentTypeError when bad);
    `choices` is the closed set of words, if any; `spec_form` how a bench spec writes a
    value after the backend's name and colon ("N (N ≥ 1 slots)"), None for one of the
    choices."""

    name: str
    flag: str
    parse: Callable[[str], T]
    default: T
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    spec_form: str | None = None

    def read(self, text: str) -> T:
        """The value text names (argparse.ArgumentTypeError when it is none)."""
        if self.choices and text not in self.choices:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected one of {', '.join(self.choices)}")
        return self.parse(text)

    def spec_words(self) -> list[str]:
        """How bench specs write this setting's values (without the backend's name)."""
        return list(self.choices) if self.choices else [self.spec_form or self.metavar or "?"]

    def add_to(self, parser: argparse._ActionsContainer, owner: str) -> None:
        """The `run`/`record` option, its help prefixed by the backend that reads it."""
        parser.add_argument(self.flag, dest=self.name, type=self.parse, default=self.default,
                            choices=self.choices or None, metavar=self.metavar,
                            help=f"{owner}: {self.help}")


def _word(text: str) -> str:
    return text


CLEANUP: Setting[str] = Setting(
    "cleanup", "--cleanup", _word, "lazy",
    "leave breakpoints in place (lazy) or disarm a function when it stops being current "
    "(strict, fctrace's rule)", choices=("lazy", "strict"))
HW_SLOTS: Setting[int | None] = Setting(
    "hw_slots", "--hw-slots", positive_count, None,
    "hardware breakpoint slots (default: the ISA's, see `emutrace info`)", metavar="N",
    spec_form="N (N ≥ 1 slots)")
BTS_BUFFER: Setting[int] = Setting(
    "bts_buffer", "--bts-buffer", positive_count, 4096,
    "branch records the buffer holds before it interrupts", metavar="N",
    spec_form="N (N ≥ 1 records)")


@dataclass(frozen=True, kw_only=True)
class BackendSettings:
    """The values of every backend's settings (each backend reads its own).  Keyword-only,
    so that configurations can inherit them after their own positional fields."""

    cleanup: str = CLEANUP.default  # int3: "lazy" or "strict"
    hw_slots: int | None = HW_SLOTS.default  # hwbp: None = the ISA's DEBUG_HARDWARE.slots
    bts_buffer: int = BTS_BUFFER.default  # bts: records the buffer holds before it interrupts


def settings_of(config: BackendSettings) -> dict[str, Any]:
    """config's backend settings as keyword arguments for another BackendSettings."""
    return {f.name: getattr(config, f.name) for f in fields(BackendSettings)}


# the engine ports a mechanism may have: target kind (the target protocol's `kind`) / engine
UNICORN_PYTHON, UNICORN_C = "unicorn/python", "unicorn/native"
PTRACE_PYTHON, PTRACE_C = "ptrace/python", "ptrace/native"
GDB_PYTHON = "gdb/python"  # a GDB remote stub (target/gdb_remote.py): Python only
PORTS = (UNICORN_PYTHON, UNICORN_C, PTRACE_PYTHON, PTRACE_C, GDB_PYTHON)


@dataclass(frozen=True)
class Recipe:
    """How a mechanism is composed.  A site tracer (backends/int3_python.py) has a
    placement (lazy: a function armed when entered; eager: every function at start-up), a
    cleanup (lazy or strict, backends/cleanup.py's policy of that name: the `--cleanup`
    setting, or fixed) and a delivery (breakpoint bytes or site hooks, or N hardware
    slots); an observer sees every instruction (backends/step_python.py), every taken
    branch as a trap or a buffer of branch records (backends/branch_python.py's
    `BranchTraps`, `RecordBuffer`).  `ports` names, per engine port
    (PORTS), the function of the mechanism's module (emutrace/backends/<name>.py) that
    builds it there: a port not named is one the mechanism cannot run on."""

    placement: str | None = None  # site tracer: "lazy" | "eager"
    cleanup: str | None = None  # site tracer: "lazy or strict" | "strict"
    delivery: str | None = None  # site tracer: "breakpoints" | "hardware slots"
    observes: str | None = None  # observer: "every instruction" | "taken branches" | ...
    ports: tuple[tuple[str, str], ...] = ()  # (port, factory function name)

    def factory(self, port: str) -> str | None:
        """The function that builds the mechanism on port, or None."""
        return dict(self.ports).get(port)

    def summary(self) -> str:
        """One line: what it is composed of."""
        if self.observes is not None:
            return f"observer of {self.observes}"
        return (f"site tracer: {self.placement} placement, {self.cleanup} cleanup, "
                f"delivered by {self.delivery}")


@dataclass(frozen=True)
class Descriptor:
    """What the rest of emutrace knows of a backend without running it."""

    name: str  # the registry's and `--backend`'s
    help: str  # one line: what it models
    settings: tuple[Setting[Any], ...]  # the settings it reads
    counters: tuple[str, ...]  # its RunResult.backend_stats keys (the cost model prices them)
    main_event: str  # the counter that says how often its mechanism fired
    recipe: Recipe = Recipe()  # how it is composed, and the engine ports it runs on
    # bench columns beyond the plain name: setting values after a colon ("strict": int3's
    # strict cleanup, "1": hwbp with one slot)
    bench_variants: tuple[str, ...] = ()

    def runs_on(self, port: str) -> bool:
        return self.recipe.factory(port) is not None
