"""Tracing a dynamic PIE: testbins/<isa>/calls.dynpie, linked -pie against the
Debian cross glibc, run with `--root` the cross sysroot.

Oracle: `calls.dynpie.instr` (the same objects, -finstrument-functions, linked the same way)
records its own calls under `qemu-<isa>-static -L ROOT`.  A PIE's record prints run-time
addresses, at the base qemu-user chose; the base is found from the record itself: the
program's first recorded entry is `main` (nothing before it is instrumented: instr_hooks.c's
constructor is not, and calls.c has no constructor), so base = that address − main's
`st_value` (pyelftools).  Our run loads the PIE at a base of its own: the two traces are
compared by names, over the program's own functions.

An ISA where this does not work is a strict xfail read from the capability table
(`trace_dynamic`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from emutrace.discover.symbols import read_symbols
from emutrace.elf import load_image
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record
from tests.conftest import ENV, ISAS, TESTBINS, qemu_binary
from tests.test_dynamic import sysroot
from tests.test_dynamic_trace import gap, namer, traced


def record_namer(path: Path, record: list[tuple[str, int]]) -> Callable[[int], str]:
    """Names of the run-time addresses of a PIE's self-record: link-time symbols of the
    file, at the base where main's first entry puts them."""
    syms = read_symbols(load_image(str(path), dynamic=True))
    main = syms.by_name("main")
    kind, first = record[0]
    assert kind == ">" and main is not None
    base = (first - main.start) & ~0xFFF  # a load base is page-aligned (and ARM's
    # Thumb bit, set in the recorded address, drops out)

    def name(addr: int) -> str:
        f = syms.containing(addr - base)
        return f.name if f is not None else hex(addr)
    return name


@pytest.mark.parametrize("isa", [pytest.param(i, marks=gap(i)) for i in ISAS])
def test_dynamic_pie_trace_equals_self_record(isa: str) -> None:
    instr = TESTBINS / isa / "calls.dynpie.instr"
    text = subprocess.run([qemu_binary(isa), "-L", str(sysroot(isa)), str(instr), "qsort"],
                          capture_output=True, timeout=120, env=ENV).stderr.decode()
    record = parse_instr_record(text)
    instr_name = record_namer(instr, record)
    program_functions = {instr_name(addr) for _, addr in record}
    assert {"main", "run_scenario", "compare_ints"} <= program_functions
    want = canonical_from_instr(text, instr_name, program_functions)

    process = traced(isa, "qsort", program="calls.dynpie")
    got = canonical_text(process.records, namer(process), program_functions)
    assert got == want
