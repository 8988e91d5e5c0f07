"""Function symbols from outside the image (`run --machine --symbols FILE`): a `System.map`
or `nm` listing, or another ELF file (an unstripped build of a stripped image).  Pure."""

from __future__ import annotations

import re

from emutrace.elf import Symbol, load_image
from emutrace.errors import BadElf, EmutraceError

# nm(1) "ADDRESS TYPE NAME": T/t (text), W/w (weak, taken as text when in code) — the
# lines of System.map and of `nm -n`; other types (data, absolute, ...) are not functions
_LINE = re.compile(r"([0-9a-fA-F]+)\s+([A-Za-z])\s+(\S+)")
TEXT_TYPES = frozenset("TtWw")


def parse_symbol_map(text: str, source: str = "symbol map") -> list[Symbol]:
    """The functions of an nm/System.map listing, sorted, each sized up to the next
    function (the listing gives no sizes).  A line that is neither blank nor an nm line is
    an error: a wrong file must not silently name nothing."""
    starts: dict[int, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise BadElf(f"{source}:{number}: not an nm/System.map line: {line[:80]!r}")
        if m.group(2) in TEXT_TYPES:
            starts.setdefault(int(m.group(1), 16), m.group(3))
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
        raise EmutraceError(f"--symbols {path}: {e.strerror or e}", 66) from None
    return parse_symbol_map(text, path)
