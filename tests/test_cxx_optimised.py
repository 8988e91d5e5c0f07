"""The C++ program built at -O2 with hot/cold partitioning (`testbins/{isa}/cxx.O2`: the
exception paths of geo::risky and geo::guarded, and main's, in `.cold` parts on every ISA
but arm, whose EHABI keeps partitioning off).  Oracles: the ELF symbol table (pyelftools)
for where each function starts, the source for its parameters."""

from __future__ import annotations

import pytest
from elftools.elf.elffile import ELFFile

from emutrace.discover.prototypes import read_prototypes

from .conftest import ISAS, bin_path, run_emutrace

SPLIT = {"_ZN3geo5riskyEi": 1, "_ZN3geo7guardedEi": 1, "main": 2}  # name -> parameters


def _symbols(path: str) -> dict[str, int]:
    with open(path, "rb") as f:
        table = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: s["st_value"] & ~1 for s in table.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC"}


@pytest.mark.parametrize("isa", ISAS)
def test_functions_in_pieces_have_their_prototypes(isa: str) -> None:
    """A function GCC split into f and f.cold is described by DW_AT_ranges, not
    DW_AT_low_pc: it is still the program's own, with its parameters, at its symbol's
    address."""
    path = str(bin_path(isa, "cxx.O2"))
    symbols = _symbols(path)
    if isa != "arm":
        assert any(f"{name}.cold" in symbols for name in SPLIT), "no .cold part was made"
    types = read_prototypes(path)
    for name, params in SPLIT.items():
        assert name in types.own
        assert len(types.by_name[name].params) == params
        assert types.by_addr[symbols[name]] is types.by_name[name]


# The same -O2 C++ program gives the same calls and values on every ISA: i386's static
# functions take their arguments in registers (read where DWARF says:
# tests/test_entry_registers.py), ppc64le calls them at their local entry (the prototype is
# the global entry's), and arm's constructors return `this` (compared as returning nothing:
# `diff`'s rule, docs/diff.md).
def test_diff_finds_no_difference_across_isas() -> None:
    got = run_emutrace("diff", "--arch", "all", str(bin_path("{isa}", "cxx.O2")))
    assert got.returncode == 0, got.stdout.decode()[-2000:]
