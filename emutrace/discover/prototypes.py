"""How many arguments each function takes, from DWARF (pure: pyelftools, no emulator).

Only definitions count (DW_TAG_subprogram with a name and code); the number is that of its
DW_TAG_formal_parameter children (a varargs function: its fixed parameters).  A binary
without DWARF gives an empty table and the trace shows a default number of arguments.
"""

from __future__ import annotations

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile


def parameter_counts(path: str) -> dict[str, int]:
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
    except (ELFError, OSError, KeyError, ValueError, AttributeError):
        return counts  # unreadable DWARF: the default applies
    return counts
