"""Argument and return values as a trace records them (pure: no emulator).

A backend captures each argument and return value at its event, because what it shows can
change afterwards (the string a `char *` points to, a floating-point register).  The capture
is a `Value`: its *kind* (how it is shown), its *width*, the raw *bit pattern* read from the
register or stack slot, and for some kinds the *text* read at the event:

=========  ======================================================  ===========================
kind       shown as                                                 `text`
=========  ======================================================  ===========================
auto       uftrace's "auto" integer format (`format_auto`)          —
int        signed decimal of `bits`                                 —
uint       unsigned decimal of `bits`                               —
hex        lowercase hex with 0x                                    —
char       a signed char: printable ASCII as a literal (`'a'`),     —
           else signed decimal (`-56`)
uchar      an unsigned char: `'a'`, else unsigned decimal (`200`)    —
bool       `true` / `false`                                         —
enum       the enumerator's name, else signed decimal               enumerator name or None
ptr        hex, `0` for NULL                                        —
str        a C string literal, bounded and escaped; hex when None   the string read, or None
           (`0` for NULL)
buf        a non-const `char *` (maybe a buffer the callee       the string read, or None
           fills): shown as `str`; `emutrace diff` compares it
           as a pointer
float      the shortest decimal that reads back to the same IEEE    a `long double`'s
           value of its width (32: float, 64: double); a `long     %Lf text
           double` as uftrace shows it (`trace/long_double.py`)
oct        octal with a leading 0 (file modes)                      —
struct     the members as the ABI passed them                       rendered members
=========  ======================================================  ===========================

Contract between the capture (backends, `backends/args.py`) and the consumers (text replay,
the uftrace.data writer, `emutrace diff`): a consumer that meets a kind it does not know
treats the value as `hex` of its `bits`.  Older code may still hand plain `int` words
around; `as_value` turns one into an `auto` value.
"""

from __future__ import annotations

import struct as _struct
from dataclasses import dataclass

KINDS = ("auto", "int", "uint", "hex", "char", "uchar", "bool", "enum", "ptr", "str", "float",
         "struct", "oct", "buf")
STRING_LIMIT = 64  # characters of a `char *` shown (uftrace shows whole strings; bounded here)


@dataclass(frozen=True, slots=True)
class Value:
    kind: str
    bits: int
    raw: int  # unsigned bit pattern, masked to `bits` (floats: their IEEE-754 bits)
    text: str | None = None

    def signed(self) -> int:
        u = self.raw & ((1 << self.bits) - 1)
        return u - (1 << self.bits) if u >> (self.bits - 1) else u


def as_value(word: int | Value, bits: int) -> Value:
    """A plain register word (older producers) as an untyped `auto` value."""
    if isinstance(word, Value):
        return word
    return Value("auto", bits, word & ((1 << bits) - 1))


def format_auto(raw: int, bits: int = 64) -> str:
    """An integer word as uftrace's "auto" argument format prints it: signed, decimal within
    ±100000, else hex; on 64-bit ISAs a value in (0xffff0000, 0xffffffff] is a 32-bit
    negative and prints as decimal, as uftrace does."""
    mask = (1 << bits) - 1
    u = raw & mask
    s = u - (1 << bits) if u >> (bits - 1) else u
    if -100000 <= s <= 100000:
        return str(s)
    if bits == 64 and 0xFFFF0000 < u <= 0xFFFFFFFF:
        return str(u - (1 << 32))
    return f"{u:#x}"


def shown_name(name: str) -> str:
    """A function's name as a text trace prints it: control characters (C0, DEL, C1) as
    \\xNN, so a hostile symbol can neither drive the terminal nor break the line
    structure; everything else as it is."""
    if name.isprintable():
        return name
    return "".join(f"\\x{ord(ch):02x}" if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 else ch
                   for ch in name)


def quote_c(text: str, limit: int = STRING_LIMIT, quote: str = '"') -> str:
    """A C literal of `text`: printable ASCII as is, the rest escaped; longer than `limit`
    characters ends in `...` after the closing quote."""
    out = []
    for ch in text[:limit]:
        code = ord(ch)
        if ch in (quote, "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}")
    more = "..." if len(text) > limit else ""
    return f"{quote}{''.join(out)}{quote}{more}"


def _float(raw: int, bits: int) -> float:
    if bits == 32:
        return float(_struct.unpack("<f", (raw & 0xFFFFFFFF).to_bytes(4, "little"))[0])
    return float(_struct.unpack("<d", (raw & (1 << 64) - 1).to_bytes(8, "little"))[0])


def _shortest(raw: int, bits: int) -> str:
    """The shortest decimal that reads back to the same float of this width (Python's repr
    does it for doubles; a float32 tries 6 to 9 significant digits, FLT_DECIMAL_DIG = 9)."""
    value = _float(raw, bits)
    if bits != 32 or value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    for digits in range(6, 10):
        text = f"{value:.{digits}g}"
        if _struct.pack("<f", float(text)) == _struct.pack("<f", value):
            return repr(float(text))
    return repr(value)


def render(v: Value) -> str:
    """How the text replay shows a value (see the table above)."""
    kind, bits = v.kind, v.bits
    if kind == "auto":
        return format_auto(v.raw, bits)
    if kind == "int":
        return str(v.signed())
    if kind == "uint":
        return str(v.raw & ((1 << bits) - 1))
    if kind in ("char", "uchar"):
        code = v.raw & 0xFF
        if 0x20 <= code < 0x7F:
            return quote_c(chr(code), quote="'")
        return str(code - 0x100 if kind == "char" and code >= 0x80 else code)
    if kind == "bool":
        return "true" if v.raw else "false"
    if kind == "enum":
        return v.text if v.text is not None else str(v.signed())
    if kind == "ptr":
        return "0" if v.raw == 0 else f"{v.raw:#x}"
    if kind in ("str", "buf"):
        if v.text is not None:
            return quote_c(v.text)
        return "0" if v.raw == 0 else f"{v.raw:#x}"
    if kind == "float":  # (a long double carries its text: trace/long_double.py)
        return v.text if v.text is not None else _shortest(v.raw, bits)
    if kind == "oct":
        return f"0{v.raw & ((1 << bits) - 1):o}"
    if kind == "struct":
        return v.text if v.text is not None else f"{v.raw:#x}"
    return f"{v.raw & ((1 << bits) - 1):#x}"  # "hex" and any kind this module does not know
