"""Arguments and return values in the data directory (trace/uftrace_args.py): Debian's
uftrace 0.13 decodes the values `emutrace record` wrote to what `emutrace run` shows (the
typed testbin's callees: char both signednesses, unsigned long, double and float, a string,
an enum, a bool, a struct by value), and `emutrace replay -d` shows them as `run` does."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from emutrace.trace.uftrace_args import pack_values, spec_of, unpack_values
from emutrace.trace.values import Value

from .conftest import ISAS, bin_path, run_emutrace

# typed.c's callees: the kind of each argument and of the result, as the C types say
KINDS = {"take_char": ("int", "int"), "take_schar": ("int", "int"),
         "take_uchar": ("int", "int"), "take_ulong": ("int", "int"),
         "take_long": ("int", "int"), "scale": ("float,int", "float"),
         "halve": ("float", "float"), "measure": ("str", "int"), "colour_name": ("word", "str"),
         "is_big": ("int", "bool"), "sum_pair": ("word", "int")}
ENTRY = re.compile(r"\| +(\w+)\((.*)\) \{$")
EXIT = re.compile(r"\| +\} = (.*); /\* (\w+) \*/$")


def canon(kind: str, text: str, ours: bool) -> object:
    """A shown value as a Python value: uftrace prints unsigned numbers above 100000 in hex,
    floats with %#f, strings with raw tabs, enums and structs as quoted strings, bools as
    0/1; emutrace prints C literals."""
    if kind == "int":
        if text.startswith("'"):
            return ord(ast.literal_eval(text))
        return int(text, 0)
    if kind == "float":
        return round(float(text), 5)
    if kind == "bool":
        return {"true": 1, "false": 0}.get(text, text if ours else int(text))
    if kind == "str":
        return ast.literal_eval(text) if ours else text[1:-1]
    return text if ours else text[1:-1]  # "word": an enum's name, a struct's members


def calls(text: str, ours: bool) -> list[tuple[str, list[object], object]]:
    """(function, arguments, result) of every typed.c callee in a replay text."""
    out: list[tuple[str, list[object], object]] = []
    pending: list[tuple[str, list[object]]] = []
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m and m.group(1) in KINDS:
            kinds = KINDS[m.group(1)][0].split(",")
            parts = m.group(2).split(", ") if len(kinds) > 1 else [m.group(2)]
            pending.append((m.group(1), [canon(k, p, ours)
                                         for k, p in zip(kinds, parts, strict=True)]))
        m = EXIT.search(line)
        if m and m.group(2) in KINDS:
            name, args = pending.pop()
            assert name == m.group(2)
            out.append((name, args, canon(KINDS[name][1], m.group(1), ours)))
    return out


@pytest.mark.parametrize("isa", ISAS)
def test_uftrace_shows_the_values_run_shows(isa: str, tmp_path: Path) -> None:
    """Every ISA: 32- and 64-bit words, both byte orders, plain char signed or unsigned."""
    program = bin_path(isa, "typed")
    run = run_emutrace("run", "--backend", "int3", program)
    assert run.returncode == 0, run.stderr.decode()
    want = calls(run.stderr.decode(), ours=True)
    assert len(want) == 14

    data = tmp_path / "rec"
    rec = run_emutrace("record", "-d", data, program)
    assert rec.returncode == 0, rec.stderr.decode()
    theirs = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data)],
                            capture_output=True, check=True).stdout.decode()
    assert calls(theirs, ours=False) == want

    replay = run_emutrace("replay", "-d", data)
    assert replay.returncode == 0, replay.stderr.decode()
    assert calls(replay.stdout.decode(), ours=True) == want
    # and line for line as `run` printed the whole trace, "(at exit)" notes included, but
    # for the values of code outside every symbol (`0x401058`) and of PLT stubs
    # (`strchrnul@plt`, static glibc's IFUNC stubs): a recording keeps no spec for them
    # (docs/recording-and-viewers.md)
    def comparable(text: str) -> list[str]:
        return [re.sub(r"\| (\s*)(0x[0-9a-f]+|\S+@plt)\(.*\) \{$", r"| \1\2() {", line)
                for line in text.splitlines()
                if not re.search(r"\}( = .*;)? /\* (0x[0-9a-f]+|\S+@plt) \*/$", line)]
    assert comparable(replay.stdout.decode()) == comparable(run.stderr.decode())


VALUES = [Value("auto", 64, 2**64 - 5), Value("int", 32, 0xFFFFFFC8), Value("uint", 64, 3 * 10**9),
          Value("char", 8, 0xC8), Value("uchar", 8, 200), Value("bool", 8, 1),
          Value("float", 32, 0x3FC00000), Value("float", 64, 0x3FF8000000000000),
          Value("ptr", 32, 0x1000), Value("str", 64, 0x5000, "hi\there"),
          Value("str", 64, 0, None), Value("str", 64, 0x6000, None),
          Value("enum", 32, 5, "GREEN"), Value("struct", 64, 0, "{.x=3, .y=-4}"),
          Value("oct", 32, 0o644), Value("hex", 16, 0xBEEF)]


def test_values_round_trip() -> None:
    """Every kind packed as uftrace lays it out (4-byte pieces, 8-byte total) reads back
    equal, given the kinds emutrace.txt keeps."""
    specs = [spec_of(v) for v in VALUES]
    data = b"\xff" * 8 + pack_values(VALUES, specs) + b"\xee" * 8
    assert (len(data) - 16) % 8 == 0
    got, end = unpack_values(data, 8, specs, [v.kind for v in VALUES])
    assert end == len(data) - 8
    for want, back in zip(VALUES, got, strict=True):
        if want.kind in ("enum", "struct"):  # kept as their text
            assert back.text == want.text
        elif want.kind in ("str", "buf"):
            assert (back.text, back.raw if back.text is None else 1) == \
                (want.text, want.raw if want.text is None else 1)
        else:
            assert (back.kind, back.raw) == (want.kind, want.raw)
    with pytest.raises(IndexError):
        unpack_values(data[:20], 8, specs, [])
