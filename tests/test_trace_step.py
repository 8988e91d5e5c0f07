"""The `step` backend against the program's own record: on every ISA, the call sequence
emutrace records for the plain `calls` build equals what the `-finstrument-functions` build
of the same source records about itself under qemu-user (names and nesting)."""

from __future__ import annotations

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import ISAS, bin_path, run_qemu

SCENARIOS = ("recursion", "fnptr", "qsort", "varargs", "struct", "args9", "longjmp", "tail",
             "exit42")


def namer(path: str):  # type: ignore[no-untyped-def]
    syms = read_symbols(load_image(path))

    def name(addr: int) -> str:
        f = syms.containing(addr)
        return f.name if f is not None else hex(addr)
    return name


@pytest.mark.oracle
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("isa", ISAS)
def test_step_trace_equals_self_record(isa: str, scenario: str) -> None:
    instr = str(bin_path(isa, "calls.instr"))
    record = run_qemu(isa, instr, scenario).stderr.decode()
    instr_name = namer(instr)
    program_functions = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, program_functions)

    plain = str(bin_path(isa, "calls"))
    result = Process(RunConfig(plain, [scenario], backend="step"), warn=lambda m: None).run()
    got = canonical_text(result.records, namer(plain), program_functions)
    assert got.count("\n") > 3
    assert got == want
