"""`emutrace run`'s text trace formatted in C (native/replaytext.c, built into the hot path's
library): the bytes `trace/format.py` `iter_replay_lines` gives, which stays the reference
(tests/test_run_text_native.py compares the two).

The spill file's C records (trace/spill.py: uftrace's 16-byte records and their values) go
to C as they are; Python's records (the ones C did not write, and every record of the
Python engine) are encoded here into a compact form with their values already rendered by
the reference (`format.format_value`), so C only places that text.  A function's name, its
-F/-N/--start flags and its -A count are handed over the first time C meets it.  C fills a
byte buffer with the lines, which is written to the stream's binary layer a megabyte at a
time.

`write_replay` declines (returns False, having written nothing) where C does not do the
whole job, and the caller formats the reference's way: no native library, `-t` (the time
filter holds records back: trace/time_filter.py), filter rules beyond -F/-N modes and -D
(triggers, -H, -C, --trace=off: trace/filters.py), records that are neither a `SpillSink` nor
a list, a stream that is not UTF-8 text over a binary buffer, a value layout C cannot read
(any kind but the integer kinds and `char *` copies C's writer writes).
"""

from __future__ import annotations

import codecs
import ctypes
import struct
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from emutrace import native
from emutrace.errors import Unsupported
from emutrace.trace.events import Entry, Record
from emutrace.trace.filters import IN, OUT
from emutrace.trace.format import HEADER, ReplayOptions, format_value
from emutrace.trace.spill import Layout, PackedRecords, SpillSink
from emutrace.trace.values import shown_name

# replaytext.c's statuses
_DONE, _FULL, _NAME = 0, 1, 2
_FAILURES = {-1: "out of memory", -2: "exit without entry", -3: "values without a layout",
             -4: "a record cut short", -5: "an exit no entry opened"}
# replaytext.c K_*: the kinds whose values C renders from C's records
KIND_CODES = {"auto": 0, "int": 1, "uint": 2, "hex": 3, "oct": 4, "char": 5, "uchar": 6,
              "bool": 7, "ptr": 8, "str": 9, "buf": 10}
_FILTER, _NOTRACE, _START = 1, 2, 4  # replaytext.c FN_*
_MARKS = {"signal": 1, "trap": 2, "resumed": 3}  # Entry.entered -> replaytext.c MARKS
_UNWOUND, _AT_EXIT, _RETVAL = 1, 2, 4  # replaytext.c ROW_*
_HEAD = struct.Struct("<BBHIQq")  # a Python record's head (replaytext.c rt_rows)
_LEN = struct.Struct("<I")
_ROWS_PER_BLOCK = 4096  # records of a list encoded at once
_TEXTS_KEPT = 1 << 12  # value texts remembered while encoding (then forgotten)

_vp, _u32, _u64, _i64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64
_sz, _pos, _int = ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int
SIGNATURES: native.Signatures = {
    "rt_new": ([], _vp), "rt_free": ([_vp], None),
    "rt_options": ([_vp, _u32, _u32, _i64, _i64, _u32], None),
    "rt_section": ([_vp, _u32, _u32], _int),
    "rt_text": ([_vp, ctypes.c_char_p, _sz], _int),
    "rt_function": ([_vp, _u64, ctypes.c_char_p, _sz, _u32, _i64], _int),
    "rt_layout": ([_vp, _u64, _u32, _u32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p],
                  _int),
    "rt_packed": ([_vp, ctypes.c_char_p, _sz, _pos], _int),
    "rt_rows": ([_vp, ctypes.c_char_p, _sz, _pos], _int),
    "rt_missing": ([_vp], _u64), "rt_finish": ([_vp], _int),
    "rt_output": ([_vp], _vp), "rt_output_len": ([_vp], _sz), "rt_output_clear": ([_vp], None),
}


def load() -> ctypes.CDLL | None:
    """The library with replaytext.c's functions declared, or None (not built, or built
    before replaytext.c)."""
    try:
        return native.load("replaytext.c (the text trace in C)", SIGNATURES)
    except Unsupported:  # not built, stale, or not loadable: the reference writes
        return None


def write_replay(records: Iterable[Record], symbolize: Callable[[int], str],
                 opts: ReplayOptions, stream: TextIO) -> bool:
    """`records` as `format.iter_replay_lines(records, symbolize, opts)` lines them, each
    ended by a newline, written to `stream`; False, with nothing written, where C does not
    format them (the module's docstring says when)."""
    binary = getattr(stream, "buffer", None)
    encoding = getattr(stream, "encoding", None)
    rules = opts.filter_rules()
    if opts.time_filter is not None and opts.time_filter > 0 \
            or not rules.plain \
            or not isinstance(records, (SpillSink, list)) or binary is None \
            or not isinstance(encoding, str) or codecs.lookup(encoding).name != "utf-8":
        return False
    lib = load()
    if lib is None:
        return False
    text = _Text(lib, symbolize, opts, stream.errors or "strict")
    try:
        if isinstance(records, SpillSink) and not text.layouts(records):
            return False
        stream.flush()  # what the text layer holds goes first
        text.out = binary
        text.write(records)
    finally:
        text.close()
    return True


class _Text:
    """One trace's C formatter (replaytext.c rt_state) and what feeds it."""

    def __init__(self, lib: ctypes.CDLL, symbolize: Callable[[int], str], opts: ReplayOptions,
                 errors: str) -> None:
        self.lib, self.symbolize, self.opts, self.errors = lib, symbolize, opts, errors
        self.state = lib.rt_new()
        if not self.state:
            raise MemoryError("the text trace in C: out of memory")
        self.rules = opts.filter_rules()
        lib.rt_options(self.state, int(opts.show_args), int(opts.show_retval),
                       -1 if self.rules.depth is None else self.rules.depth,
                       -1 if opts.default_args is None else opts.default_args,
                       int(self.rules.filter_in))
        self.named: set[int] = set()
        self.out: Any = None  # the stream's binary layer
        self.texts: dict[object, bytes] = {}

    def close(self) -> None:
        if self.state:
            self.lib.rt_free(self.state)
            self.state = None

    # ------------------------------------------------------------ what C is told
    def name(self, func: int) -> None:
        name = self.symbolize(func)
        mode = self.rules.trigger(name).mode
        flags = ((_FILTER if mode == IN else 0) | (_NOTRACE if mode == OUT else 0)
                 | (_START if name == self.opts.start else 0))
        count = self.opts.arg_counts.get(name, self.opts.default_args)
        data = shown_name(name).encode("utf-8", self.errors)  # the text it prints
        self._check(self.lib.rt_function(self.state, func, data, len(data), flags,
                                         -1 if count is None else count))
        self.named.add(func)

    def layouts(self, sink: SpillSink) -> bool:
        """The layouts of the values C's writer wrote; False for one C cannot read."""
        for exits, table in enumerate(sink.layouts()):
            for func, layout in table.items():
                if not _readable(layout):
                    return False
                if func not in self.named:
                    self.name(func)
                kinds, bits, sizes = layout
                if self.lib.rt_layout(self.state, func, exits, len(kinds),
                                      bytes(KIND_CODES[k] for k in kinds), bytes(bits),
                                      bytes(sizes)) != _DONE:
                    return False
        return True

    # ------------------------------------------------------------ the records
    def write(self, records: SpillSink | list[Record]) -> None:
        opts, lib = self.opts, self.lib
        tids = records.tids if isinstance(records, SpillSink) else {r.tid for r in records}
        if not any(tids):
            self._check(lib.rt_section(self.state, int(opts.start is None), int(opts.header)))
            self._feed(records, None)
        else:  # format.py iter_replay_lines: one section per thread, in thread order
            if opts.header:
                self._text(HEADER + "\n")
            for tid in sorted(tids):
                self._text(f"# thread {tid}\n")
                start = opts.start if tid == 0 else None
                self._check(lib.rt_section(self.state, int(start is None), 0))
                self._feed(records, tid)
        self._drain()

    def _feed(self, records: SpillSink | list[Record], tid: int | None) -> None:
        """One section's records (`tid`'s, or all of them); each segment of C's bytes is
        one thread's."""
        parts: Iterable[list[Record] | PackedRecords]
        parts = records.segments() if isinstance(records, SpillSink) else \
            (records[i:i + _ROWS_PER_BLOCK] for i in range(0, len(records), _ROWS_PER_BLOCK))
        for part in parts:
            if isinstance(part, list):
                self._run(self.lib.rt_rows, self._encode(part, tid))
            elif tid is None or part.tid == tid:
                self._run(self.lib.rt_packed, bytes(part))
        self._check(self.lib.rt_finish(self.state))

    def _run(self, feed: Any, data: bytes) -> None:
        at = ctypes.c_size_t(0)
        while True:
            status = feed(self.state, data, len(data), ctypes.byref(at))
            if status == _DONE:
                return
            if status == _FULL:
                self._drain()
            elif status == _NAME:
                self.name(int(self.lib.rt_missing(self.state)))
            else:
                self._check(status)

    def _encode(self, records: list[Record], tid: int | None) -> bytes:
        """Python's records as replaytext.c's rows read them: a head, then each value's
        text (`format_value`'s, in the stream's encoding) after its length."""
        out = bytearray()
        head, length, text = _HEAD.pack, _LEN.pack, self._value
        for rec in records:
            if tid is not None and rec.tid != tid:
                continue
            if isinstance(rec, Entry):
                out += head(0, _MARKS.get(rec.entered, 0), len(rec.args), rec.depth, rec.func,
                            rec.time)
                for v in rec.args:
                    t = text(v)
                    out += length(len(t))
                    out += t
            else:
                ret = rec.retval
                flags = (_UNWOUND if rec.unwound else 0) | (_AT_EXIT if rec.at_exit else 0)
                if ret is None:
                    out += head(1, flags, 0, rec.depth, rec.func, rec.duration)
                else:
                    t = text(ret)
                    out += head(1, flags | _RETVAL, 0, rec.depth, rec.func, rec.duration)
                    out += length(len(t))
                    out += t
        return bytes(out)

    def _value(self, v: object) -> bytes:
        texts = self.texts
        t = texts.get(v)
        if t is None:
            if len(texts) >= _TEXTS_KEPT:
                texts.clear()
            t = texts[v] = format_value(v, self.opts.word_bits).encode(  # type: ignore[arg-type]
                "utf-8", self.errors)
        return t

    # ------------------------------------------------------------ the output
    def _text(self, line: str) -> None:
        data = line.encode("utf-8", self.errors)
        self._check(self.lib.rt_text(self.state, data, len(data)))

    def _drain(self) -> None:
        lib, state = self.lib, self.state
        n = lib.rt_output_len(state)
        if n:
            self.out.write(memoryview((ctypes.c_char * n).from_address(lib.rt_output(state))))
            lib.rt_output_clear(state)

    def _check(self, status: int) -> None:
        if status in (_DONE, _FULL, _NAME):
            return
        self._drain()  # the lines made before it, as the reference writes them
        if status == -1:
            raise MemoryError("the text trace in C: out of memory")
        raise ValueError(f"the trace's records: {_FAILURES.get(status, status)}")


def _readable(layout: Layout) -> bool:
    """A layout replaytext.c reads: known kinds, widths of 1 to 64 bits, numbers of 1, 2, 4
    or 8 bytes, strings (size 0) only of the `char *` kinds."""
    return all(k in KIND_CODES and 1 <= b <= 64 and (s == 0) == (k in ("str", "buf"))
               and s in (0, 1, 2, 4, 8) for k, b, s in zip(*layout, strict=True))
