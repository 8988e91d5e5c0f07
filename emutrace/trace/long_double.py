"""C `long double` values decoded exactly from their bytes (pure: no emulator).

Four formats, as `CValues.long_double` names them per ISA:

* ``x87``: Intel's 80-bit extended (Intel SDM vol. 1 §4.2.2): sign, 15-bit exponent
  (bias 16383), 64-bit significand with its integer bit explicit; 10 bytes little-endian.
* ``binary128``: IEEE 754 quadruple: sign, 15-bit exponent (bias 16383), 112-bit fraction.
* ``ibm128``: IBM double-double (Power ELF ABIs): two doubles in memory order, the one of
  larger magnitude first; the value is their sum, truncated to 106 bits from the first's
  leading bit as glibc's printf truncates it.
* ``double``: a C double (ISAs whose `long double` is `double`).

The value is shown as uftrace shows a `long double` and printf's ``%Lf`` prints it: six
decimals of the exact value, rounded to nearest-even (no rounding through a double), `inf`
and `nan` signed.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal
from fractions import Fraction

from emutrace.trace.values import Value

BIAS = 16383
SIZES = {"x87": 10, "binary128": 16, "ibm128": 16, "double": 8}

Exact = Fraction | str  # a finite value, or "inf" / "nan"


def _double(data: bytes, byteorder: str) -> tuple[int, Exact]:
    bits = int.from_bytes(data[:8], byteorder)  # type: ignore[arg-type]
    value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
    sign = bits >> 63
    if value != value:
        return sign, "nan"
    if value in (float("inf"), float("-inf")):
        return sign, "inf"
    return sign, abs(Fraction(value))


def decode(data: bytes, fmt: str, byteorder: str) -> tuple[int, Exact]:
    """(sign bit, magnitude) of the long double whose memory image is `data`."""
    if fmt == "x87":  # little-endian on every x86
        mant = int.from_bytes(data[:8], "little")
        se = int.from_bytes(data[8:10], "little")
        sign, exp = se >> 15, se & 0x7FFF
        if exp == 0x7FFF:  # SDM Table 4-3: integer bit set, fraction 0 = infinity
            return sign, "inf" if mant == 1 << 63 else "nan"
        if exp and not mant >> 63:  # an unnormal (SDM §8.2.2: invalid operand): glibc
            return sign, "nan"  # prints it as nan
        return sign, Fraction(mant) * Fraction(2) ** (max(exp, 1) - BIAS - 63)
    if fmt == "binary128":
        bits = int.from_bytes(data[:16], byteorder)  # type: ignore[arg-type]
        sign, exp, frac = bits >> 127, (bits >> 112) & 0x7FFF, bits & ((1 << 112) - 1)
        if exp == 0x7FFF:
            return sign, "nan" if frac else "inf"
        mant = frac if exp == 0 else frac | 1 << 112  # (exp 0: subnormal, no hidden bit)
        return sign, Fraction(mant) * Fraction(2) ** (max(exp, 1) - BIAS - 112)
    if fmt == "ibm128":
        hi_sign, hi = _double(data[:8], byteorder)
        if isinstance(hi, str):
            return hi_sign, hi
        lo_sign, lo = _double(data[8:16], byteorder)
        if isinstance(lo, str):
            return lo_sign, lo
        total = (-hi if hi_sign else hi) + (-lo if lo_sign else lo)
        magnitude = abs(total)
        if hi and lo:  # glibc's printf (ldbl-128ibm) keeps 106 bits from hi's leading one:
            grid = Fraction(2) ** (math.frexp(float(hi))[1] - 106)  # the sum truncated
            magnitude = (magnitude // grid) * grid
        return (1 if total < 0 or (total == 0 and hi_sign) else 0), magnitude
    return _double(data, byteorder)


def printf_f(sign: int, magnitude: Exact, decimals: int = 6) -> str:
    """`%Lf`: the value with `decimals` decimals (glibc rounds the exact value to nearest,
    ties to even)."""
    minus = "-" if sign else ""
    if isinstance(magnitude, str):
        return minus + magnitude
    scaled = round(magnitude * 10 ** decimals)
    whole, frac = divmod(scaled, 10 ** decimals)
    # (Decimal: an x87 or binary128 value has up to 4933 digits, past int's str limit)
    return f"{minus}{Decimal(whole):f}.{frac:0{decimals}d}"


def long_double_value(data: bytes, fmt: str, byteorder: str) -> Value:
    """A `long double` as a trace value: kind float, its bits as in memory, its text %Lf."""
    data = data[:SIZES.get(fmt, 8)]
    sign, magnitude = decode(data, fmt, byteorder)
    return Value("float", 8 * len(data), int.from_bytes(data, "big"), printf_f(sign, magnitude))


__all__ = ["SIZES", "decode", "long_double_value", "printf_f"]
