"""Arguments a compiler passed in registers its C ABI does not use for them, read where
DWARF says they are at the function's entry (discover.prototypes.Prototype.entry_registers,
discover.callabi.Reg).  GCC passes an i386 static function's first arguments in eax, edx
and ecx (its local calling convention) at -O1 and -O2; the i386 C ABI puts them on the
stack.

Oracle: the program's own log.  cxx's `geo::note(name, arg)` (a static function) keeps
what it was called with and main prints it at the end (`log: geo::level2(6)`); the values
the trace shows for each call must be those."""

from __future__ import annotations

import re

import pytest

from emutrace.discover.prototypes import _register_of

from .conftest import bin_path, run_emutrace

NOTE = re.compile(r'geo::note\("([^"]*)", (-?\d+)\);')
LOG = re.compile(r"^log: (\S+)\((-?\d+)\)$", re.M)


@pytest.mark.parametrize("program", ["cxx", "cxx.O2"])
@pytest.mark.parametrize("isa", ["i386", "x86_64"])
def test_static_functions_arguments_are_the_programs(isa: str, program: str) -> None:
    done = run_emutrace("run", "--backend", "int3", bin_path(isa, program))
    assert done.returncode == 0, done.stderr.decode()[-500:]
    logged = LOG.findall(done.stdout.decode())
    assert len(logged) == 4
    assert NOTE.findall(done.stderr.decode()) == logged


def test_register_locations() -> None:
    """DWARF 5 §2.6.1.1.3: DW_OP_reg0..31 (0x50..0x6f) and DW_OP_regx ULEB128; anything
    else (a memory location, a composite, an empty expression) is not a register."""
    assert _register_of([0x50]) == 0
    assert _register_of([0x52]) == 2
    assert _register_of([0x6F]) == 31
    assert _register_of([0x90, 0x21]) == 33
    assert _register_of([0x90, 0x80, 0x01]) == 128
    assert _register_of([0x91, 0x08]) == -1  # DW_OP_fbreg 8: on the stack
    assert _register_of([0x50, 0x93, 0x04]) == -1  # DW_OP_reg0 DW_OP_piece 4: a composite
    assert _register_of([0x90, 0x21, 0x93]) == -1
    assert _register_of([]) == -1
    assert _register_of(None) == -1
