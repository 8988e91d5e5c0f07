"""What `emutrace bench` is asked to run: ISAs, backend specs and program templates, parsed
and checked before anything runs (a bad argument is a `UsageError`: one line, exit 64).

A backend spec is a registered backend name with an optional setting after a colon, read by
the backend's descriptor (mechanisms/settings.py): ``int3:strict`` (cleanup policy),
``hwbp:N`` (N breakpoint slots), ``bts:N`` (records per buffer), ``BACKEND:record`` (the
backend's trace written to a uftrace data directory as `emutrace record` writes it: record
throughput and bytes per record), ``int3:native``, ``step:native``, ``bts:native`` and
``btf:native`` (the native hot path). Every other cell runs on the Python reference engine,
so that the mechanisms are compared like with like. ``all`` expands to the comparison set;
``none`` is the baseline and is always run, so naming it is allowed and changes nothing.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path

from emutrace.backends import NATIVE_BACKENDS
from emutrace.errors import UsageError
from emutrace.isa import MODULES, UnknownIsa, by_name
from emutrace.isa.base import Cap
from emutrace.mechanisms import BACKENDS, bench_specs, descriptor
from emutrace.mechanisms.settings import BackendSettings

# every mechanism in the registry, and its bench variants ("int3:strict", "hwbp:1")
ALL_SPECS = bench_specs()
BASELINE = "none"


@dataclass(frozen=True)
class BackendSpec(BackendSettings):
    """One bench column: a backend with its settings (inherited: cleanup, hw_slots, ...)."""

    label: str  # as written: "hwbp:2"
    backend: str  # registry name: "hwbp"
    record: bool = False  # stream the trace into a data directory (`emutrace record`)
    engine: str = "python"  # `--engine`: the reference unless the spec names native

    @property
    def traces(self) -> bool:
        return self.backend != BASELINE


NONE_SPEC = BackendSpec(BASELINE, BASELINE)


def parse_spec(text: str) -> BackendSpec:
    name, colon, value = text.strip().partition(":")
    if name == BASELINE and not colon:
        return NONE_SPEC
    if name not in BACKENDS:
        raise UsageError(f"--backend {text}: unknown backend {name!r}; known: "
                         f"{', '.join(BACKENDS)}, all")
    if not colon:
        return BackendSpec(text, name)
    if value == "record" and name != BASELINE:
        return BackendSpec(text, name, record=True)
    if name in NATIVE_BACKENDS and value == "native":
        return BackendSpec(text, name, engine="native")
    settings = descriptor(name).settings
    for setting in settings:
        try:
            return BackendSpec(text, name, **{setting.name: setting.read(value)})
        except argparse.ArgumentTypeError:
            continue
    words = [w for s in settings for w in s.spec_words()]
    words += ["native"] if name in NATIVE_BACKENDS else []
    if not words:
        raise UsageError(f"--backend {text}: expected {name}:record or no setting")
    forms = [f"{name}:{w}" for w in [*words, "record"]]
    raise UsageError(f"--backend {text}: expected {', '.join(forms[:-1])} or {forms[-1]}")


def parse_backends(text: str) -> list[BackendSpec]:
    """The specs to run besides the baseline, each once, in the order named."""
    if not text.strip():
        raise UsageError("--backend: empty list")
    specs: list[BackendSpec] = []
    for word in (w for w in text.split(",") if w.strip()):
        words = ALL_SPECS if word.strip() == "all" else (word,)
        specs += [parse_spec(w) for w in words]
    return list({s.label: s for s in specs if s.traces}.values())


def parse_arches(text: str) -> list[str]:
    if text.strip() == "all":  # (every ISA emulation runs: the grid runs under Unicorn)
        return [m for m in MODULES if by_name(m).capability(Cap.RUN_STATIC).works]
    out: list[str] = []
    for word in (w for w in text.split(",") if w.strip()):
        try:
            name = by_name(word).name
        except UnknownIsa:
            raise UsageError(f"--arch {word}: unknown ISA; known: {', '.join(MODULES)}, "
                             "all") from None
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError("--arch: empty list")
    return out


@dataclass(frozen=True)
class Program:
    template: str  # as given, e.g. "testbins/{isa}/fib 5"
    argv: tuple[str, ...]  # for one ISA

    @property
    def path(self) -> str:
        return self.argv[0]

    @property
    def missing(self) -> bool:
        return not Path(self.path).is_file()


def parse_template(template: str) -> list[str]:
    try:
        words = shlex.split(template)
    except ValueError as e:
        raise UsageError(f"program {template!r}: {e}") from None
    if not words:
        raise UsageError("program: empty command line")
    return words


def expand(template: str, isa: str) -> Program:
    return Program(template, tuple(w.replace("{isa}", isa) for w in parse_template(template)))
