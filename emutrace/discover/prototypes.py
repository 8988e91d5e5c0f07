"""How many arguments each function takes, from DWARF (pure: pyelftools, no emulator).

Only definitions count (DW_TAG_subprogram with a name and code); the number is that of its
DW_TAG_formal_parameter children (a varargs function: its fixed parameters).  A binary
without DWARF gives an empty table and the trace shows a default number of arguments.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from elftools.elf.elffile import ELFFile

_warned: set[str] = set()


def _warn_stderr(message: str) -> None:
    if message not in _warned:  # both the run and the trace writer ask: say it once
        _warned.add(message)
        print(message, file=sys.stderr)


def parameter_counts(path: str,
                     warn: Callable[[str], None] = _warn_stderr) -> dict[str, int]:
    """Garbage DWARF (DWARFError, MemoryError from a huge section, OverflowError, a bad
    string table...) is one warning line: the run goes on with the default counts."""
    counts: dict[str, int] = {}
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if not elf.has_dwarf_info():
                return counts
            for cu in elf.get_dwarf_info().iter_CUs():
                for die in cu.iter_DIEs():
                    if die.tag != "DW_TAG_subprogram" or "DW_AT_low_pc" not in die.attributes:
                        continue
                    name = die.attributes.get("DW_AT_name")
                    if name is None:
                        continue
                    counts[name.value.decode(errors="replace")] = sum(
                        1 for child in die.iter_children()
                        if child.tag == "DW_TAG_formal_parameter")
    except Exception as e:  # noqa: BLE001 - pyelftools raises anything on garbage
        first = str(e).splitlines()[0][:120] if str(e) else ""
        warn(f"emutrace: warning: {path}: unreadable DWARF ({type(e).__name__}: {first!r}); "
             "functions show the default number of arguments")
        return {}
    return counts
