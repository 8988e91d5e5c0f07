"""C++ names as the viewers show them, by uftrace's `--demangle=full|simple|no` (pure: the
demangling itself is the C++ runtime's `__cxa_demangle`, through the `cxxfilt` package).

* `full`: the C++ runtime's demangling (what `c++filt -i` prints; plain `c++filt` spells
  the standard abbreviations out, `std::basic_string<char, ...>` for `std::string`):
  `geo::level2(int)`, `int geo::biggest<int>(int, int)`,
  `geo::Rect::~Rect() [clone .cold]`.
* `simple` (uftrace's default): the qualified name alone, without parameters, template
  arguments, return type or the compiler's clone suffix: `geo::level2`, `geo::biggest`,
  `geo::Rect::~Rect`, `operator new`.  uftrace computes it with a parser of its own
  (utils/demangle.c); here it is cut from the full demangling, with uftrace's spellings of
  the standard abbreviations and of anonymous namespaces (`uftrace_spelling`), which gives
  the same names (tests/test_cxx.py compares every C++ function of a program with Debian's
  uftrace).
* `no`: the symbol as it is (`_ZN3geo6level2Ei`).

Only names that start with `_Z` (the Itanium C++ ABI's prefix of a mangled name) are
demangled; `_GLOBAL__sub_I_<mangled>` (a file's static constructors) keeps its prefix in
`simple` and is left as it is in `full`, as uftrace does.  A name the runtime cannot
demangle, or any name when no demangler is installed (one warning), is shown as it is.
Recordings keep the mangled names; only the showing changes.

Filters (`-F`, `-N`, `--start`, `-A`'s FUNC) name functions as they are shown; a filter
written mangled (`_ZN3geo6level2Ei`) is demangled the same way first, so it names the same
functions (uftrace's rule: utils/filter.c demangles a `_Z` pattern).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

MODES = ("full", "simple", "no")
DEFAULT = "simple"
_GLOBAL_CTORS = "_GLOBAL__sub_I_"
MAX_NAME = 16384  # longer names are shown as they are (a planted symbol table)

_warned = False


@functools.cache
def _runtime() -> Any:
    """The C++ runtime's demangler (`cxxfilt.default_demangler`), or None: without the
    package or a C++ runtime library, names are shown mangled (one warning)."""
    global _warned
    try:
        import cxxfilt  # imported on the first C++ name: it looks the runtime library up
    except ImportError:
        reason = "the cxxfilt package is not installed"
    else:
        demangler = cxxfilt.default_demangler
        if isinstance(demangler, cxxfilt.Demangler):
            return demangler
        reason = "no C++ runtime library (libstdc++) found"
    if not _warned:
        _warned = True
        print(f"emutrace: warning: C++ names are shown mangled: {reason}", file=sys.stderr)
    return None


def full_name(name: str) -> str | None:
    """`name` demangled by the C++ runtime, or None (not mangled, or not demangled)."""
    if not name.startswith("_Z") or len(name) > MAX_NAME or "\0" in name:
        return None
    runtime = _runtime()
    if runtime is None:
        return None
    try:
        out = runtime.demangleb(name.encode("utf-8", "surrogateescape"))
    except Exception:  # noqa: BLE001 - cxxfilt's InvalidName, InternalError
        return None
    text: str = out.decode("utf-8", "surrogateescape")
    return text or None


def simple_name(name: str) -> str | None:
    """uftrace's simple form of a mangled `name`, or None (not mangled, not demangled)."""
    prefix = ""
    if name.startswith(_GLOBAL_CTORS):
        prefix, name = _GLOBAL_CTORS, name[len(_GLOBAL_CTORS):]
    for mark in ".@":  # a clone suffix (`.cold`, `.part.0`), a symbol version
        cut = name.find(mark, 2)
        if cut > 0:
            name = name[:cut]
    full = full_name(name)
    if full is None:
        return None
    return prefix + uftrace_spelling(name, qualified_name(full))


# uftrace's simple demangler (utils/demangle.c) spells the standard abbreviations its own
# way when they qualify a name: mangled, the runtime's short form, the runtime's long form
# (in a constructor's or destructor's name), uftrace's
_ABBREVIATIONS = {
    "Ss": ("std::string", "std::basic_string", "std::basic_string<>"),
    "Si": ("std::istream", "std::basic_istream", "std::basic_istream"),
    "So": ("std::ostream", "std::basic_ostream", "std::basic_ostream"),
    "Sd": ("std::iostream", "std::basic_iostream", "std::basic_iostream"),
}
_QUALIFIED_BY = re.compile(r"_ZN[rVK]*[RO]?(S[sido])")
_ANONYMOUS = "(anonymous namespace)"
_ANONYMOUS_SOURCE = re.compile(r"(\d+)(_GLOBAL__N_)")  # <length><source name>


def uftrace_spelling(mangled: str, simple: str) -> str:
    """`simple` with uftrace's spellings where they differ from the runtime's: a name
    qualified by a standard abbreviation (`std::basic_string<>::size`, not
    `std::string::size`; its constructor `std::basic_string<>::basic_string<>`), and an
    anonymous namespace by its source name (`_GLOBAL__N_1`, not `(anonymous namespace)`)."""
    m = _QUALIFIED_BY.match(mangled)
    if m:
        short, long, theirs = _ABBREVIATIONS[m[1]]
        for ours in (short, long):
            if simple.startswith(ours + "::"):
                rest = simple[len(ours) + 2:]
                own, their_own = long.rsplit("::", 1)[1], theirs.rsplit("::", 1)[1]
                if rest in (own, "~" + own):  # a constructor or destructor
                    rest = rest.replace(own, their_own)
                simple = f"{theirs}::{rest}"
                break
    if _ANONYMOUS in simple:
        sources = {mangled[at.start(2):at.start(2) + int(at[1])]
                   for at in _ANONYMOUS_SOURCE.finditer(mangled)}
        if len(sources) == 1:
            simple = simple.replace(_ANONYMOUS, sources.pop())
    return simple


def demangled(name: str, mode: str) -> str:
    """`name` as `--demangle=mode` shows it."""
    if mode == "no":
        return name
    got = simple_name(name) if mode == "simple" else full_name(name)
    return name if got is None else got


def shown_by(mode: str) -> Callable[[str], str]:
    """name -> the name shown, remembered per name (a trace names few functions often)."""
    if mode == "no":
        return _same
    memo: dict[str, str] = {}

    def show(name: str) -> str:
        got = memo.get(name)
        if got is None:
            got = memo[name] = demangled(name, mode) if "_Z" in name else name
        return got
    return show


def _same(name: str) -> str:
    return name


def demangling(symbolize: Callable[[int], str], mode: str) -> Callable[[int], str]:
    """`symbolize` (address -> symbol name) whose names are shown by `mode`."""
    if mode == "no":
        return symbolize
    show = shown_by(mode)
    return lambda addr: show(symbolize(addr))


def filter_names(names: Iterable[str], mode: str) -> tuple[str, ...]:
    """Filter names (`-F`, `-N`) as they are matched against shown names: one written
    mangled is demangled by `mode` first."""
    return tuple(demangled(n, mode) for n in names)


# ---------------------------------------------------------------- the simple form
_OPERATOR = "operator"
# the operators' symbols, longest first (Itanium C++ ABI 5.1.5 <operator-name>)
_OPERATOR_SYMBOLS = sorted(
    "<=> <<= >>= ->* << >> <= >= == != && || ++ -- += -= *= /= %= &= |= ^= -> () []"
    " + - * / % ^ & | ~ ! = < > ,".split(), key=len, reverse=True)
_OPEN, _CLOSE = "([{", ")]}"


def qualified_name(full: str) -> str:
    """The function's qualified name in a full demangling: template argument lists and
    parameter lists (the function's and those of the functions a local entity is named
    in) removed, then the return type, a clone suffix and trailing qualifiers
    (`const`, `&`) dropped.  `(anonymous namespace)`, `{lambda(int)#1}` and operator
    names (`operator<<`, `operator()`, `operator new[]`) are kept whole."""
    out: list[str] = []
    i, n = 0, len(full)
    while i < n:
        c = full[i]
        if full.startswith(_OPERATOR, i) and _word_start(full, i) \
                and not _ident(full[i + len(_OPERATOR):i + len(_OPERATOR) + 1]):
            i = _operator(full, i, out)
        elif c == "<":
            i = _skip_group(full, i, "<", ">")
        elif c == "(" and out and (_ident(out[-1][-1:]) or out[-1].startswith(_OPERATOR)):
            i = _skip_group(full, i, "(", ")")  # a parameter list
        elif c == "[" and full.startswith(("[abi:", "[clone "), i):  # a tag, a clone
            i = _skip_group(full, i, "[", "]")
        elif c in _OPEN:  # `(anonymous namespace)`, `{lambda(int)#1}`
            end = _skip_group(full, i, c, _CLOSE[_OPEN.index(c)])
            out.append(full[i:end])
            i = end
        else:
            out.append(c)
            i += 1
    return _name_part("".join(out))


def _ident(c: str) -> bool:
    return bool(c) and (c.isalnum() or c in "_$")


def _word_start(text: str, i: int) -> bool:
    return i == 0 or not _ident(text[i - 1])


def _operator(text: str, i: int, out: list[str]) -> int:
    """`operator` and its symbol (`<<=`, `()`, `[]`, ` new[]`, ` delete`, or a
    conversion's type up to a parameter list) copied as one piece; the index after it."""
    j = i + len(_OPERATOR)
    symbol = next((s for s in _OPERATOR_SYMBOLS if text.startswith(s, j)), None)
    if symbol is not None:
        j += len(symbol)
        if text.startswith(" <", j):  # `operator< <int>`: the space before template arguments
            j += 1
    else:  # `operator new`, `operator delete[]`, `operator int`, `operator"" _km`
        while j < len(text) and text[j] not in "(<":
            j += 1
    out.append(text[i:j].rstrip())
    return j


def _skip_group(text: str, i: int, open_: str, close: str) -> int:
    """The index after the group `open_` opens at i (brackets of every kind inside it
    counted, so that a `>` in a parameter list does not end a template's)."""
    pairs = {"<": ">", "(": ")", "[": "]", "{": "}"}
    stack: list[str] = []
    for j in range(i, len(text)):
        c = text[j]
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
    return len(text)


def _name_part(text: str) -> str:
    """The last space-separated part at bracket depth 0 (the return type goes), keeping
    `operator new`, a conversion operator's type and `(anonymous namespace)` whole; the
    trailing qualifiers of a member function (`const`, `volatile`, `&`, `&&`) dropped."""
    words: list[str] = []
    depth, start = 0, 0
    for j, c in enumerate(text):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == " " and depth == 0:
            words.append(text[start:j])
            start = j + 1
    words.append(text[start:])
    while len(words) > 1 and words[-1] in ("const", "volatile", "&", "&&", "noexcept", ""):
        words.pop()
    # a name with `operator` in it starts with the word holding it
    for k in range(len(words) - 1, -1, -1):
        w = words[k]
        if _OPERATOR in w:
            at = w.find(_OPERATOR)
            if at == 0 or not _ident(w[at - 1]):
                return " ".join(words[k:])
            break
    return words[-1]
