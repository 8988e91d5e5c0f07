"""`long double` bytes to text (trace/long_double.py) against the C library itself: each
format's bit patterns printed with `%Lf` by glibc — the host's for x87 (through ctypes), and
a small program cross-built for aarch64 (IEEE binary128) and ppc64le (IBM double-double)
run under qemu-user.  The patterns: zeros, subnormals, the extremes of the exponent range,
values beyond a double's, halfway cases at the sixth decimal, infinities and NaNs of both
signs, and seeded random ones."""

from __future__ import annotations

import ctypes
import platform
import random
import struct
import subprocess
from pathlib import Path

import pytest

from emutrace.trace.long_double import decode, printf_f

from .conftest import ENV, qemu_binary

# reads 16-byte patterns as hex (memory order) from stdin, prints each with %Lf
PRINTER = r"""
#include <stdio.h>
#include <string.h>
int main(void) {
  char hex[40];
  while (scanf("%39s", hex) == 1) {
    unsigned char b[16];
    for (int i = 0; i < 16; i++) sscanf(hex + 2 * i, "%2hhx", &b[i]);
    long double v;
    memcpy(&v, b, sizeof v);
    printf("%Lf\n", v);
  }
  return 0;
}
"""
CROSS = {"aarch64": ("aarch64-linux-gnu-gcc", "binary128", "little"),
         "ppc64le": ("powerpc64le-linux-gnu-gcc", "ibm128", "little")}


def binary128_patterns(rng: random.Random) -> list[bytes]:
    fixed = [(0, 0, 0), (1, 0, 0), (0, 0, 1), (0, 1, 0), (0, 0x3FFF, 0), (1, 0x3FFF, 1 << 111),
             (0, 0x7FFE, (1 << 112) - 1), (0, 0x7FFF, 0), (1, 0x7FFF, 0), (0, 0x7FFF, 1),
             (0, 0x3FFF + 60, 1 << 52), (0, 0x3FFF - 21, 0x0C6F7A0B5ED8D36B4C7F34938583)]
    fixed += [(rng.getrandbits(1), rng.randrange(0x3FFF - 40, 0x3FFF + 80),
               rng.getrandbits(112)) for _ in range(60)]
    return [(s << 127 | e << 112 | f).to_bytes(16, "little") for s, e, f in fixed]


def ibm128_patterns(rng: random.Random) -> list[bytes]:
    pairs = [(0.0, 0.0), (-0.0, 0.0), (1.0, 2.0 ** -60), (2.0 ** 60, 1.0), (1e300, -1e283),
             (0.5, -2.0 ** -80), (float("inf"), 0.0), (-float("inf"), 0.0)]
    for _ in range(60):
        hi = rng.uniform(-1e12, 1e12)
        pairs.append((hi, hi * 2.0 ** -53 * rng.uniform(-0.5, 0.5)))
    return [struct.pack("<dd", hi, lo) for hi, lo in pairs]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the host's glibc prints x87")
def test_x87_text_is_glibcs() -> None:
    rng = random.Random(80)
    patterns = [(1 << 63, 0x3FFF), (0, 0), (1, 0), (1 << 63, 0), (1 << 62, 0x3FFF),
                (1 << 63, 0x7FFF), (1 << 63 | 1, 0x7FFF), (0, 0xFFFF), (1 << 63, 0x7FFE),
                (0xC000000000000000, 0x3FFF - 21), (0xA000000000000000, 0x3FEB)]
    patterns += [(rng.getrandbits(64) | 1 << 63, rng.getrandbits(1) << 15 |
                  rng.randrange(0x3FFF - 40, 0x3FFF + 70)) for _ in range(150)]
    patterns += [(rng.getrandbits(64), rng.getrandbits(16)) for _ in range(20)]
    libc = ctypes.CDLL(None)
    buf = ctypes.create_string_buffer(8192)
    for mant, se in patterns:
        data = mant.to_bytes(8, "little") + se.to_bytes(2, "little")
        libc.snprintf(buf, len(buf), b"%Lf",
                      ctypes.c_longdouble.from_buffer_copy(data + bytes(6)))
        assert printf_f(*decode(data, "x87", "little")) == buf.value.decode(), data.hex()


@pytest.fixture(scope="module")
def printers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("ldprint")
    (out / "ldprint.c").write_text(PRINTER)
    made = {}
    for isa, (cc, _, _) in CROSS.items():
        made[isa] = out / isa
        subprocess.run([cc, "-static", "-O1", "-o", str(made[isa]), str(out / "ldprint.c")],
                       check=True, timeout=120)
    return made


@pytest.mark.parametrize("isa", list(CROSS))
def test_quad_text_is_glibcs(isa: str, printers: dict[str, Path]) -> None:
    _, fmt, order = CROSS[isa]
    rng = random.Random(113)
    patterns = binary128_patterns(rng) if fmt == "binary128" else ibm128_patterns(rng)
    done = subprocess.run([qemu_binary(isa), str(printers[isa])], env=ENV, timeout=120,
                          input="\n".join(p.hex() for p in patterns), capture_output=True,
                          text=True, check=True)
    theirs = done.stdout.split()
    assert len(theirs) == len(patterns)
    assert [printf_f(*decode(p, fmt, order)) for p in patterns] == theirs
