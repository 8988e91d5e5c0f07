"""A function's long double result (x87 %st(0), 80-bit extended: every FP result on i386,
a long double on x86_64) as the trace shows it: the double C's conversion gives (round to
nearest; beyond the double range ±inf, below it 0 or a subnormal), never an internal
error.  The oracle is the program's own `(double)` conversion, printed by `ldbl` run
natively on this x86_64 host and under qemu-user (testbins/src/ldbl.c)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .conftest import ENV, bin_path, qemu_binary, run_emutrace

LINE = re.compile(r"^(ld_\w+): \S+ double=(\S+)$")
TRACED = re.compile(r"^\s*\d+ \|\s+(ld_\w+)\(1\) = (\S+);$")


def own_conversions(stdout: bytes) -> dict[str, str]:
    """name -> the double the program converted its result to, as Python shows it (repr:
    the shortest decimal that reads back, emutrace's float format, trace/values.py)."""
    out = {}
    for line in stdout.decode().splitlines():
        m = LINE.match(line)
        assert m, line
        out[m.group(1)] = repr(float.fromhex(m.group(2)))
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("isa", ["i386", "x86_64"])
def test_long_double_results_beyond_double(isa: str, engine: str, tmp_path: Path) -> None:
    path = bin_path(isa, "ldbl")
    native = subprocess.run([str(path)], env=ENV, capture_output=True, timeout=60)
    ref = subprocess.run([qemu_binary(isa), str(path)], env=ENV, capture_output=True,
                         timeout=60)
    assert native.returncode == ref.returncode == 0
    assert native.stdout == ref.stdout
    expected = own_conversions(native.stdout)
    assert expected["ld_huge"] == "inf" and expected["ld_neg_huge"] == "-inf"
    assert expected["ld_subnormal"] != "0.0"  # a subnormal, rounded once
    got = run_emutrace("run", "--backend", "int3", "--engine", engine, path, cwd=tmp_path)
    assert got.returncode == 0, got.stderr.decode()
    traced = {m.group(1): m.group(2) for line in got.stderr.decode().splitlines()
              if (m := TRACED.match(line))}
    assert traced == expected
    assert got.stdout == native.stdout
