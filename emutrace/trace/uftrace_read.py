"""Reading a uftrace data directory written by `emutrace record` back into records (pure:
no emulator).  The layout is the one `trace/uftrace_write.py` writes: `<tid>.dat` of 16-byte
little-endian records, the `sid-*.map` whose first line starts the image, `<exe>.sym` with
addresses relative to it, and `emutrace.txt` naming the ISA.

Every problem is one `EmutraceError` naming the file: a missing directory exits 66; a
missing `info` or `.dat`, a `.dat` cut mid-record, a record without uftrace's magic, a map
or symbol file that does not parse exit 65.  Nothing in the directory is ever changed.
"""

from __future__ import annotations

import bisect
import glob
import os
import struct
from collections.abc import Callable, Iterator

from emutrace.errors import EXIT_BAD_ELF, EXIT_NO_INPUT, EmutraceError
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.uftrace_write import EMUTRACE_FILE, MAGIC, TID, TYPE_ENTRY, TYPE_EXIT


def _bad(path: str, problem: str) -> EmutraceError:
    return EmutraceError(f"{path}: {problem}", EXIT_BAD_ELF)


def _records(dat: str) -> Iterator[Record]:
    size = os.path.getsize(dat)
    if size % 16:
        raise _bad(dat, f"cut mid-record ({size} bytes is not a multiple of 16)")
    open_times: list[tuple[int, int]] = []  # (func, entry time) per open frame
    with open(dat, "rb") as f:
        while chunk := f.read(16 * 4096):
            for time, word in struct.iter_unpack("<QQ", chunk):
                kind, magic = word & 3, (word >> 3) & 7
                depth, addr = (word >> 6) & 0x3FF, word >> 16
                if magic != MAGIC or kind not in (TYPE_ENTRY, TYPE_EXIT):
                    raise _bad(dat, f"not a uftrace record at offset {f.tell() - len(chunk)}")
                if kind == TYPE_ENTRY:
                    open_times.append((addr, time))
                    yield Entry(time, depth, addr)
                else:
                    if not open_times:
                        raise _bad(dat, "an exit record without its entry")
                    _func, start = open_times.pop()
                    yield Exit(time, depth, addr, None, time - start)


def _symbols(directory: str, as_uftrace: bool = False) -> Callable[[int], str]:
    maps = sorted(glob.glob(os.path.join(directory, "sid-*.map")))
    if not maps:
        raise _bad(os.path.join(directory, "sid-*.map"), "missing")
    try:
        with open(maps[0]) as f:
            base = int(f.readline().split("-", 1)[0], 16)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(maps[0], f"not a memory map ({e})") from None
    starts: list[int] = []
    names: list[str] = []
    for sym in glob.glob(os.path.join(directory, "*.sym")):
        try:
            with open(sym) as f:
                for line in f:
                    if line.startswith("#") or not line.strip():
                        continue
                    addr, _kind, name = line.split(maxsplit=2)
                    starts.append(base + int(addr, 16))
                    names.append(name.strip())
        except (ValueError, UnicodeDecodeError):
            raise _bad(sym, "not a uftrace symbol file") from None
    if as_uftrace:
        return _uftrace_symbolizer(starts, names)
    order = sorted(range(len(starts)), key=starts.__getitem__)
    starts = [starts[i] for i in order]
    names = [names[i] for i in order]

    def symbolize(addr: int) -> str:
        i = bisect.bisect_right(starts, addr) - 1
        return names[i] if i >= 0 and starts[i] == addr else f"{addr:#x}"

    return symbolize


def _uftrace_symbolizer(starts: list[int], names: list[str]) -> Callable[[int], str]:
    """Names as uftrace 0.13 gives them from `.sym` files (utils/symbol.c
    load_symbol_file): of several names at one address the first in the file; an address
    takes the name of the symbol it lies in, up to the next symbol's start (a PLT slot inside
    `_init` is `_init`); the `__sym_end` sentinel only ends the last range."""
    first: dict[int, str] = {}
    for addr, name in zip(starts, names, strict=True):
        first.setdefault(addr, name)
    ordered = sorted(first)
    labels = [first[a] for a in ordered]

    def symbolize(addr: int) -> str:
        i = bisect.bisect_right(ordered, addr) - 1
        if i < 0 or labels[i] == "__sym_end":
            return f"{addr:#x}"
        return labels[i]

    return symbolize


def load_recording(path: str, as_uftrace: bool = False
                   ) -> tuple[Iterator[Record], Callable[[int], str], str]:
    """(records, symbolize, ISA name) of a data directory written by `emutrace record`.
    `as_uftrace`: name addresses as uftrace does (the viewers compared with uftrace's);
    otherwise only a symbol's exact start has its name (the replay and diff of calls)."""
    if not os.path.isdir(path):
        raise EmutraceError(f"{path}: no such data directory", EXIT_NO_INPUT)
    if not os.path.isfile(os.path.join(path, "info")):
        raise _bad(os.path.join(path, "info"), "missing (not a complete uftrace data directory)")
    dat = os.path.join(path, f"{TID}.dat")
    if not os.path.isfile(dat):
        raise _bad(dat, "missing")
    isa = ""
    try:
        with open(os.path.join(path, EMUTRACE_FILE)) as f:
            for line in f:
                key, _, value = line.strip().partition(":")
                if key == "isa":
                    isa = value
    except OSError:
        pass  # a directory uftrace wrote itself: no ISA named
    symbolize = _symbols(path, as_uftrace)
    records = _records(dat)
    return records, symbolize, isa


def recorded_program(path: str) -> str | None:
    """The host path of the program a data directory recorded (`exename:` in `info`)."""
    try:
        with open(os.path.join(path, "info"), "rb") as f:
            for line in f.read().split(b"\n"):
                if b"exename:" in line:
                    return line.split(b"exename:", 1)[1].decode(errors="replace")
    except OSError:
        return None
    return None
