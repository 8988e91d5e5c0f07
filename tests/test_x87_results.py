"""A function's long double result (x87 %st(0), 80-bit extended: every FP result on i386,
a long double on x86_64) as the trace shows it: as uftrace and printf's `%Lf` show a long
double, six decimals of the exact value (beyond the double range too), never an internal
error.  The oracle is the program's own `%La` of the value (exact), run natively on this
x86_64 host and under qemu-user (testbins/src/ldbl.c), written as %Lf by the model below."""

from __future__ import annotations

import re
import subprocess
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from .conftest import ENV, bin_path, qemu_binary, run_emutrace

LINE = re.compile(r"^(ld_\w+): (-?)0x([0-9a-f])(?:\.([0-9a-f]*))?p([-+]\d+) double=\S+$")
TRACED = re.compile(r"^\s*\d+ \|\s+(ld_\w+)\(1\) = (\S+);$")


def percent_lf(sign: str, lead: str, frac: str, exp: str) -> str:
    """%Lf of the value glibc's %La printed: exact, six decimals, ties to even."""
    value = Fraction(int(lead + frac, 16)) * Fraction(2) ** (int(exp) - 4 * len(frac))
    whole, part = divmod(round(value * 10**6), 10**6)
    return f"{sign}{Decimal(whole):f}.{part:06d}"


def own_values(stdout: bytes) -> dict[str, str]:
    """name -> the program's long double, as %Lf shows it."""
    out = {}
    for line in stdout.decode().splitlines():
        m = LINE.match(line)
        assert m, line
        out[m.group(1)] = percent_lf(m.group(2), m.group(3), m.group(4) or "", m.group(5))
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
    expected = own_values(native.stdout)
    assert len(expected["ld_huge"]) > 4800  # 2^16000: beyond a double, printed whole
    assert expected["ld_neg_huge"].startswith("-594865747678615882")
    assert expected["ld_tiny"] == "0.000000" and expected["ld_plain"] == "0.500000"
    got = run_emutrace("run", "--backend", "int3", "--engine", engine, path, cwd=tmp_path)
    assert got.returncode == 0, got.stderr.decode()
    traced = {m.group(1): m.group(2) for line in got.stderr.decode().splitlines()
              if (m := TRACED.match(line))}
    assert traced == expected
    assert got.stdout == native.stdout
