"""A record sink that keeps `emutrace run`'s trace on disk, not in memory.

`run` prints its text trace when the image's run ends (a call's line needs its return), so
every record made until then must be kept.  In a list that grew with the trace: ~200 bytes
per record, ~1.5 GB for `fib 32`'s 7 M records.  `SpillSink` holds up to HELD records in
memory (a short trace never touches the disk) and then appends them, pickled in chunks of
CHUNK, to an anonymous temporary file (already unlinked: nothing is left behind by a crash
or a kill); reading it back yields the records in order, one chunk in memory at a time.  The
file holds only what this process pickled itself.  Where the file cannot be written (a full
disk, RLIMIT_FSIZE) the records stay in memory, as before.

The native engine's record writer (backends/native_writer.py, native/ufwrite.c) writes the
records C finished itself, as 16-byte uftrace records (`uftrace_write.pack_record`, the
values after them: `pack_values`) that reach the sink in blocks (`write_packed`), between
Python's records: the file holds both kinds of segment, in order, and reading turns C's
bytes back into the `Entry`/`Exit` records Python would have made. What a packed record does
not hold is known: its thread is its segment's (each segment of C's bytes holds one thread's
records), it was entered by a call, is no unwound exit, and an exit's duration is its time
less its entry's (kept per thread and depth while reading); C writes the values of a
function's records only in the one layout of kinds and widths `plan_values` has accepted for
it (else Python writes them), so they read back as the `Value`s Python had. A `char *` value
(kind str or buf) is written as the file's own "copy" form, not uftrace's text (`pack_copy`:
its word, then the bytes the hot path copied, or none for NULL and unreadable memory): it
reads back as the very `Value` — word and text — Python made.

A forked child (`run` follows a guest fork with a host fork) shares the file's descriptor
and offset with its parent: `for_child` gives the child a file of its own with the records
written before the fork.
"""

from __future__ import annotations

import dataclasses
import io
import operator
import os
import pickle
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from emutrace.trace.events import Entry, Exit, Record, Row, row_of
from emutrace.trace.uftrace_args import spec_of, spec_size
from emutrace.trace.values import Value, render

CHUNK = 4096  # records pickled together (a chunk in memory: ~1 MB)
HELD = 4 * CHUNK  # records held in memory before they are written (~3 MB)
HELD_BYTES = 1 << 20  # bytes of C's records held in memory before they are written
_RECORD = struct.Struct("<QQ")  # uftrace.h struct uftrace_record: time; type:2 more:1 ...
_MAGIC_DEEP = 6  # (in the record's magic bits) a u64 depth follows: ufwrite.c UW_MAGIC_DEEP
_RENDERED = 1 << 12  # value texts remembered while reading rows (then forgotten: ~1 MB)
_ADDRESS_BITS = 48  # the record's addr field: a function above it is not C's to write
_STRING_KINDS = ("str", "buf")  # values written as copies (`pack_copy`): size 0 in a Layout
_NO_COPY = 0xFFFF  # a copy's length field: NULL or unreadable (the Value's text is None)

T = TypeVar("T")
# a function's values as C writes them: per value its kind, width in bits, bytes in the record
Layout = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]


class PackedRecords(bytes):
    """C's record bytes of one thread (`tid`), as the spill file hands a segment out."""

    def __new__(cls, data: bytes | bytearray, tid: int) -> PackedRecords:
        self = super().__new__(cls, data)
        self.tid = tid
        return self

    tid: int


class _HeldPacked(bytearray):
    """C's record bytes of one thread (`tid`) not on file yet."""

    def __init__(self, data: bytes, tid: int) -> None:
        super().__init__(data)
        self.tid = tid


class SpillSink:
    # (backends/native_writer.py PackedSink) C writes a `char *` as `pack_copy`, and a record
    # deeper than uftrace's 10-bit depth field with its depth in the word after it
    string_form = "copy"
    deep_records = "depth"
    any_thread = True  # C's records of every thread, each segment naming its thread

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=directory, buffering=0)  # noqa: SIM115
        # (thread, offset, length) of each segment on file: a pickled chunk of records
        # (thread None), or C's record bytes of one thread
        self._segments: list[tuple[int | None, int, int]] = []
        self._size = 0  # bytes written to the file
        # what is not on file yet, in order: lists of Python's records, C's record bytes
        self._held: list[list[Record] | _HeldPacked] = []
        self._held_records = 0
        self._held_bytes = 0
        self.count = 0  # records written, held ones included
        self.tids: set[int] = set()  # the threads the records belong to
        self._writable = True  # False once a write failed: the records stay in memory
        self._packed = False  # C wrote records (reading tracks entry times then)
        self._args: dict[int, Layout] = {}  # function -> its entries' values as C writes them
        self._rets: dict[int, Layout] = {}  # function -> its exits' value

    def write(self, records: Iterable[Record]) -> None:
        held = self._held
        if not held or not isinstance(held[-1], list):
            held.append([])
        part = held[-1]
        assert isinstance(part, list)
        for rec in records:
            part.append(rec)
            self.tids.add(rec.tid)
            self.count += 1
            self._held_records += 1
            if self._held_records >= HELD and self._writable:
                self._spill()
                if not held or not isinstance(held[-1], list):
                    held.append([])
                part = held[-1]
                assert isinstance(part, list)

    def write_packed(self, data: bytes, records: int, last_time: int,
                     not_recorded: int = 0, thread: int = 0) -> None:
        """C's records of one thread (backends/native_writer.py PackedSink), after
        everything written so far, values laid out as `plan_values` accepted (not_recorded:
        0, this sink keeps every record)."""
        held = self._held
        last = held[-1] if held else None
        if isinstance(last, _HeldPacked) and last.tid == thread:
            last += data
        else:
            held.append(_HeldPacked(data, thread))
        self._packed = True
        self.tids.add(thread)
        self.count += records
        self._held_bytes += len(data)
        if self._held_bytes >= HELD_BYTES and self._writable:
            self._spill()

    def plan_values(self, func: int, values: list[Value], retval: bool) -> bool | None:
        """C may write `func`'s records (entries, or with `retval` exits) with these values
        when they are the first layout it was taught for the function (then it always
        writes them: a text trace shows every value); another layout stays Python's."""
        if func >> _ADDRESS_BITS:
            return None  # the record's address field would cut it
        if not values:
            return False
        layout = (tuple(v.kind for v in values), tuple(v.bits for v in values),
                  tuple(0 if v.kind in _STRING_KINDS else spec_size(spec_of(v))
                        for v in values))
        table = self._rets if retval else self._args
        return True if table.setdefault(func, layout) == layout else None

    def close(self, exit_status: int = 0) -> None:
        pass  # the records are read after the run; the file goes with the object

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Record]:
        """Every record written, in order (the sink may be read more than once)."""
        return self._read(Entry, Exit, lambda rec: rec, Value)

    def rows(self) -> Iterator[Row]:
        """The same records as rows (`events.row_of`), C's read from their bytes without making an
        `Entry`, `Exit` or `Value` (what `run`'s text formatter reads): their values come
        as the text `values.render` gives them (a `str`)."""
        rendered: dict[tuple[str, int, int], str] = {}

        def text(kind: str, bits: int, raw: int, copy: str | None = None) -> str:
            if kind in _STRING_KINDS:
                return render(Value(kind, bits, raw, copy))
            key = (kind, bits, raw)
            shown = rendered.get(key)
            if shown is None:
                if len(rendered) >= _RENDERED:
                    rendered.clear()
                shown = rendered[key] = render(Value(kind, bits, raw))
            return shown

        return self._read(_entry_row, _exit_row, row_of, text)

    def _read(self, entry: Callable[..., T], exit_: Callable[..., T],
              own: Callable[[Record], T], value: Callable[..., object]) -> Iterator[T]:
        if not self._packed:
            for part in self._parts():
                assert isinstance(part, list)
                yield from map(own, part)
            return
        # per thread, the entry time per depth (C's exits need it)
        times: dict[int, list[int]] = {}
        for part in self._parts():
            if isinstance(part, list):
                for rec in part:
                    if isinstance(rec, Entry):
                        _keep_time(times.setdefault(rec.tid, []), rec.depth, rec.time)
                    yield own(rec)
            else:
                yield from _unpack(part, self._args, self._rets,
                                   times.setdefault(part.tid, []), entry, exit_, value)

    def segments(self) -> Iterator[list[Record] | PackedRecords]:
        """What was written, in order, one segment in memory at a time: lists of Python's
        records, and C's record bytes of one thread (read as `_unpack` reads them, values
        per `layouts`; native/replaytext.c formats them without making records)."""
        return self._parts()

    def layouts(self) -> tuple[dict[int, Layout], dict[int, Layout]]:
        """The layouts of the values C wrote: per function, its entries' and its exits'."""
        return dict(self._args), dict(self._rets)

    def _parts(self) -> Iterator[list[Record] | PackedRecords]:
        fd = self._file.fileno()
        for thread, offset, length in list(self._segments):
            data = _read(fd, offset, length)
            if thread is not None:
                yield PackedRecords(data, thread)
            else:
                chunk: list[Record] = pickle.loads(data)  # noqa: S301
                yield chunk
        for part in list(self._held):
            yield list(part) if isinstance(part, list) else PackedRecords(part, part.tid)

    def of_thread(self, tid: int) -> Iterator[Record]:
        return (rec for rec in self if rec.tid == tid)

    def for_child(self) -> None:
        """In a forked child: a file of its own holding what was spilled before the fork
        (read and written at explicit offsets: the offset it shares with the parent is
        left alone)."""
        fresh = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115
        for _packed, offset, length in self._segments:
            _write(fresh.fileno(), _read(self._file.fileno(), offset, length), offset)
        old, self._file = self._file, fresh
        old.close()

    def _spill(self) -> None:
        """Append what is held to the file, in order; a failed write leaves the rest held."""
        fd = self._file.fileno()
        held = self._held
        while held:
            part = held[0]
            if isinstance(part, list):
                data = _pickled(part[:CHUNK])
            else:
                data = bytes(part)
            try:
                _write(fd, data, self._size)
            except OSError:  # what was written stays; a cut segment lies beyond _size
                self._writable = False
                return
            self._segments.append((None if isinstance(part, list) else part.tid, self._size,
                                   len(data)))
            self._size += len(data)
            if isinstance(part, list):
                self._held_records -= len(part[:CHUNK])
                del part[:CHUNK]
                if part:
                    continue
            else:
                self._held_bytes -= len(part)
            del held[0]


def _by_fields(cls: type) -> Callable[[Any], tuple[type, tuple[object, ...]]]:
    """A dataclass pickled as its constructor's arguments, in field order: unpickling a
    frozen slotted dataclass the default way calls `dataclasses.fields` per object (~10 µs a
    record with its values, more than formatting its line)."""
    get = operator.attrgetter(*(f.name for f in dataclasses.fields(cls)))
    return lambda obj: (cls, get(obj))


_REDUCERS = {cls: _by_fields(cls) for cls in (Entry, Exit, Value)}


def _pickled(records: list[Record]) -> bytes:
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _REDUCERS  # type: ignore[assignment]
    pickler.dump(records)
    return out.getvalue()


def _keep_time(times: list[int], depth: int, time: int) -> None:
    if depth >= len(times):
        times.extend([0] * (depth + 1 - len(times)))
    times[depth] = time


def _entry_row(time: int, depth: int, func: int, args: tuple[object, ...], tid: int = 0) -> Row:
    return (False, func, args, "call")


def _exit_row(time: int, depth: int, func: int, retval: object, duration: int,
              tid: int = 0) -> Row:
    return (True, func, retval, duration, False, False)


def _unpack(data: PackedRecords, args: dict[int, Layout], rets: dict[int, Layout],
            times: list[int], entry: Callable[..., T], exit_: Callable[..., T],
            value: Callable[..., object]) -> Iterator[T]:
    """C's records of one thread back into Python's (`uftrace_write.pack_record`; the
    values after a record whose `more` bit is set, per `pack_values`: each padded to 4, all
    to 8; strings per `pack_copy`), made by `entry(time, depth, func, args, tid=)` and
    `exit_(time, depth, func, retval, duration, tid=)`, each value by `value(kind, bits,
    raw)` (a string's: `value(kind, bits, raw, text)`); times: the thread's entry time per
    depth."""
    tid = data.tid
    pos, end, unpack = 0, len(data), _RECORD.unpack_from
    while pos < end:
        time, word = unpack(data, pos)
        pos += 16
        depth, func = (word >> 6) & 0x3FF, word >> 16
        if (word >> 3) & 7 == _MAGIC_DEEP:  # deeper than the field holds: the depth follows
            depth = int.from_bytes(data[pos:pos + 8], "little")
            pos += 8
        is_exit = word & 1
        values: tuple[object, ...] = ()
        if word & 4:  # more: the values follow
            layout = (rets if is_exit else args)[func]
            if 0 in layout[2]:
                values, pos = _unpack_copies(data, pos, layout, value)
            else:
                form = _FORMS.get(layout)
                if form is None:
                    form = _FORMS[layout] = _form(layout)
                values = tuple(map(value, layout[0], layout[1], form.unpack_from(data, pos)))
                pos += form.size
        if is_exit:
            yield exit_(time, depth, func, values[0] if values else None, time - times[depth],
                        tid=tid)
        else:
            if depth >= len(times):
                times.extend([0] * (depth + 1 - len(times)))
            times[depth] = time
            yield entry(time, depth, func, values, tid=tid)


_FORMS: dict[Layout, struct.Struct] = {}  # a layout's values as one struct (`_form`)
_CODES = {1: "B3x", 2: "H2x", 4: "I", 8: "Q"}  # a value of n bytes, padded to 4


def _form(layout: Layout) -> struct.Struct:
    """The values of a layout as `pack_values` lays them out: each little-endian in its
    size, padded to 4, the whole padded to 8."""
    sizes = layout[2]
    used = sum(size + (-size % 4) for size in sizes)
    return struct.Struct("<" + "".join(_CODES[size] for size in sizes) + "x" * (-used % 8))


def pack_copy(v: Value) -> bytes:
    """A `char *` value as the spill file holds it (native/ufwrite.c UW_COPY): the word in
    8 bytes, a u16 length (_NO_COPY: no text), the text's Latin-1 bytes (the bytes the hot
    path copied), padded to 4."""
    text = b"" if v.text is None else v.text.encode("latin-1")
    data = struct.pack("<QH", v.raw, _NO_COPY if v.text is None else len(text)) + text
    return data + b"\0" * (-len(data) % 4)


def pack_layout(values: list[Value], layout: Layout) -> bytes:
    """The values of a record as C's writer lays them out for the spill file: numbers as
    `uftrace_args.pack_one`, strings as `pack_copy`, the whole padded to 8 (the Python
    reference of ufwrite.c's put_record for this sink)."""
    out = b""
    for v, size in zip(values, layout[2], strict=True):
        if size == 0:
            out += pack_copy(v)
        else:
            out += (v.raw & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
            out += b"\0" * (-size % 4)
    return out + b"\0" * (-len(out) % 8)


def _unpack_copies(data: bytes | bytearray, pos: int, layout: Layout,
                   value: Callable[..., object]) -> tuple[tuple[object, ...], int]:
    """A record's values when its layout holds a string (`pack_layout`), and the position
    after them."""
    start, out = pos, []
    for kind, bits, size in zip(*layout, strict=True):
        if size == 0:
            raw, n = struct.unpack_from("<QH", data, pos)
            pos += 10
            text = None
            if n != _NO_COPY:
                text = bytes(data[pos:pos + n]).decode("latin-1")
                pos += n
            pos += -(pos - start) % 4
            out.append(value(kind, bits, raw, text))
        else:
            raw = int.from_bytes(data[pos:pos + size], "little")
            pos += size + (-size % 4)
            out.append(value(kind, bits, raw))
    pos += -(pos - start) % 8
    return tuple(out), pos


def _write(fd: int, data: bytes, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _read(fd: int, offset: int, length: int) -> bytes:
    parts, done = [], 0
    while done < length:
        part = os.pread(fd, length - done, offset + done)
        if not part:
            raise OSError(f"spill file cut short at {offset + done}")
        parts.append(part)
        done += len(part)
    return b"".join(parts)
