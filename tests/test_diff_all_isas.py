"""`emutrace diff --unconfined` over every ISA emutrace runs: the emulated ones under
Unicorn, the others in qemu-user's gdb stub, one isadep trace each.

Oracle: each program's own output under qemu-user, where isadep prints the three ABI facts
its calls depend on (plain `char`'s signedness, the byte order, the width of `long`).  The
ISAs whose outputs agree must be exactly diff's groups, and its matrix must say '=' exactly
where two ISAs' outputs agree.  One diff run is shared by the tests (module fixture): the
whole run costs about 5 s of CPU (most of it the gdb-only ISAs' qemu)."""

from __future__ import annotations

import subprocess

import pytest

from emutrace.isa import MODULES, by_name
from emutrace.isa.base import Cap

from .conftest import REPO, bin_path, run_emutrace, run_qemu

TEMPLATE = str(REPO / "testbins" / "{isa}" / "isadep")
# every ISA some engine runs: emulation (Unicorn) or the gdb target
RUN = tuple(m for m in MODULES if by_name(m).capability(Cap.RUN_STATIC).works
            or by_name(m).capability(Cap.GDB_TARGET).works)


def own_facts(isa: str) -> tuple[str, ...]:
    """isadep's own lines under qemu-user ("char: unsigned (200)", ...), the value in
    parentheses dropped: (char, endian, long)."""
    out = run_qemu(isa, bin_path(isa, "isadep")).stdout.decode().splitlines()
    facts = dict(line.split("(")[0].strip().split(": ", 1) for line in out)
    return facts["char"], facts["endian"], facts["long"]


@pytest.fixture(scope="module")
def facts() -> dict[str, tuple[str, ...]]:
    return {isa: own_facts(isa) for isa in RUN}


@pytest.fixture(scope="module")
def diff() -> subprocess.CompletedProcess:
    return run_emutrace("diff", "--unconfined", TEMPLATE, timeout=600)


def test_every_isa_is_run(diff: subprocess.CompletedProcess) -> None:
    assert len(RUN) >= 15 and "ppc64" in RUN and "sparc64" in RUN
    assert diff.returncode == 1, diff.stderr
    assert diff.stdout.decode().startswith(f"different: 8 distinct traces over {len(RUN)}\n")


def test_groups_are_the_programs_own(diff: subprocess.CompletedProcess,
                                     facts: dict[str, tuple[str, ...]]) -> None:
    """diff's groups (`  A: x86_64 mips64el`) are the ISAs whose own outputs agree."""
    lines = diff.stdout.decode().splitlines()
    got = sorted(sorted(line.split(": ", 1)[1].split()) for line in lines
                 if line.startswith("  ") and line[2:3].isalpha() and line[3:5] == ": ")
    want: dict[tuple[str, ...], list[str]] = {}
    for isa in RUN:
        want.setdefault(facts[isa], []).append(isa)
    assert got == sorted(sorted(group) for group in want.values())
    # (the three facts themselves are the ISA modules' declarations)
    for isa, (char, endian, long_) in facts.items():
        desc = by_name(isa)
        assert char == ("signed" if desc.c_values.char_signed else "unsigned"), isa
        assert (endian, long_) == (desc.identity.endian, f"{8 * desc.identity.word_size} bits")


def test_matrix_agrees_where_the_outputs_agree(diff: subprocess.CompletedProcess,
                                               facts: dict[str, tuple[str, ...]]) -> None:
    lines = diff.stdout.decode().splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines
            if line.split() and line.split()[0] in RUN and len(line.split()) == len(RUN) + 1}
    assert sorted(rows) == sorted(RUN)
    for a in RUN:
        assert rows[a] == ["=" if facts[a] == facts[b] else "x" for b in RUN], a


def test_a_gdb_only_isa_asks_for_unconfined() -> None:
    got = run_emutrace("diff", "--arch", "x86_64,ppc64", TEMPLATE)
    assert got.returncode == 64 and b"Traceback" not in got.stderr
    assert got.stderr.count(b"\n") == 1 and b"--unconfined" in got.stderr
