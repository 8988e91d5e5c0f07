"""Reading a uftrace data directory written by `emutrace record` back into records (pure:
no emulator), as a stream (memory does not grow with the recording).  The layout is the one
`trace/uftrace_write.py` writes: `<tid>.dat` of 16-byte little-endian records, each maybe
followed by its values (`trace/uftrace_args.py`, specs in `info`, kinds in `emutrace.txt`),
the `sid-*.map` whose first line starts the image, `<exe>.sym` with addresses relative to
it, `emutrace.txt` naming the ISA and `emutrace-exits.txt` naming the exits that were not
returns.

A recording is untrusted input: every file is opened as `trace/recording_files.py` says
(regular files only, never through a link, never blocking, a size cap per kind; the `.dat`
is streamed), and every field is checked before it is used.  Every problem is one
`EmutraceError` naming the file: a missing directory exits 66; a missing `info` or `.dat`,
a `.dat` cut mid-record, a record without uftrace's magic, values without a spec or with a
spec not understood, an unknown ISA, a map or symbol file that does not parse exit 65.
Names are returned as the `.sym` file holds them (the writer escapes control characters,
`uftrace_names.printable`); the viewers print them through `printable` again, so a
hand-made file cannot put a control character on the terminal either.  A recording that was
never closed (killed: `info` has no exit status) may end mid-record: that record is left
out and the open calls are closed at the last record.  Nothing in the directory is ever
changed.
"""

from __future__ import annotations

import bisect
import glob
import heapq
import io
import os
import re
import struct
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from typing import TypeVar

from emutrace.errors import EXIT_NO_INPUT, EmutraceError
from emutrace.isa import UnknownIsa, by_name
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.recording_files import (
    CAPS,
    LINE_CAP,
    bad_file,
    open_stream,
    read_capped,
    read_text,
)
from emutrace.trace.uftrace_args import parse_spec_line, unpack_values
from emutrace.trace.uftrace_names import END_NAMES, SYM_END, is_boundary, printable
from emutrace.trace.uftrace_write import (
    EMUTRACE_FILE,
    MAGIC,
    MAX_STACK,
    TID,
    TYPE_ENTRY,
    TYPE_EXIT,
    exits_file,
)
from emutrace.trace.values import KINDS, Value

_bad = bad_file
T = TypeVar("T")


# open calls a recording may nest: the recorder writes MAX_STACK levels (1,024); eight
# times that is a hand-made file, refused before the stacks of the reader and the viewers
# grow with it (and before a text replay indents lines by tens of kilobytes)
MAX_OPEN_CALLS = 8 * MAX_STACK
READ_AHEAD = 1 << 20  # bytes kept ahead of the parser (one record's values: < 1 MiB)
Layouts = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]  # name -> (specs, kinds)


def _records(dat: str, name_of: Callable[[int], str] | None = None,
             args: Layouts | None = None, rets: Layouts | None = None,
             complete: bool = True, exits: str | None = None, thread: int = 0,
             chunk: int = 4 * READ_AHEAD) -> Iterator[Record]:
    """The records of `dat`, each with `tid` = `thread`; with `args`/`rets` (the
    recording's value specs) the values after a record whose `more` bit is set are read
    too.  An exit before any entry left open (a forked child's return into its parent's
    frames) is left out.  Frames still open when the file ends (a recorder killed mid-run)
    are closed at the last record's time, `at_exit`.
    `complete` False (the recorder never closed the directory: `info` has no exit status):
    a record cut by the end of the file is the kill's, and is left out, not an error.
    `exits`: the file naming the exits that were not returns (`EXITS_FILE`).  `chunk`:
    bytes read at a time (less when many tasks are read side by side)."""
    notes = _exit_notes(exits)
    note = next(notes, None)
    index = -1
    f = open_stream(dat)
    if f is None:
        raise _bad(dat, "missing")
    if complete and not (args or rets):
        size = os.fstat(f.fileno()).st_size
        if size % 16:
            f.close()
            raise _bad(dat, f"cut mid-record ({size} bytes is not a multiple of 16)")
    open_times: list[tuple[int, int]] = []  # (func, entry time) per open frame
    time = 0
    with f:
        data = b""
        pos = 0
        offset = 0  # file offset of data[0]
        while True:
            if len(data) - pos < READ_AHEAD:  # a record with its values is far smaller
                data = data[pos:] + f.read(chunk)
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
                values = _shown(values)
            if kind == TYPE_ENTRY:
                if len(open_times) >= MAX_OPEN_CALLS:
                    raise _bad(dat, f"calls nested more than {MAX_OPEN_CALLS} deep at offset "
                                    f"{offset + pos - 16} (a recording holds {MAX_STACK})")
                open_times.append((addr, time))
                yield Entry(time, depth, addr, values, thread)
            else:
                if not open_times:
                    # a return into a frame entered before this task's file began: a
                    # forked child's into its parent's frames (uftrace writes them too,
                    # and shows each as a `}` line); the viewers show the task's own calls
                    continue
                _func, start = open_times.pop()
                flag = ""
                while note is not None and note[0] <= index:
                    if note[0] == index:
                        flag = note[1]
                    note = next(notes, None)
                yield Exit(time, depth, addr, values[0] if values else None, time - start,
                           unwound=bool(flag), at_exit=flag == "x", tid=thread)
    while open_times:
        func, start = open_times.pop()
        yield Exit(time, len(open_times), func, None, time - start, unwound=True,
                   at_exit=True, tid=thread)


QUOTED = ("str", "buf")  # kinds shown as C literals (values.quote_c escapes them itself)


def _shown(values: tuple[Value, ...]) -> tuple[Value, ...]:
    """`values` with the text of an enum or a struct (shown as it is, not quoted like a
    string's) made printable: text read from the recording must not reach the terminal
    raw.  A tab stays a tab, as `run` shows it."""
    if all(v.text is None or v.text.isprintable() or v.kind in QUOTED for v in values):
        return values
    return tuple(v if v.text is None or v.kind in QUOTED
                 else replace(v, text=printable(v.text, keep="\t")) for v in values)



def _exit_notes(path: str | None) -> Iterator[tuple[int, str]]:
    """(record index, "u" or "x") from `EXITS_FILE`, streamed; nothing when it is missing
    (a directory uftrace wrote) or where a line is damaged (the flags are only notes)."""
    f = open_stream(path) if path is not None else None
    if f is None:
        return
    with f:
        while True:
            line = f.readline(LINE_CAP)
            index, _, flag = line.strip().partition(b" ")
            if not index.isdigit() or flag not in (b"u", b"x"):
                return
            yield int(index), flag.decode()


def _key_values(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.split("\n"):
        key, _, value = line.partition(":")
        fields[key] = value
    return fields


def info_text(path: str) -> str | None:
    """The text after the 40-byte header of `path`'s `info`, None if there is none."""
    data = read_capped(os.path.join(path, "info"), "info")
    return None if data is None else data[40:].decode(errors="backslashreplace")


def sidecar_text(path: str) -> str:
    """`emutrace.txt` (empty when the directory was written by uftrace itself)."""
    data = read_capped(os.path.join(path, EMUTRACE_FILE), "emutrace.txt")
    return "" if data is None else data.decode(errors="backslashreplace")


# what a value spec may say: `c`, `s`, or a letter and a size in bits, a whole number of
# bytes up to 16 (uftrace's `f80` for a long double included)
_SPEC = re.compile(r"[cs]|[a-z](8|16|24|32|40|48|56|64|80|96|128)")


def _checked(table: Layouts, path: str) -> Layouts:
    for name, (specs, kinds) in table.items():
        for i, spec in enumerate(specs):
            kind = kinds[i] if i < len(kinds) else ""
            if not _SPEC.fullmatch(spec) or (kind and kind not in KINDS):
                raise _bad(path, f"value spec {spec!r} ({kind or 'no kind'}) of "
                                 f"{printable(name)} not understood")
    return table


def _layouts(path: str, info: str) -> tuple[Layouts, Layouts, bool]:
    """The value specs in `info` (argspec/retspec), with the kinds `emutrace.txt` lists,
    and whether the recording was closed (`info` holds its exit status)."""
    fields = _key_values(info)
    extra = _key_values(sidecar_text(path))

    def table(spec_key: str, kind_key: str, retval: bool) -> Layouts:
        specs = parse_spec_line(fields.get(spec_key, ""), retval)
        kinds = parse_spec_line(extra.get(kind_key, ""), retval)
        return _checked({name: (s, kinds.get(name, ())) for name, s in specs.items()},
                        os.path.join(path, "info"))

    return (table("argspec", "argkinds", False), table("retspec", "retkinds", True),
            "exit_status" in fields)


MAX_SYMBOLS = 1 << 20  # names read from the `.sym` files of one recording, together
_HEX64 = re.compile(r"[0-9a-fA-F]{1,16}")


def _address(text: str, path: str, number: int) -> int:
    if not _HEX64.fullmatch(text):
        raise _bad(path, f"line {number}: {printable(text[:40])!r} is not an address")
    return int(text, 16)


def _bases(directory: str) -> tuple[int, dict[str, int]]:
    """The program's base (the first map line's start) and each mapped path's base."""
    maps = sorted(glob.glob(os.path.join(glob.escape(directory), "sid-*.map")))
    if not maps:
        raise _bad(os.path.join(directory, "sid-*.map"), "missing")
    text = read_text(maps[0], "map")
    if not text or not text.strip():
        raise _bad(maps[0], "empty (not a memory map)")
    bases: dict[str, int] = {}  # mapped path -> its first line's start (the module base)
    base = 0
    for number, line in enumerate(text.split("\n")):
        fields = line.split()
        if not fields:
            continue
        start = _address(fields[0].split("-", 1)[0], maps[0], number + 1)
        if number == 0:
            base = start
        if len(fields) >= 6:
            bases.setdefault(fields[5], start)
    return base, bases


def _symbol_table(directory: str) -> tuple[list[int], list[str]]:
    """(starts, names) of every `.sym` file, ordered by address; of several names at one
    address only the first in its file (the one `run` shows and uftrace takes)."""
    base, bases = _bases(directory)
    budget = [CAPS["sym"]]
    starts: list[int] = []
    names: list[str] = []
    for sym in sorted(glob.glob(os.path.join(glob.escape(directory), "*.sym"))):
        text = read_text(sym, "sym", budget)
        sym_base = base  # the program's, unless `# path name:` names another module
        for number, line in enumerate(io.StringIO(text or "", newline="\n")):
            if line.startswith("# path name:"):
                sym_base = bases.get(line.split(":", 1)[1].strip(), base)
            if line.startswith("#") or line.isspace():
                continue
            fields = line.split(maxsplit=2)
            if len(fields) < 2:
                raise _bad(sym, f"line {number + 1}: not `address kind name`")
            starts.append(sym_base + _address(fields[0], sym, number + 1))
            name = fields[2].strip() if len(fields) == 3 else ""
            # a boundary ends the symbol before it and names nothing (uftrace_names)
            names.append(SYM_END if is_boundary(fields[1], name) else name)
            if len(starts) > MAX_SYMBOLS:
                raise _bad(sym, f"more than {MAX_SYMBOLS} symbols in the .sym files")
    if all(starts[i] < starts[i + 1] for i in range(len(starts) - 1)):
        return starts, names  # one file in address order, as the recorder writes it
    order = sorted(range(len(starts)), key=starts.__getitem__)  # stable: the first name first
    kept_starts: list[int] = []
    kept_names: list[str] = []
    for i in order:
        if not kept_starts or kept_starts[-1] != starts[i]:
            kept_starts.append(starts[i])
            kept_names.append(names[i])
        elif kept_names[-1] == SYM_END:  # one module's end, another's symbol: the symbol
            kept_names[-1] = names[i]
    return kept_starts, kept_names


def _symbolizers(directory: str) -> tuple[Callable[[int], str], Callable[[int], str]]:
    """(exact, as_uftrace): names by a symbol's exact start, else the hex address (the
    replay and diff of calls); names as uftrace gives them (the viewers compared with
    uftrace's: an address inside a symbol takes its name, trace/uftrace_names.py)."""
    starts, names = _symbol_table(directory)

    def exact(addr: int) -> str:
        i = bisect.bisect_left(starts, addr)
        if i < len(starts) and starts[i] == addr and names[i] != SYM_END:
            return names[i]
        return f"{addr:#x}"

    def as_uftrace(addr: int) -> str:
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or names[i] == SYM_END:
            return f"<{addr:x}>"
        return names[i]

    return exact, as_uftrace


MAX_TASKS = 256  # tasks read side by side (two open files each); more: select with --tid


def recording_names(path: str) -> list[str]:
    """The function names of every `.sym` file of the recording in `path` (what a
    viewer's -F, -N and --start can name)."""
    return [n for n in _symbol_table(path)[1] if n not in END_NAMES]


def recording_tasks(path: str) -> tuple[int, ...]:
    """The recording's task ids in the order `info` lists them (`taskinfo:tids`, uftrace's
    order: the main task first, then by creation), or the main task alone when `info`
    lists none.  Each is a positive number, listed once."""
    listed = ""
    for line in (info_text(path) or "").split("\n"):
        if line.startswith("taskinfo:tids="):
            listed = line.split("=", 1)[1].strip()
    if not listed:
        return (TID,)
    tids: list[int] = []
    for field in listed.split(","):
        if not field.isdecimal() or len(field) > 9 or int(field) <= 0:
            raise _bad(os.path.join(path, "info"),
                       f"task id {printable(field[:40])!r} is not a positive number")
        if int(field) not in tids:
            tids.append(int(field))
    return tuple(tids)


def load_recording(path: str, as_uftrace: bool = False, tids: Collection[int] | None = None
                   ) -> tuple[Iterator[Record], Callable[[int], str], str]:
    """(records, symbolize, ISA name) of a data directory written by `emutrace record`.
    `as_uftrace`: name addresses as uftrace does (the viewers compared with uftrace's);
    otherwise only a symbol's exact start has its name (the replay and diff of calls).

    Records of every task (`recording_tasks`), or of those in `tids` (ids the recording
    does not have select nothing, as uftrace's `--tid`), merged in time order as uftrace
    reads them (`in_time_order`).  A record's `tid` is its task's index in
    `recording_tasks` (0 the main task, n the n-th thread created in a recording of
    emutrace's)."""
    streams, symbolize, isa = load_tasks(path, as_uftrace, tids)
    return in_time_order([s for _task, s in streams], _time), symbolize, isa


def in_time_order(streams: list[Iterator[T]], time: Callable[[T], int]) -> Iterator[T]:
    """The items of several tasks' streams (each in time order) in time order, as uftrace
    reads tasks: the earliest first, of two at the same time the one of the stream given
    first."""
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams, key=time) if streams else iter(())


def load_tasks(path: str, as_uftrace: bool = False, tids: Collection[int] | None = None,
               side_by_side: bool = True
               ) -> tuple[list[tuple[int, Iterator[Record]]], Callable[[int], str], str]:
    """As `load_recording`, each chosen task's records apart: [(task id, records)] in the
    order of `recording_tasks`.  A task's files are opened when its records are first
    read; `side_by_side` (the records will be read together, `in_time_order`): at most
    MAX_TASKS tasks."""
    if not os.path.isdir(path):
        raise EmutraceError(f"{path}: no such data directory", EXIT_NO_INPUT)
    info = info_text(path)
    if info is None:
        raise _bad(os.path.join(path, "info"), "missing (not a complete uftrace data directory)")
    tasks = recording_tasks(path)
    chosen = [(i, t) for i, t in enumerate(tasks) if tids is None or t in tids]
    if side_by_side and len(chosen) > MAX_TASKS:
        raise _bad(os.path.join(path, "info"),
                   f"{len(chosen)} tasks; viewers read at most {MAX_TASKS} side by side "
                   f"(choose some with --tid)")
    for _i, task in chosen:
        dat = os.path.join(path, f"{task}.dat")
        stream = open_stream(dat)
        if stream is None:
            raise _bad(dat, "missing")
        stream.close()  # it is opened again (the same careful way) when the records are read
    isa = _key_values(sidecar_text(path)).get("isa", "").strip()
    if isa:
        try:
            isa = by_name(isa).name
        except UnknownIsa:
            raise _bad(os.path.join(path, EMUTRACE_FILE),
                       f"unknown ISA {printable(isa[:40])!r}") from None
    exact, uftrace_names = _symbolizers(path)
    args, rets, complete = _layouts(path, info)
    chunk = 4 * READ_AHEAD if len(chosen) <= 1 else READ_AHEAD
    streams = [(task, _records(os.path.join(path, f"{task}.dat"), uftrace_names, args, rets,
                               complete, os.path.join(path, exits_file(task)), index, chunk))
               for index, task in chosen]
    return streams, uftrace_names if as_uftrace else exact, isa


def _time(rec: Record) -> int:
    return rec.time


def recorded_program(path: str) -> str | None:
    """The host path of the program a data directory recorded (`exename:` in `info`)."""
    info = info_text(path)
    for line in (info or "").split("\n"):
        if "exename:" in line:
            return line.split("exename:", 1)[1]
    return None
