"""Typed arguments and return values.

Oracles: testbins/src/typed.c's callees print what they received, run under qemu-user (the
expected argument values); return values follow from the C source's arithmetic on them;
`char`'s signedness per ISA is checked against GCC's own DWARF for plain `char`; the libc
table against the C source's qsort call and the program's printed line lengths.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from emutrace.discover.prototypes import read_prototypes
from emutrace.discover.symbols import read_symbols
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.trace.format import ReplayOptions, replay_lines
from emutrace.trace.values import quote_c

from .conftest import ISAS, bin_path, run_emutrace, run_qemu

COLOURS = {0: "RED", 5: "GREEN", 6: "BLUE"}  # enum colour in typed.c


def _char(v: int) -> str:
    return f"'{chr(v)}'" if 0x20 <= v < 0x7F else str(v)


def expected_calls(program_output: str) -> list[str]:
    """`name(args) = result;` per callee line the program printed (see typed.c)."""
    out = []
    for line in program_output.splitlines():
        name, _, rest = line.partition(" ")
        if name in ("take_char", "take_schar"):
            v = int(rest)
            out.append(f"{name}({_char(v)}) = {v};")
        elif name == "take_uchar":
            v = int(rest)
            out.append(f"take_uchar({_char(v)}) = {v};")
        elif name == "take_ulong":
            v = int(rest)
            out.append(f"take_ulong({v}) = {v // 3};")
        elif name == "take_long":
            v = int(rest)
            out.append(f"take_long({v}) = {v * 2};")
        elif name == "scale":
            x, n = rest.split()
            out.append(f"scale({float(x)!r}, {n}) = {float(x) * int(n)!r};")
        elif name == "halve":
            f = float(rest)
            out.append(f"halve({f!r}) = {f / 2!r};")
        elif name == "measure":
            m = re.fullmatch(r'"(.*)" (\d+)', rest, re.S)
            assert m, line
            out.append(f"measure({quote_c(m.group(1))}) = {m.group(2)};")
        elif name == "colour_name":
            v = int(rest)
            out.append(f"colour_name({COLOURS[v]}) = \"{COLOURS[v].lower()}\";")
        elif name == "is_big":
            v = int(rest)
            out.append(f"is_big({v}) = {'true' if v > 1000 else 'false'};")
        elif name == "sum_pair":
            x, y = map(int, rest.split())
            out.append(f"sum_pair({{.x={x}, .y={y}}}) = {x + y};")
        else:
            raise AssertionError(f"unexpected program line {line!r}")
    return out


def shown_calls(trace: str, names: set[str]) -> list[str]:
    """The leaf lines `name(...) = ...;` of the given functions, as the replay shows them."""
    out = []
    for line in trace.splitlines():
        text = line.split("| ", 1)[-1].strip()
        if text.split("(", 1)[0] in names:
            out.append(text)
    return out


def replay(path: Path, backend: str, depth: int = 2) -> str:
    result = Process(RunConfig(program=str(path), backend=backend), warn=lambda m: None).run()
    symbols = read_symbols(result.image)

    def name(addr: int) -> str:
        f = symbols.containing(addr)
        return f.name if f is not None else f"{addr:#x}"

    opts = ReplayOptions(depth=depth, word_bits=8 * result.image.isa.identity.word_size)
    return "\n".join(line.split("| ", 1)[-1] for line in replay_lines(result.records, name, opts))


@pytest.mark.parametrize("isa", ISAS)
def test_typed_arguments_and_results_match_the_program(isa: str, tmp_path: Path) -> None:
    """Every typed.c callee, on every ISA: signed and unsigned char (plain char as the ABI
    has it), unsigned long, long, double argument and result, float, const char *, an enum,
    _Bool, a struct by value — shown as the callee saw them (its own printf, under qemu)."""
    path = bin_path(isa, "typed")
    want = run_qemu(isa, path)
    assert want.returncode == 0
    out = tmp_path / "trace"
    got = run_emutrace("run", "--backend", "int3", "-D", "2", "-o", out, path)
    assert (got.returncode, got.stdout) == (0, want.stdout)
    expected = expected_calls(want.stdout.decode())
    names = {e.split("(", 1)[0] for e in expected}
    assert shown_calls(out.read_text(), names) == expected
    # plain char: the ISA table's signedness is GCC's (DWARF base type of `char`) and the
    # program's (it printed (char)200 as -56 or 200)
    signed = by_name(isa).c_values.char_signed
    proto = read_prototypes(str(path)).by_name["take_char"]
    assert proto.params[0].kind == ("char" if signed else "uchar")
    assert want.stdout.decode().splitlines()[0] == ("take_char -56" if signed else
                                                   "take_char 200")


@pytest.mark.parametrize("isa", ["x86_64", "mips", "arm"])
def test_every_backend_reads_the_same_values(isa: str) -> None:
    """int3 reads at the callee (after a MIPS delay slot), hwbp/entry/btf/step likewise:
    the same typed text from every mechanism (bts records no values)."""
    path = bin_path(isa, "typed")
    ref = replay(path, "int3")
    assert "scale(1.5, 3) = 4.5;" in ref and 'sum_pair({.x=3, .y=-4}) = -1;' in ref
    backends = ["hwbp", "btf", "step"]
    if by_name(isa).capability(Cap.ENTRY_SEES_EVERY_CALL).works:
        backends.append("entry")
    for backend in backends:
        assert replay(path, backend) == ref, backend


def _without_dwarf(src: Path, dst: Path) -> Path:
    """A copy of src whose DWARF sections no reader recognises: their names in the
    section-name table renamed `.debug_*` -> `.nodbg_*` (same length, nothing moves; what
    `strip --strip-debug` achieves, without needing the cross binutils)."""
    data = bytearray(src.read_bytes())
    with src.open("rb") as f:
        names = ELFFile(f).get_section(ELFFile(f).header["e_shstrndx"])
        start, end = names["sh_offset"], names["sh_offset"] + names["sh_size"]
    data[start:end] = bytes(data[start:end]).replace(b".debug_", b".nodbg_")
    dst.write_bytes(bytes(data))
    dst.chmod(0o755)
    return dst


@pytest.mark.parametrize("isa", ["x86_64", "s390x"])
def test_libc_table_types_libc_calls_without_dwarf(isa: str, tmp_path: Path) -> None:
    """calls with its DWARF removed (symbols kept): qsort, printf, putchar, bsearch are
    typed by the bundled table (calls.c: qsort(ints, 10, sizeof(int), compare_ints));
    a function in neither DWARF nor the table shows 4 integer words."""
    path = _without_dwarf(bin_path(isa, "calls"), tmp_path / "calls.nodwarf")
    assert read_prototypes(str(path)).by_name == {}
    want = run_qemu(isa, path, "qsort")
    out = tmp_path / "trace"
    got = run_emutrace("run", "--backend", "int3", "-F", "scenario_qsort", "-D", "2", "-o", out,
                       path, "qsort")
    assert (got.returncode, got.stdout) == (0, want.stdout)
    text = out.read_text()
    # (void: no value after it)
    assert re.search(r"\| {3}qsort\(0x[0-9a-f]+, 10, 4, 0x[0-9a-f]+\);", text), text
    # printf: its format string, and the count it returned = the line it printed
    line23 = next(x for x in want.stdout.decode().splitlines(True) if "bsearch 23" in x)
    assert f'printf("qsort: bsearch 23 -> index %d\\n") = {len(line23)};' in text
    assert "putchar(10) = 10;" in text
    # scenario_qsort itself has no prototype now: 4 words
    first = text.splitlines()[1]
    assert re.search(r"scenario_qsort\(([^,()]+, ){3}[^,()]+\) \{", first), first


def test_dash_A_sets_the_count_for_any_function(tmp_path: Path) -> None:
    """-A FUNC@argN: N values for that function, typed or not; every other function keeps
    its own count — its prototype's, else 4 words (the old bug: a function without DWARF
    showed the program's largest DWARF count, and -A could not raise it).  calls.c:
    find_int(ints, 10, 23) finds index 5, print_ints("sorted", ...); putchar(int) from
    the libc table; glibc's __vfprintf_internal in neither."""
    path = bin_path("x86_64", "calls")
    out = tmp_path / "trace"
    got = run_emutrace("run", "--backend", "int3", "-o", out, "-F", "scenario_qsort", "-D", "3",
                       "-A", "find_int@arg4", "-A", "print_ints@arg1", "-A", "putchar@arg3",
                       path, "qsort")
    assert got.returncode == 0
    text = out.read_text()
    assert re.search(r"find_int\(0x[0-9a-f]+, 10, 23, [^,()]+\) \{", text), text
    assert "} = 5; /* find_int */" in text
    assert 'print_ints("sorted") {' in text
    assert re.search(r"putchar\(10, [^,()]+, [^,()]+\) = 10;", text)
    vf = re.findall(r"__vfprintf_internal\(([^()]*)\)", text)
    assert vf and all(len(args.split(", ")) == 4 for args in vf), vf
