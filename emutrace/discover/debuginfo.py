"""Symbols from elsewhere: separate debug files and symbol listings.  Pure: pyelftools.

Separate debug info, looked up as gdb does ("Debugging Information in Separate Files", gdb
manual), with every directory inside the root (`--root`, the guest's /):
1. build ID (`.note.gnu.build-id`, hex h1 h2…): ROOT/usr/lib/debug/.build-id/h1h2/rest.debug;
2. `.gnu_debuglink` (file name + CRC32 of the debug file): ROOT/DIR/NAME,
   ROOT/DIR/.debug/NAME, ROOT/usr/lib/debug/DIR/NAME, DIR the object's guest directory;
   a candidate whose CRC differs is not it.
The debug file (`objcopy --only-keep-debug`) keeps `.symtab` at the object's link-time
addresses, so the object's load bias applies to it unchanged.

`--symbols FILE[@BIAS]`: an ELF file with `.symtab`, or a listing in `nm` / System.map form
(`ADDRESS TYPE NAME`, the text types t/T/w/W are functions), at BIAS (default: the load bias
of the program, whose symbols such a file describes).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from elftools.elf.elffile import ELFFile

from emutrace.discover.symbol_map import nm_functions
from emutrace.discover.symbols import FuncSymbol, table_symbols
from emutrace.elf_tables import read_file_tables
from emutrace.errors import UsageError
from emutrace.isa.base import Isa

DEBUG_DIR = "usr/lib/debug"


def build_id(elf: ELFFile) -> str | None:
    section = elf.get_section_by_name(".note.gnu.build-id")
    if section is None or not hasattr(section, "iter_notes"):
        return None
    for note in section.iter_notes():
        if note["n_type"] == "NT_GNU_BUILD_ID":
            return str(note["n_desc"])
    return None


def debuglink(elf: ELFFile) -> tuple[str, int] | None:
    """(file name, CRC32) of `.gnu_debuglink`: a NUL-terminated name, padding to 4 bytes,
    then the CRC in the object's byte order."""
    section = elf.get_section_by_name(".gnu_debuglink")
    if section is None:
        return None
    data = section.data()
    end = data.find(b"\0")
    if end <= 0:
        return None
    at = (end + 4) & ~3
    crc = int.from_bytes(data[at:at + 4], "little" if elf.little_endian else "big")
    return os.fsdecode(data[:end]), crc


def _crc_ok(path: Path, crc: int) -> bool:
    value = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            value = zlib.crc32(chunk, value)
    return value == crc


def find_debug_file(elf: ELFFile, guest_path: str, root: str) -> Path | None:
    """The separate debug file of an object (gdb's order), or None."""
    top = Path(root)
    bid = build_id(elf)
    if bid and len(bid) > 2:
        candidate = top / DEBUG_DIR / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
        if candidate.is_file():
            return candidate
    link = debuglink(elf)
    if link is not None:
        name, crc = link
        guest_dir = os.path.dirname(guest_path).lstrip("/")
        for candidate in (top / guest_dir / name, top / guest_dir / ".debug" / name,
                          top / DEBUG_DIR / guest_dir / name):
            if candidate.is_file() and _crc_ok(candidate, crc):
                return candidate
    return None


def guest_path(host_path: str, root: str) -> str:
    """Where the guest sees a host file: under the root, else at the top (as the loader
    shows a program outside the root)."""
    real, top = os.path.realpath(host_path), os.path.realpath(root)
    if real == top or real.startswith(top.rstrip("/") + "/"):
        return "/" + os.path.relpath(real, top)
    return "/" + os.path.basename(real)


def debug_file_of(path: str, root: str) -> Path | None:
    """The separate debug file of the ELF object at host `path`, or None."""
    try:
        with open(path, "rb") as fh:
            return find_debug_file(ELFFile(fh), guest_path(path, root), root)
    except Exception:  # noqa: BLE001 - a damaged note or section: no debug file
        return None


def parse_symbols_spec(spec: str) -> tuple[str, int | None]:
    """`FILE[@BIAS]` → (FILE, BIAS or None); a bad BIAS is a usage error."""
    path, sep, bias = spec.rpartition("@")
    if not sep or not path:
        return spec, None
    try:
        return path, int(bias, 0)
    except ValueError:
        raise UsageError(f"--symbols {spec}: BIAS must be a number, e.g. 0x555555554000") \
            from None


def listed_symbols(path: str, isa: Isa, bias: int) -> list[FuncSymbol]:
    """Function symbols of `--symbols FILE`: an ELF's .symtab, or an nm/System.map listing.
    Anything unreadable is a usage error (it is named on the command line)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            if head == b"\x7fELF":
                table = read_file_tables(path).symtab
                if table is None:
                    raise UsageError(f"--symbols {path}: an ELF file without .symtab")
                return table_symbols(table, isa, bias)[0]
            fh.seek(0)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError as e:
        raise UsageError(f"--symbols {path}: {e.strerror or e}") from None
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - pyelftools on a damaged file
        raise UsageError(f"--symbols {path}: unreadable ELF ({type(e).__name__})") from None
    out = []
    for addr, name in nm_functions(text, path):
        start, alt = isa.entry_of(addr + bias)
        out.append(FuncSymbol(name, start, 0, alt, 0))
    if not out:
        raise UsageError(f"--symbols {path}: no function symbols")
    return out
