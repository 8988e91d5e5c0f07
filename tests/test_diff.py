"""`emutrace diff`.

Oracles: the ISA partition of testbins/src/isadep.c's behaviour comes from the program's
own output under qemu-user (which branch it took on each ISA), cross-checked against the
ABI facts it depends on (char signedness, byte order, sizeof(long)) as the ISA modules
declare them; the calls scenarios behave the same on every ISA (their qemu output is
equal), so their traces must compare equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.trace.diff import classes, first_divergence, matrix, normalise
from emutrace.trace.events import Entry, Exit
from emutrace.trace.values import Value

from .conftest import ISAS, REPO, bin_path, run_emutrace, run_qemu

TEMPLATE = str(REPO / "testbins" / "{isa}" / "isadep")


def behaviour(isa: str) -> tuple[str, str, str]:
    """(char, endian, long) as isadep reports it under qemu."""
    out = run_qemu(isa, bin_path(isa, "isadep")).stdout.decode().splitlines()
    facts = {line.split(":")[0]: line.split(":")[1].split("(")[0].strip() for line in out}
    return facts["char"], facts["endian"], facts["long"]


def test_isadep_differences_are_pointed_at_the_right_call_on_the_right_isas() -> None:
    """isadep with all checks: the ISAs fall into classes by (char, endian, long); for each
    class the first divergence from x86_64 is the first check (in program order) that
    differs, shown as the call each side made."""
    got = run_emutrace("diff", TEMPLATE)
    assert got.returncode == 1, got.stderr
    text = got.stdout.decode()
    facts = {isa: behaviour(isa) for isa in ISAS}
    for isa, (char, endian, long_) in facts.items():  # the ABI facts, from the ISA modules
        desc = by_name(isa)
        assert char == ("signed" if desc.c_values.char_signed else "unsigned"), isa
        assert endian == desc.identity.endian, isa
        assert long_ == f"{8 * desc.identity.word_size} bits", isa
    want_groups: dict[tuple[str, str, str], list[str]] = {}
    for isa in ISAS:
        want_groups.setdefault(facts[isa], []).append(isa)
    lines = text.splitlines()
    got_groups = [line.split(": ", 1)[1].split() for line in lines
                  if line.startswith("  ") and line[2:3].isalpha() and line[3:5] == ": "]
    assert sorted(got_groups) == sorted(want_groups.values()), text
    ref = facts["x86_64"]
    shown = {"char": {"signed": "classify(-56)", "unsigned": "classify(200)"},
             "endian": {"little": "little_endian(68)", "big": "big_endian(17)"},
             "long": {"64 bits": "long_is_64(8)", "32 bits": "long_is_32(4)"}}
    blocks = {lines[i + 2].split()[0]: (lines[i + 1], lines[i + 2])
              for i, line in enumerate(lines) if line.startswith("first divergence")}
    for group in got_groups[1:]:
        other = facts[group[0]]
        which = next(i for i in range(3) if other[i] != ref[i])
        kind = ("char", "endian", "long")[which]
        ref_line, other_line = blocks[group[0]]
        assert ref_line.split()[0] == "x86_64"
        assert ref_line.rstrip().endswith(shown[kind][ref[which]]), (kind, ref_line)
        assert other_line.rstrip().endswith(shown[kind][other[which]]), (kind, other_line)
    # the matrix: one row per ISA, '=' exactly where the behaviours agree
    rows = {line.split()[0]: line.split()[1:] for line in lines
            if line.split() and line.split()[0] in ISAS and len(line.split()) == 11}
    for a in ISAS:
        assert rows[a] == ["=" if facts[a] == facts[b] else "x" for b in ISAS], a


def test_names_only_points_at_the_branch_taken() -> None:
    """--no-values: the divergence is the callee each ISA branched to."""
    got = run_emutrace("diff", "--arch", "x86_64,aarch64", "--no-values", TEMPLATE + " char")
    assert got.returncode == 1
    text = got.stdout.decode()
    assert "  x86_64   main() > classify() > char_is_signed()" in text, text
    assert "  aarch64  main() > classify() > char_is_unsigned()" in text, text


@pytest.mark.parametrize("template", ["calls struct"])
def test_same_behaviour_compares_equal_on_all_isas(template: str) -> None:
    """A scenario with nothing ISA-dependent (its qemu output is the same everywhere) gives
    equal traces on all ten ISAs: names, nesting, typed arguments and results — struct
    arguments and results included, though every ABI passes them differently."""
    prog, _, arg = template.partition(" ")
    outputs = {run_qemu(isa, bin_path(isa, prog), arg).stdout for isa in ISAS}
    assert len(outputs) == 1
    got = run_emutrace("diff", str(REPO / "testbins" / "{isa}" / prog) + " " + arg)
    assert got.returncode == 0, got.stdout.decode()
    assert got.stdout.decode().startswith(f"equal: 10 traces ({' '.join(ISAS)})")


@pytest.mark.parametrize("argv, code, message", [
    (["testbins/x86_64/isadep"], 64, "has no {isa}"),
    (["--arch", "vax", TEMPLATE], 64, "--arch vax: unknown ISA"),
    (["--keep", "(", TEMPLATE], 64, "--keep '(':"),
    (["testbins/{isa}/nonexistent"], 66, "no such file"),
])
def test_bad_usage_is_refused_before_running(argv: list[str], code: int, message: str) -> None:
    got = run_emutrace("diff", *argv, cwd=REPO)
    assert got.returncode == code and got.stdout == b""
    err = got.stderr.decode()
    assert err.startswith("emutrace: ") and message in err and err.count("\n") == 1, err


def test_directories_that_are_not_recordings_are_one_line_65(tmp_path: Path) -> None:
    """DIR DIR with directories `emutrace record` did not write: one line naming the file."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    got = run_emutrace("diff", tmp_path / "a", tmp_path / "b")
    assert got.returncode == 65 and got.stdout == b""
    assert got.stderr.decode() == f"emutrace: {tmp_path / 'a' / 'info'}: missing (not a " \
        "complete uftrace data directory)\n"


# ---------------------------------------------------------------- the pure comparison

def _records(calls: list[tuple[str, tuple[Value, ...]]]) -> list[Entry | Exit]:
    """main > each call (a leaf) at depth 1, with lib > helper under the first."""
    names = {"main": 1, "lib": 2, "helper": 3, **{n: 10 + i for i, (n, _) in enumerate(calls)}}
    recs: list[Entry | Exit] = [Entry(0, 0, names["main"])]
    for i, (name, args) in enumerate(calls):
        recs.append(Entry(i, 1, names[name], args))
        if i == 0:
            recs += [Entry(i, 2, names["lib"]), Entry(i, 3, names["helper"]),
                     Exit(i, 3, names["helper"], 1, 0), Exit(i, 2, names["lib"], 1, 0)]
        recs.append(Exit(i, 1, names[name], Value("int", 32, 7), 1))
    recs.append(Exit(9, 0, names["main"], Value("int", 32, 0), 9))
    by_addr = {v: k for k, v in names.items()}
    return recs, by_addr.__getitem__  # type: ignore[return-value]


def test_dropped_frames_keep_the_nesting_of_the_rest_and_pointers_do_not_count() -> None:
    a, name_a = _records([("f", (Value("ptr", 64, 0x7FFF0000), Value("int", 64, 3))),
                          ("g", (Value("str", 64, 0x1000, "hi"),))])
    b, name_b = _records([("f", (Value("ptr", 32, 0x40000), Value("int", 32, 3))),
                          ("g", (Value("str", 32, 0x2000, "hi"),))])
    keep = lambda n: n not in ("lib", "helper")  # noqa: E731
    ta, tb = normalise(a, name_a, keep), normalise(b, name_b, keep)
    assert [(t.kind, t.depth, t.name) for t in ta.tokens][:3] == [
        ("call", 0, "main"), ("call", 1, "f"), ("return", 1, "f")]
    assert ta.tokens[1].values == ("ptr", "3")
    assert first_divergence(ta, tb) is None
    c, name_c = _records([("f", (Value("ptr", 64, 0), Value("int", 64, 3))),
                          ("g", (Value("str", 64, 0x1000, "ho"),))])
    tc = normalise(c, name_c, keep)
    assert first_divergence(ta, tc) == 1  # NULL is not a pointer like the others
    groups = classes({"x": ta, "y": tb, "z": tc})
    assert groups == [["x", "y"], ["z"]]
    assert matrix(["x", "y", "z"], groups) == ["  x y z", "x = = x", "y = = x", "z x x ="]
