"""Reading a uftrace data directory written by `emutrace record` back into records (pure:
no emulator), as a stream (memory does not grow with the recording).  The layout is the one
`trace/uftrace_write.py` writes: `<tid>.dat` of 16-byte little-endian records, each maybe
followed by its values (`trace/uftrace_args.py`, specs in `info`, kinds in `emutrace.txt`),
the `sid-*.map` whose first line starts the image, `<exe>.sym` with addresses relative to
it, `emutrace.txt` naming the ISA and `emutrace-exits.txt` naming the exits that were not
returns.

Every problem is one `EmutraceError` naming the file: a missing directory exits 66; a
missing `info` or `.dat`, a `.dat` cut mid-record, a record without uftrace's magic, values
without a spec, a map or symbol file that does not parse exit 65.  A recording that was
never closed (killed: `info` has no exit status) may end mid-record: that record is left
out and the open calls are closed at the last record.  Nothing in the directory is ever
changed.
"""

from __future__ import annotations

import bisect
import glob
import os
import struct
from collections.abc import Callable, Iterator

from emutrace.errors import EXIT_BAD_ELF, EXIT_NO_INPUT, EmutraceError
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.uftrace_args import parse_spec_line, unpack_values
from emutrace.trace.uftrace_names import uftrace_symbolizer
from emutrace.trace.uftrace_write import (
    EMUTRACE_FILE,
    EXITS_FILE,
    MAGIC,
    TID,
    TYPE_ENTRY,
    TYPE_EXIT,
)
from emutrace.trace.values import Value


def _bad(path: str, problem: str) -> EmutraceError:
    return EmutraceError(f"{path}: {problem}", EXIT_BAD_ELF)


READ_AHEAD = 1 << 20  # bytes kept ahead of the parser (one record's values: < 1 MiB)
Layouts = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]  # name -> (specs, kinds)


def _records(dat: str, name_of: Callable[[int], str] | None = None,
             args: Layouts | None = None, rets: Layouts | None = None,
             complete: bool = True, exits: str | None = None) -> Iterator[Record]:
    """The records of `dat`; with `args`/`rets` (the recording's value specs) the values
    after a record whose `more` bit is set are read too.  Frames still open when the file
    ends (a recorder killed mid-run) are closed at the last record's time, `at_exit`.
    `complete` False (the recorder never closed the directory: `info` has no exit status):
    a record cut by the end of the file is the kill's, and is left out, not an error.
    `exits`: the file naming the exits that were not returns (`EXITS_FILE`)."""
    notes = _exit_notes(exits)
    note = next(notes, None)
    index = -1
    if complete and not (args or rets):
        size = os.path.getsize(dat)
        if size % 16:
            raise _bad(dat, f"cut mid-record ({size} bytes is not a multiple of 16)")
    open_times: list[tuple[int, int]] = []  # (func, entry time) per open frame
    time = 0
    with open(dat, "rb") as f:
        data = b""
        pos = 0
        offset = 0  # file offset of data[0]
        while True:
            if len(data) - pos < READ_AHEAD:  # a record with its values is far smaller
                data = data[pos:] + f.read(4 * READ_AHEAD)
                offset += pos
                pos = 0
                if not data:
                    break
            if len(data) - pos < 16:
                if not complete:
                    break
                raise _bad(dat, f"cut mid-record at offset {offset + pos}")
            time, word = struct.unpack_from("<QQ", data, pos)
            kind, more, magic = word & 3, (word >> 2) & 1, (word >> 3) & 7
            depth, addr = (word >> 6) & 0x3FF, word >> 16
            if magic != MAGIC or kind not in (TYPE_ENTRY, TYPE_EXIT):
                raise _bad(dat, f"not a uftrace record at offset {offset + pos}")
            pos += 16
            index += 1
            values: tuple[Value, ...] = ()
            if more:
                table = args if kind == TYPE_ENTRY else rets
                name = name_of(addr) if name_of else ""
                if not table or name not in table:
                    raise _bad(dat, f"values after the record at offset {offset + pos - 16} "
                                    f"but no spec for {name or hex(addr)} in info")
                specs, kinds = table[name]
                try:
                    values, pos = unpack_values(data, pos, specs, kinds)
                except (IndexError, struct.error):
                    if not complete:
                        break
                    raise _bad(dat, f"cut mid-record at offset {offset + pos - 16}") from None
            if kind == TYPE_ENTRY:
                open_times.append((addr, time))
                yield Entry(time, depth, addr, values)
            else:
                if not open_times:
                    raise _bad(dat, "an exit record without its entry")
                _func, start = open_times.pop()
                flag = ""
                while note is not None and note[0] <= index:
                    if note[0] == index:
                        flag = note[1]
                    note = next(notes, None)
                yield Exit(time, depth, addr, values[0] if values else None, time - start,
                           unwound=bool(flag), at_exit=flag == "x")
    while open_times:
        func, start = open_times.pop()
        yield Exit(time, len(open_times), func, None, time - start, unwound=True,
                   at_exit=True)


def _exit_notes(path: str | None) -> Iterator[tuple[int, str]]:
    """(record index, "u" or "x") from `EXITS_FILE`, streamed; nothing when it is missing
    (a directory uftrace wrote) or where a line is damaged (the flags are only notes)."""
    if path is None or not os.path.isfile(path):
        return
    with open(path) as f:
        for line in f:
            index, _, flag = line.strip().partition(" ")
            if not index.isdigit() or flag not in ("u", "x"):
                return
            yield int(index), flag


def _layouts(path: str) -> tuple[Layouts, Layouts, bool]:
    """The value specs in `info` (argspec/retspec), with the kinds `emutrace.txt` lists,
    and whether the recording was closed (`info` holds its exit status)."""
    try:
        with open(os.path.join(path, "info"), "rb") as f:
            text = f.read()[40:].decode(errors="replace")
    except OSError:
        return {}, {}, True
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value
    extra: dict[str, str] = {}
    try:
        with open(os.path.join(path, EMUTRACE_FILE)) as sidecar:
            for line in sidecar.read().splitlines():
                key, _, value = line.partition(":")
                extra[key] = value
    except OSError:
        pass

    def table(spec_key: str, kind_key: str, retval: bool) -> Layouts:
        specs = parse_spec_line(fields.get(spec_key, ""), retval)
        kinds = parse_spec_line(extra.get(kind_key, ""), retval)
        return {name: (s, kinds.get(name, ())) for name, s in specs.items()}

    return (table("argspec", "argkinds", False), table("retspec", "retkinds", True),
            "exit_status" in fields)


def _symbols(directory: str, as_uftrace: bool = False) -> Callable[[int], str]:
    maps = sorted(glob.glob(os.path.join(directory, "sid-*.map")))
    if not maps:
        raise _bad(os.path.join(directory, "sid-*.map"), "missing")
    bases: dict[str, int] = {}  # mapped path -> its first line's start (the module base)
    try:
        with open(maps[0]) as f:
            for number, line in enumerate(f):
                fields = line.split()
                start = int(line.split("-", 1)[0], 16)
                if number == 0:
                    base = start
                if len(fields) >= 6:
                    bases.setdefault(fields[5], start)
    except (ValueError, UnicodeDecodeError, IndexError) as e:
        raise _bad(maps[0], f"not a memory map ({e})") from None
    starts: list[int] = []
    names: list[str] = []
    for sym in glob.glob(os.path.join(directory, "*.sym")):
        sym_base = base  # the program's, unless `# path name:` names another module
        try:
            with open(sym) as f:
                for line in f:
                    if line.startswith("# path name:"):
                        sym_base = bases.get(line.split(":", 1)[1].strip(), base)
                    if line.startswith("#") or not line.strip():
                        continue
                    addr, _kind, name = line.split(maxsplit=2)
                    starts.append(sym_base + int(addr, 16))
                    names.append(name.strip())
        except (ValueError, UnicodeDecodeError):
            raise _bad(sym, "not a uftrace symbol file") from None
    if as_uftrace:
        return uftrace_symbolizer(zip(starts, names, strict=True))
    order = sorted(range(len(starts)), key=starts.__getitem__)
    starts = [starts[i] for i in order]
    names = [names[i] for i in order]

    def symbolize(addr: int) -> str:
        # of several names at one address the first in the file (the one `run` shows and
        # uftrace takes; the sort above is stable)
        i = bisect.bisect_left(starts, addr)
        return names[i] if i < len(starts) and starts[i] == addr else f"{addr:#x}"

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
    name_of = symbolize if as_uftrace else _symbols(path, True)
    args, rets, complete = _layouts(path)
    records = _records(dat, name_of, args, rets, complete, os.path.join(path, EXITS_FILE))
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
