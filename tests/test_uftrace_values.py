"""Argument and return values uftrace reads from DWARF, checked on ten ISAs: `long double`
(x87 80-bit, IEEE binary128, IBM double-double, or double) in and out, and structs with
floating-point members followed by an int and a double (conform.c's `floats` scenario),
also where the FP registers run out and where ARM VFP back-fills, and struct results with
floating-point members.

Two oracles, both independent of emutrace:

* the program's own output: each function prints what it received (`%Lf`, `%f`, `%d`) and
  main prints the results, on each ISA (under emutrace, checked equal to the untraced
  native run's where the ISA's long double is as wide as x86's);
* uftrace 0.13 recording the native `-pg` build (tests/test_uftrace_conformance.py's
  harness), for the values it reads right (UFTRACE_WRONG names the others).

Ours is `emutrace run`'s text trace (one run per ISA); the uftrace recording path (our
`record`, then `replay`) is checked to show the same values on two ISAs (x86-64's x87 and
AArch64's binary128 long double; the other ISAs share the writer and reader)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ISAS, bin_path, run_emutrace
from .test_uftrace_conformance import ENTRY, EXIT, LINE, canon, pg_build, uftrace_data

RESULTS = ("c_ldouble", "c_dd_sum", "c_fff_sum", "c_dl_sum", "c_fi_sum", "c_late_pair",
           "c_backfill")  # (in the order main prints their results)
MAKERS = ("c_make_dd", "c_make_fff", "c_make_fi")  # (each prints the struct it returns)
FUNCTIONS = RESULTS + MAKERS
PRINTED = re.compile(r"^(c_\w+)\((.*)\)(?: = (.*))?$")

# (function, argument index or "ret") where uftrace 0.13 shows another value than the
# untraced program has: `uftrace record -a` clobbers the %xmm registers that carry a struct
# with double members before the callee reads them (the -pg program then prints
# c_dd_sum({0.000000, 0.000000}, ...) and c_dl_sum({0.000000, -7}, 12, 0.000000) itself);
# these are checked against the untraced program's output only
UFTRACE_WRONG = {
    ("c_dd_sum", "ret"): "under uftrace -a c_dd_sum gets {0.0, 0.0} and returns 10.125 "
                         "(8.875 untraced)",
    ("c_dl_sum", 2): "under uftrace -a c_dl_sum gets x = 0.0 (0.375 untraced)",
    ("c_dl_sum", "ret"): "under uftrace -a c_dl_sum returns 5.0 (9.125 untraced)",
    ("c_late_pair", "ret"): "under uftrace -a c_late_pair gets a = b = 1.25 and returns "
                            "40.875 (41.375 untraced)",
}
# ISAs whose long double is a double (GCC's __LDBL_MANT_DIG__ 53): c_ldouble's values are
# the program's own, not x86's 64-bit-significand ones uftrace shows
LONG_DOUBLE_IS_DOUBLE = {
    "arm": "AAPCS §8.1.1: long double is double",
    "mips": "MIPS o32: long double is double",
    "mipsel": "MIPS o32: long double is double",
}
# uftrace 0.13 shows a struct passed by value as `NAME{...}` (no members); ours shows the
# members, compared with the program's own output instead
STRUCT = "a struct"


def split(text: str) -> list[str]:
    """`1, {.a=1, .b=2}, "x, y"` → its values (commas inside braces and quotes kept)."""
    out, cur, depth, quote = [], "", 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote and not cur.endswith("\\") else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def value(text: str) -> object:
    """A shown value as a comparable one: a struct as its members' values (ours `{.a=1.25,
    .b=-2.5}`, the program's `{1.250000, -2.500000}`), or STRUCT (uftrace's `c_dd{...}`);
    a long double's text kept whole (exactness is the point)."""
    m = re.fullmatch(r"(\w*)\{(.*)\}", text)
    if m is not None:
        if m.group(2) == "...":
            return STRUCT
        return tuple(value(v.split("=", 1)[-1]) for v in split(m.group(2)))
    if re.fullmatch(r"-?\d+\.\d{6}", text):  # %f / %Lf text: kept whole (canon would
        return text  # round it through a double); ours' shortest doubles canon to the same
    return canon(text)


Call = tuple[tuple[object, ...], object]  # (arguments, result)


def calls(trace: str) -> dict[str, Call]:
    """FUNCTIONS' arguments and results in a text trace (ours or uftrace's replay)."""
    out: dict[str, Call] = {}
    args: dict[str, tuple[object, ...]] = {}
    for line in trace.splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        text = m["text"].strip()
        entry, leave = ENTRY.match(text), EXIT.match(text)
        if entry is not None and entry["name"] in FUNCTIONS:
            args[entry["name"]] = tuple(value(v) for v in split(entry["args"]))
            if entry["ret"] is not None:
                out[entry["name"]] = (args[entry["name"]], value(entry["ret"]))
        elif leave is not None and leave["name"] in FUNCTIONS:
            out[leave["name"]] = (args[leave["name"]], value(leave["ret"] or ""))
    return out


def programs(stdout: str) -> dict[str, Call]:
    """What each function printed it received (and a maker, what it returns), and the
    result main printed."""
    lines = stdout.splitlines()
    printed = {m[1]: m for m in map(PRINTED.match, lines) if m is not None}
    results = dict(zip(RESULTS, (value(v) for v in lines[-1].split()), strict=True))
    return {name: (tuple(value(v) for v in split(printed[name][2])),
                   results[name] if name in results else value(printed[name][3]))
            for name in FUNCTIONS}


def exact(call: Call) -> tuple[str, str]:
    """c_ldouble's long double argument and result as text (no rounding through a double)."""
    (x, *_), result = call
    return str(x), str(result)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="values-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def ours(isa: str, scratch: Path) -> tuple[str, str]:
    """(`emutrace run`'s text trace of conform floats on isa, the program's stdout)."""
    out = scratch / f"{isa}.txt"
    if not out.exists():
        done = run_emutrace("run", "--backend", "int3", "--no-libcall", "-o", out,
                            bin_path(isa, "conform"),
                            "floats")
        assert done.returncode == 0, done.stderr.decode()
        (scratch / f"{isa}.out").write_bytes(done.stdout)
    return out.read_text(), (scratch / f"{isa}.out").read_text()


@functools.cache
def uftraces() -> tuple[dict[str, Call], str]:
    """(uftrace's values of the native -pg build, that build's stdout run untraced)."""
    data, _ = uftrace_data("floats")
    shown = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "--no-libcall"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    untraced = subprocess.run([str(pg_build()), "floats"], capture_output=True, text=True,
                              timeout=60, check=True)
    return calls(shown.stdout), untraced.stdout


@pytest.mark.parametrize("isa", ISAS)
def test_float_values_are_the_programs(isa: str, scratch: Path) -> None:
    """Every argument (struct members included) and result as the program itself printed
    it; c_ldouble's long double as exactly the program's %Lf text."""
    trace, output = ours(isa, scratch)
    expected = programs(output)
    got = calls(trace)
    assert got == expected
    assert exact(got["c_ldouble"]) == exact(expected["c_ldouble"])
    assert len(got["c_ldouble"][0]) == 3  # (s390x: the hidden result address not shown)
    _, native_output = uftraces()
    if isa not in LONG_DOUBLE_IS_DOUBLE:  # the program computed what it does natively
        assert output == native_output
    else:
        assert exact(expected["c_ldouble"]) != exact(programs(native_output)["c_ldouble"])


@pytest.mark.parametrize("isa", ISAS)
def test_float_values_are_uftraces(isa: str, scratch: Path) -> None:
    """Ours equals uftrace's on every value it reads right (UFTRACE_WRONG: the program's
    own output says it is wrong there; structs compared as structs)."""
    theirs, untraced = uftraces()
    program = programs(untraced)
    got = calls(ours(isa, scratch)[0])
    for (name, where), why in UFTRACE_WRONG.items():  # (the rule applies to something)
        args, result = theirs[name]
        shown, right = (result, program[name][1]) if where == "ret" else \
            (args[where], program[name][0][where])
        assert shown != right, why

    def comparable(values: dict[str, Call]) -> dict[str, Call]:
        out = {}
        for name, (args, result) in values.items():
            args = tuple("wrong in uftrace" if (name, i) in UFTRACE_WRONG else
                         STRUCT if isinstance(v, tuple) else v for i, v in enumerate(args))
            out[name] = (args, "wrong in uftrace" if (name, "ret") in UFTRACE_WRONG
                         else STRUCT if isinstance(result, tuple) else result)
        if isa in LONG_DOUBLE_IS_DOUBLE:
            del out["c_ldouble"]
        return out

    assert comparable(got) == comparable(theirs)
    if isa not in LONG_DOUBLE_IS_DOUBLE:
        assert exact(got["c_ldouble"]) == exact(theirs["c_ldouble"])


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_recorded_float_values_replay_the_same(isa: str, scratch: Path) -> None:
    """`record` then `replay` shows the values `run` showed (a long double kept as its
    text: uftrace has no binary128 format; uftrace's replay shows it quoted)."""
    data = scratch / f"{isa}.data"
    done = run_emutrace("record", "-d", data, bin_path(isa, "conform"), "floats")
    assert done.returncode == 0, done.stderr.decode()
    shown = run_emutrace("replay", "-d", data, "--no-libcall")
    assert shown.returncode == 0, shown.stderr.decode()
    assert calls(shown.stdout.decode()) == calls(ours(isa, scratch)[0])


@pytest.mark.parametrize("isa", ["x86_64", "s390x"])
def test_long_double_result_format_is_uftraces(isa: str, scratch: Path) -> None:
    """`-R FUNC@retval/f80` (uftrace's long double format) reads the ISA's long double:
    x86-64's x87 %st0, s390x's binary128 at the hidden result address; uftrace's own
    `-R c_ldouble@retval/f80` of the -pg build shows the same text, as the program prints
    it.  (Two ISAs: the other places are test_float_values_are_the_programs'.)"""
    data = scratch / "uftrace.f80"
    recorded = subprocess.run(["uftrace", "record", "-R", "c_ldouble@retval/f80", "-d",
                               str(data), str(pg_build()), "floats"], capture_output=True,
                              timeout=120)
    assert recorded.returncode == 0, recorded.stderr
    shown = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-F",
                            "c_ldouble", "-D", "1"], capture_output=True, text=True,
                           timeout=120).stdout
    theirs = re.findall(r"c_ldouble\(\) = (\S+);", shown)
    out = scratch / f"{isa}.f80.txt"
    done = run_emutrace("run", "--backend", "int3", "--no-libcall", "-R",
                        "c_ldouble@retval/f80", "-o", out, bin_path(isa, "conform"), "floats")
    assert done.returncode == 0, done.stderr.decode()
    ours = re.findall(r"\} = (\S+); /\* c_ldouble \*/", out.read_text())
    printed = exact(programs(done.stdout.decode())["c_ldouble"])[1]
    assert ours == theirs == [printed]
