"""Every tracing backend against the program's own record: on every ISA, the call sequence
emutrace records for the plain `calls` build (every mechanism: int3 with both cleanup
policies, hwbp with the ISA's slots and with one, bts, btf, entry, and step) equals what
the `-finstrument-functions` build of the same source records about itself under qemu-user
(names and nesting)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import (
    canonical_from_instr,
    canonical_text,
    parse_instr_record,
    trace_key,
)

from .conftest import ISAS, bin_path, run_qemu

SCENARIOS = ("recursion", "fnptr", "qsort", "varargs", "struct", "args9", "longjmp", "tail",
             "exit42", "float", "deep")


@functools.cache  # (the committed binaries do not change during a run: read each once)
def namer(path: str):  # type: ignore[no-untyped-def]
    syms = read_symbols(load_image(path))

    def name(addr: int) -> str:
        f = syms.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


# every mechanism: (backend, int3 cleanup, hwbp slots: None = the ISA's)
BACKENDS = {"step": ("step", "lazy", None), "int3-lazy": ("int3", "lazy", None),
            "int3-strict": ("int3", "strict", None), "hwbp": ("hwbp", "lazy", None),
            "hwbp-1": ("hwbp", "lazy", 1), "bts": ("bts", "lazy", None),
            "btf": ("btf", "lazy", None), "entry": ("entry", "lazy", None)}


# `deep` (a recursion past the shadow stack's 1,024 frames: 2 M events, 59 % of this
# grid's time, entry's alone 40 %) for every mechanism on one patch ISA and one hooked ISA,
# and for step and int3-lazy on all ten; how deep a trace is concerns the shadow stack and
# the trace's length, which every mechanism shares, not how a mechanism sees a transfer,
# which the other ten scenarios check on every cell.  (CI time: `.ci/run`.)
DEEP_EVERY_MECHANISM = ("x86_64", "mips")
DEEP_EVERY_ISA = ("step", "int3-lazy")
CELLS = [(isa, mechanism, scenario) for isa in ISAS for mechanism in BACKENDS
         for scenario in SCENARIOS
         if scenario != "deep" or isa in DEEP_EVERY_MECHANISM or mechanism in DEEP_EVERY_ISA]


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "mechanism", "scenario"), CELLS,
                         ids=["-".join(cell) for cell in CELLS])
def test_trace_equals_self_record(isa: str, mechanism: str, scenario: str) -> None:
    backend, cleanup, hw_slots = BACKENDS[mechanism]
    want, program_functions = own_record(isa, scenario)

    plain = str(bin_path(isa, "calls"))
    config = RunConfig(plain, [scenario], backend=backend, cleanup=cleanup, hw_slots=hw_slots)
    result = Process(config, warn=lambda m: None).run()
    got = canonical_text(result.records, namer(plain), program_functions)
    assert got.count("\n") > 3
    got = trace_key(got)  # (deep's 200 MB text: its digest)
    assert got == want
    assert got == golden(scenario)  # the same for all ten ISAs


@functools.cache
def own_record(isa: str, scenario: str) -> tuple[str, frozenset[str]]:
    """The canonical trace of what calls.instr records about itself under qemu-user (as
    `trace_key` keeps it), and the functions it names (the same for every mechanism: made
    once per module)."""
    instr = str(bin_path(isa, "calls.instr"))
    record = run_qemu(isa, instr, scenario).stderr.decode()
    instr_name = namer(instr)
    program_functions = frozenset(instr_name(addr) for _, addr in parse_instr_record(record))
    return (trace_key(canonical_from_instr(record, instr_name, program_functions)),
            program_functions)


def golden(scenario: str) -> str:
    """tests/golden/calls-SCENARIO.txt, or .key for a trace kept as its digest (trace_key)."""
    where = Path(__file__).parent / "golden"
    text = where / f"calls-{scenario}.txt"
    return text.read_text() if text.exists() else (where / f"calls-{scenario}.key").read_text()


@pytest.mark.oracle
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("isa", ISAS)
def test_golden_equals_every_isas_own_record(isa: str, scenario: str) -> None:
    """tests/golden/ (tools/make_golden.py, from the x86_64 self-record) is shared by all
    ten ISAs: each ISA's own record of the same program gives the same canonical text."""
    assert own_record(isa, scenario)[0] == golden(scenario)
