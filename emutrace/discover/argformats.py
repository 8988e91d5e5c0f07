"""uftrace's argument and return-value formats (`-A FUNC@arg1/i32,arg2/x8,fparg1/32`,
`-R FUNC@retval/f64`; uftrace 0.13 utils/argspec.c parse_argspec) as a prototype that
replaces the one DWARF or the libc table gives (pure: no emulator).

A value is `argN` (the N-th integer-class argument), `fpargN` (the N-th floating-point
argument) or `retval`, optionally followed by `/FORMAT`: a letter and a width in bits —
`d` uftrace's "auto" (the default), `i` signed, `u` unsigned, `x` hex, `o` octal, `c` a
char, `s` a C string, `p` a pointer, `f` a float (fparg's default: `f64`).  The widths:
8, 16, 32 or 64 (`s`, `p`: the word; `c`: 8); `f80`, uftrace's x87 `long double`, is the
ISA's `long double` whatever its format (CValues.long_double).

emutrace reads the arguments as the ISA's C ABI places a prototype's parameters, so a
format becomes a prototype: the integer arguments in order (`arg1`..`argN`; one not named
reads as an "auto" word), then the floating-point ones (`fpargN`; one not named reads as a
double).  It shows every argument up to the last one named: `-A f@arg3/x32` shows f's first
three, the third in hex (uftrace shows the third alone).  Register and stack placements
(`arg1%rdi`, `%stack+1`) are refused."""

from __future__ import annotations

import re
from dataclasses import dataclass

from emutrace.discover.prototypes import CType, Prototype
from emutrace.errors import UsageError

_KINDS = {"d": "auto", "i": "int", "u": "uint", "x": "hex", "o": "oct", "c": "char",
          "s": "str", "p": "ptr", "f": "float"}
_VALUE = re.compile(r"(?P<what>arg|fparg)(?P<n>[1-9][0-9]?)(?:/(?P<fmt>.*))?$|"
                    r"(?P<ret>retval)(?:/(?P<rfmt>.*))?$")
_FORMAT = re.compile(r"(?P<letter>[diuxocspf])(?P<bits>8|16|32|64|80)?$")
LONG_DOUBLE = CType("float", 16, "long double")  # `f80` (callabi sizes it per ISA)


@dataclass(frozen=True)
class Format:
    """One value's format: a trace.values kind and a width in bits (None: the word)."""

    kind: str
    bits: int | None

    def ctype(self, word_size: int) -> CType:
        if self.kind == "float" and self.bits == 80:
            return LONG_DOUBLE
        size = word_size if self.bits is None else self.bits // 8
        return CType(self.kind, size)


@dataclass(frozen=True)
class ArgFormats:
    """What `-A`/`-R` say of one function: formats by argument position, by float
    argument position, and of the return value."""

    ints: tuple[tuple[int, Format], ...] = ()
    floats: tuple[tuple[int, Format], ...] = ()
    ret: Format | None = None

    def merged(self, other: ArgFormats) -> ArgFormats:
        """Both options' values (a later one replacing an earlier of the same place)."""
        ints = dict(self.ints) | dict(other.ints)
        floats = dict(self.floats) | dict(other.floats)
        return ArgFormats(tuple(sorted(ints.items())), tuple(sorted(floats.items())),
                          other.ret or self.ret)

    @property
    def count(self) -> int | None:
        """The arguments shown, or None where only the return value is given."""
        if not self.ints and not self.floats:
            return None
        return (max(dict(self.ints), default=0) + max(dict(self.floats), default=0))

    def prototype(self, base: Prototype | None, word_size: int) -> Prototype:
        """The prototype these formats make, over `base` (DWARF's or the libc table's, or
        None): arguments as named (module docstring); the return value's from `base`
        when `-R` gives none."""
        word = CType("auto", word_size)
        params = base.params if base is not None else ()
        if self.ints or self.floats:
            ints, floats = dict(self.ints), dict(self.floats)
            params = tuple(ints[k].ctype(word_size) if k in ints else word
                           for k in range(1, max(ints, default=0) + 1))
            params += tuple(floats[k].ctype(word_size) if k in floats else CType("float", 8)
                            for k in range(1, max(floats, default=0) + 1))
        ret = self.ret.ctype(word_size) if self.ret is not None else \
            (base.ret if base is not None else word)
        return Prototype(params, ret, base.variadic if base is not None else False)


def _format(text: str | None, spec: str, fp: bool) -> Format:
    if text is None or text == "":
        return Format("float", 64) if fp else Format("auto", None)
    m = _FORMAT.match(text)
    if m is None:
        raise UsageError(f"{spec}: format {text!r}: expected a letter of d i u x o c s p f "
                         f"and a width of 8, 16, 32 or 64 (e.g. i32, x8, s, f64)")
    letter, bits = m["letter"], m["bits"]
    kind = _KINDS[letter]
    if fp and letter not in "fd":
        raise UsageError(f"{spec}: a floating-point argument takes f (f32, f64, f80)")
    if letter == "f" or fp:
        width = int(bits or 64)
        if width not in (32, 64, 80):
            raise UsageError(f"{spec}: a float is f32, f64 or f80 (a long double)")
        return Format("float", width)
    if bits == "80":
        raise UsageError(f"{spec}: 80 bits is a long double's width (f80)")
    if letter in "sp":
        if bits is not None:
            raise UsageError(f"{spec}: {letter} takes no width (a pointer is a word)")
        return Format(kind, None)
    if letter == "c":
        return Format("char", 8)
    return Format(kind, int(bits) if bits else None)


def parse_formats(option: str, spec: str) -> tuple[str, ArgFormats]:
    """`-A FUNC@arg1/i32,fparg1/32` or `-R FUNC@retval/f64` -> (FUNC, its formats); a
    bad spec is a usage error."""
    func, at, values = spec.partition("@")
    if not func or not at or not values:
        raise UsageError(f"{option} {spec}: expected FUNC@arg1[/FMT],... or "
                         f"FUNC@retval[/FMT], e.g. -A combine9@arg1/i32,arg2/x64")
    ints: dict[int, Format] = {}
    floats: dict[int, Format] = {}
    ret: Format | None = None
    for value in values.split(","):
        m = _VALUE.match(value)
        where = f"{option} {spec}"
        if m is None:
            raise UsageError(f"{where}: {value!r}: expected argN, fpargN or retval, each "
                             f"with an optional /FORMAT (register and stack placements "
                             f"are not taken)")
        if m["ret"]:
            ret = _format(m["rfmt"], where, False)
        elif m["what"] == "fparg":
            fmt = m["fmt"]  # uftrace's fparg1/32 is a width alone
            floats[int(m["n"])] = _format(f"f{fmt}" if fmt and fmt.isdigit() else fmt,
                                          where, True)
        else:
            ints[int(m["n"])] = _format(m["fmt"], where, False)
    if option == "-R" and (ints or floats):
        raise UsageError(f"{option} {spec}: -R takes retval only")
    return func, ArgFormats(tuple(sorted(ints.items())), tuple(sorted(floats.items())), ret)

