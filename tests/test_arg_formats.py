"""uftrace's argument and return-value formats (`-A FUNC@arg1/x64,arg2/i32,fparg1/f64`,
`-R FUNC@retval/x64`; discover/argformats.py): the values the program passed (its source's
constants, computed here as plain numbers) read in the format asked for, the same in
`emutrace run`'s trace, in `emutrace replay` and in Debian's uftrace 0.13 replaying the
recording (the independent oracle for how a format shows a value)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from emutrace.discover.argformats import Format, parse_formats
from emutrace.discover.prototypes import CType, Prototype
from emutrace.errors import UsageError

from .conftest import bin_path, run_emutrace

CALLS = bin_path("x86_64", "calls")
ARGS9 = ("-A", "combine9@arg1/x64,arg2/i32,arg3/u8", "-R", "combine9@retval/x64",
         "-A", "mixed9@arg1/c,arg2/i16,arg5/x8")
FLOAT = ("-A", "divide@fparg1/f64,fparg2", "-R", "divide@retval/f64", "-A",
         "poly_eval@fparg1/64")


def calls_of(text: str, func: str) -> list[str]:
    """`func(args) = retval` of every leaf line naming func, the duration column cut."""
    return [m[1] for m in re.finditer(rf"(?m)(?:\| +|^ *)({func}\(.*\)(?: = [^;]*)?);$",
                                      text)]


def uftrace_replay(data: Path, func: str) -> str:
    return subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(data), "-F", func,
                           "-f", "none"], capture_output=True, text=True, check=True,
                          timeout=120).stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """scenario -> (its recording, `run`'s trace of it)."""
    made = {}
    for scenario, opts in (("args9", ARGS9), ("float", FLOAT)):
        base = tmp_path_factory.mktemp(scenario)
        rec = run_emutrace("record", "-d", base / "data", *opts, CALLS, scenario)
        assert rec.returncode == 0, rec.stderr.decode()
        run = run_emutrace("run", "--backend", "int3", "-o", base / "trace", *opts, CALLS,
                           scenario)
        assert run.returncode == 0, run.stderr.decode()
        made[scenario] = (base / "data", (base / "trace").read_text())
    return made


def test_integer_formats(recorded: dict[str, tuple[Path, str]]) -> None:
    data, run_text = recorded["args9"]
    # calls.c: combine9(11, 22, 33, ...) = 11*1 + 22*2 + ... + 99*9, combine9(-1, 2, -3, ...)
    first = sum(k * 11 * k for k in range(1, 10))
    second = sum(k * (k if k % 2 == 0 else -k) for k in range(1, 10))
    want = [f"combine9(0xb, 22, 33) = {first:#x}",
            f"combine9(0xffffffffffffffff, 2, {-3 & 0xff}) = {second & (2**64 - 1):#x}"]
    assert calls_of(run_text, "combine9") == want
    replay = run_emutrace("replay", "-d", data).stdout.decode()
    assert calls_of(replay, "combine9") == want
    assert calls_of(uftrace_replay(data, "combine9"), "combine9") == want
    # mixed9(1, 2, 3, 4, 5, ...): arg1/c, arg2/i16, arg3 and arg4 as words, arg5/x8
    mixed = "mixed9(1, 2, 3, 4, 0x5) = 987654321"
    assert calls_of(run_text, "mixed9") == [mixed]
    assert calls_of(uftrace_replay(data, "mixed9"), "mixed9") == [mixed]


def numbers(call: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d*(?:e[-+]?\d+)?", call)]


def test_float_formats(recorded: dict[str, tuple[Path, str]]) -> None:
    data, run_text = recorded["float"]
    # calls.c scenario_float: divide(1, 3), divide(6.02214076e23, 1000), divide(1, 1048576),
    # divide(-22, 7); poly_eval(1.75) = 2x^3 - 3x^2 + 0.5x - 7
    pairs = [(1.0, 3.0), (6.02214076e23, 1000.0), (1.0, 1048576.0), (-22.0, 7.0)]
    want = [x for a, b in pairs for x in (a, b, a / b)]
    for text in (run_text, uftrace_replay(data, "divide")):
        got = [x for call in calls_of(text, "divide") for x in numbers(call)]
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6), got  # uftrace: %f
    x = 1.75
    for text in (run_text, uftrace_replay(data, "poly_eval")):
        (call,) = calls_of(text, "poly_eval")
        assert numbers(call)[0] == x  # the result is read by DWARF's prototype (a double)
        assert numbers(call)[1] == pytest.approx(((2 * x - 3) * x + 0.5) * x - 7)


def test_formats_parse_as_uftrace_writes_them() -> None:
    func, fmts = parse_formats("-A", "f@arg1/i32,arg3/x8,arg2/s,fparg2/32,retval/u16")
    assert func == "f"
    assert dict(fmts.ints) == {1: Format("int", 32), 2: Format("str", None),
                               3: Format("hex", 8)}
    assert dict(fmts.floats) == {2: Format("float", 32)}
    assert fmts.ret == Format("uint", 16)
    proto = fmts.prototype(None, 8)
    assert proto == Prototype((CType("int", 4), CType("str", 8), CType("hex", 1),
                               CType("float", 8), CType("float", 4)), CType("uint", 2))
    # -R alone keeps the prototype's arguments
    base = Prototype((CType("int", 4),), CType("int", 4))
    assert parse_formats("-R", "f@retval/f64")[1].prototype(base, 8) == Prototype(
        (CType("int", 4),), CType("float", 8))


@pytest.mark.parametrize("spec", [
    "f@arg1/q32", "f@arg1/i12", "f@arg1%rdi", "f@fparg1/i32", "f@arg1/s64", "f@", "@arg1/i32",
    "f@arg0/i32", "f@fparg1/f16"])
def test_bad_formats_are_usage_errors(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_formats("-A", spec)
    with pytest.raises(UsageError):
        parse_formats("-R", "f@arg1/i32")  # -R takes the return value only


def test_bad_formats_exit_64() -> None:
    for opts in (("-A", "combine9@arg1/q32"), ("-R", "combine9@retval/z"),
                 ("-R", "combine9@arg1")):
        proc = run_emutrace("run", "--backend", "int3", *opts, CALLS, "args9")
        err = proc.stderr.decode()
        assert proc.returncode == 64 and len(err.strip().splitlines()) == 1, err
