"""Arguments and return values in a uftrace data directory (pure: no emulator).

uftrace stores no type with the data: `info` holds an *argspec* (`FUNC@arg1/i32,arg2/s;…`)
and a *retspec* (`FUNC@retval/f64;…`), and a record whose `more` bit is set is followed
by its values laid out as the spec of its function says (uftrace 0.13 `libmcount/record.c`
save_to_argbuf writes it, `utils/fstack.c` read_task_arg reads it, `utils/argspec.c`
parse_argspec parses a spec, `cmds/replay.c` get_argspec_string prints it):

* a number: its `size` bytes, little-endian, padded with zeros to a multiple of 4;
* a string (`/s`): a u16 length, then the bytes (no NUL), padded to a multiple of 4 of the
  2 + length bytes; a NULL pointer is the 4 bytes `NULL`;
* all the values of one record together are padded to a multiple of 8.

How each captured `Value` kind (trace/values.py) is written, and what uftrace then shows:

==========  =========  ==============================================================
kind        spec       uftrace 0.13 shows
==========  =========  ==============================================================
auto        d<bits>    the same as emutrace (its "auto" format is uftrace's)
int         i<bits>    signed decimal
uint        u<bits>    decimal up to 100000, hex above
enum        s          the enumerator's name (or number) in quotes
hex, oct    x<bits>    hex
bool        u8         0 / 1
char        i8         signed decimal (`'A'` shows as 65; `c` would print raw bytes)
uchar       u8         unsigned decimal
ptr         p<bits>    hex, or `&symbol` when it points at one
str, buf    s          the string in quotes, `NULL`; an unreadable pointer `"<0x…>"`
float       f<bits>    printf `%#f` (6 decimals); a `long double` (its `%Lf` text)
                       is written as `s`, shown in quotes (uftrace has no binary128)
struct      s          emutrace's rendering of the members, in quotes
==========  =========  ==============================================================

uftrace's letters lose what C type a value had (`char` or `unsigned char`, an enum), so the
writer also lists the kinds per function in `emutrace.txt` (`argkinds:`/`retkinds:`, the
argspec's layout with kind names; uftrace ignores the file), and our reader
(`uftrace_read`) rebuilds each `Value` with its kind: `emutrace replay -d` shows what
`emutrace run` showed.  Without that file (a directory uftrace wrote) a value takes the kind
its letter names.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

from emutrace.trace.values import Value, render

NULL = b"NULL"
_UNREADABLE = re.compile(r"<0x([0-9a-f]+)>")
# characters that would break the spec's syntax (`;` between functions, `@` after the name,
# `,` between values) or make uftrace's glob pattern match other names
UNSAFE = set(";@,*?[]\\ \t\n")

_LETTER = {"auto": "d", "int": "i", "enum": "s", "uint": "u", "hex": "x", "oct": "x",
           "bool": "u", "char": "i", "uchar": "u", "ptr": "p", "str": "s", "buf": "s",
           "float": "f", "struct": "s"}
# a spec letter read back: the kind our reader gives the value
_KIND = {"d": "auto", "i": "int", "u": "uint", "x": "hex", "c": "char", "p": "ptr", "s": "str",
         "f": "float"}


def _size_bits(bits: int) -> int:
    for b in (8, 16, 32, 64):
        if bits <= b:
            return b
    return 64


def spec_of(v: Value) -> str:
    """The spec suffix of a value: `i32`, `s`, `c`, `f64` …"""
    letter = _LETTER.get(v.kind, "x")
    if letter in "sc":
        return letter
    if v.kind == "bool":
        return "u8"
    if letter == "f":  # a long double (its %Lf text): as a string, in no uftrace width
        return "s" if v.text is not None else "f32" if v.bits == 32 else "f64"
    return f"{letter}{_size_bits(v.bits)}"


def spec_size(spec: str) -> int:
    """Bytes of a number spec's value (`pack_one`): `c` 1, `i32` 4, `u8` 1 …"""
    return 1 if spec[0] == "c" else int(spec[1:]) // 8


def _pad(data: bytes, to: int) -> bytes:
    return data + b"\0" * (-len(data) % to)


def _text(v: Value) -> bytes:
    if v.kind in ("struct", "enum"):
        return render(v).encode("utf-8", "replace")
    if v.text is not None:
        return v.text.encode("utf-8", "surrogateescape")
    if v.raw == 0:
        return NULL
    return f"<{v.raw:#x}>".encode()  # as libmcount writes an unreadable pointer


def pack_one(v: Value, spec: str) -> bytes:
    letter = spec[0]
    if letter == "s":
        data = _text(v)[:0xFFFF]
        return _pad(struct.pack("<H", len(data)) + data, 4)
    size = spec_size(spec)
    raw = v.raw & ((1 << (8 * size)) - 1)
    return _pad(raw.to_bytes(size, "little"), 4)


def pack_values(values: Sequence[Value], specs: Sequence[str]) -> bytes:
    """The bytes after a record: each value per its spec, the whole padded to 8."""
    return _pad(b"".join(pack_one(v, s) for v, s in zip(values, specs, strict=True)), 8)


def spec_text(name: str, specs: Sequence[str], retval: bool) -> str:
    """`name@arg1/i32,arg2/s` (argspec) or `name@retval/f64` (retspec)."""
    if retval:
        return f"{name}@retval/{specs[0]}"
    return f"{name}@" + ",".join(f"arg{i}/{s}" for i, s in enumerate(specs, 1))


def parse_spec_line(text: str, retval: bool) -> dict[str, tuple[str, ...]]:
    """`info`'s argspec/retspec line back into name -> specs (what `spec_text` wrote)."""
    out: dict[str, tuple[str, ...]] = {}
    for part in text.split(";"):
        name, at, items = part.partition("@")
        if not at:
            continue
        specs = []
        for item in items.split(","):
            _idx, _slash, spec = item.partition("/")
            specs.append(spec or "d64")
        if retval:
            specs = specs[:1]
        out[name] = tuple(specs)
    return out


def unpack_values(data: bytes | memoryview, pos: int, specs: Sequence[str],
                  kinds: Sequence[str] = ()) -> tuple[tuple[Value, ...], int]:
    """The values at `data[pos:]` laid out per `specs` (of the given kinds, else the kinds
    the spec letters name), and the position after their padding to 8.  Raises IndexError
    or struct.error when the data ends first."""
    start = pos
    out = []
    for i, spec in enumerate(specs):
        letter = spec[0]
        kind = kinds[i] if i < len(kinds) else _KIND.get(letter, "hex")
        if letter == "s":
            (n,) = struct.unpack_from("<H", data, pos)
            raw = bytes(data[pos + 2:pos + 2 + n])
            if len(raw) < n:
                raise IndexError("string cut")
            pos += 2 + n + (-(2 + n) % 4)
            text = raw.decode("utf-8", "surrogateescape")
            m = _UNREADABLE.fullmatch(text)
            if raw == NULL:
                out.append(Value(kind, 64, 0, None))
            elif m and kind in ("str", "buf"):
                out.append(Value(kind, 64, int(m.group(1), 16), None))
            else:
                out.append(Value(kind, 64, 1, text))
            continue
        size = 1 if letter == "c" else int(spec[1:]) // 8
        chunk = bytes(data[pos:pos + size])
        if len(chunk) < size:
            raise IndexError("value cut")
        pos += size + (-size % 4)
        out.append(Value(kind, 8 * size, int.from_bytes(chunk, "little")))
    pos += -(pos - start) % 8
    if pos > len(data):
        raise IndexError("padding cut")
    return tuple(out), pos
