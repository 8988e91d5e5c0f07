"""Function symbols from outside the image (`run --machine --symbols FILE`): a `System.map`
or `nm` listing, or another ELF file (an unstripped build of a stripped image).  Pure."""

from __future__ import annotations

import re

from emutrace.elf import Symbol, load_image
from emutrace.errors import UsageError

# nm(1) "ADDRESS TYPE NAME": T/t (text), W/w (weak, taken as text when in code) — the
# lines of System.map and of `nm -n`; other types (data, absolute, ...) are not functions
_LINE = re.compile(r"([0-9a-fA-F]+)\s+([A-Za-z])\s+(\S+)")
TEXT_TYPES = frozenset("TtWw")


def nm_functions(text: str, source: str) -> list[tuple[int, str]]:
    """(address, name) of the code symbols of an nm/System.map listing, in file order.  A
    line that is neither blank nor an nm line is a usage error naming the file and line
    (the file was named on the command line): a wrong file must not silently name
    nothing.  The one reader of listings, for `run --symbols` in user and machine mode."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise UsageError(f"--symbols {source}:{number}: not an nm/System.map line "
                             f"(`ADDRESS TYPE NAME`): {line[:80]!r}")
        if m.group(2) in TEXT_TYPES:
            out.append((int(m.group(1), 16), m.group(3)))
    return out


def parse_symbol_map(text: str, source: str = "symbol map") -> list[Symbol]:
    """The functions of an nm/System.map listing, sorted, each sized up to the next
    function (the listing gives no sizes)."""
    starts: dict[int, str] = {}
    for addr, name in nm_functions(text, source):
        starts.setdefault(addr, name)
    addrs = sorted(starts)
    return [Symbol(starts[a], a, (addrs[i + 1] - a) if i + 1 < len(addrs) else 0, "func")
            for i, a in enumerate(addrs)]


def load_symbol_file(path: str) -> list[Symbol]:
    """Functions from an ELF file's symbol table or from an nm/System.map listing."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            if head == b"\x7fELF":
                return [s for s in load_image(path).symbols if s.kind == "func"]
            fh.seek(0)
            text = fh.read().decode("ascii", errors="replace")
    except OSError as e:
        raise UsageError(f"--symbols {path}: {e.strerror or e}") from None
    return parse_symbol_map(text, path)
