"""The native record writer (`emutrace record` and `emutrace run` on the native engine): C
keeps the shadow stack's common case and writes the uftrace records itself
(emutrace/native/ufwrite.c), so a call or return the hot path finished never becomes a Python
object.  The records go to a `PackedSink`: `record`'s uftrace directory
(trace/uftrace_write.py UftraceDirSink) or `run`'s spill file (trace/spill.py SpillSink),
which reads them back into records when `run` prints its text trace.

Who owns what.  The Python reference (`trace/shadow.py` ShadowStack, `backends/tails.py`
TailRule, `trace/uftrace_write.py` UftraceDirSink) stays the owner of every event C does not
take (ufwrite.c says which: unwinding, unmatched returns, tail chains, signal and exception
frames, records deeper than uftrace keeps, a callee or return site C has no plan for).  The
two sides take turns, never run together: C runs inside emulation, Python in its callbacks.
So the exchange is:

* `pull` (at the start of every Python section, before Python looks at either stack or
  writes a record): C's record bytes are appended to the sink's main stream (in order: they
  precede every record Python writes next), and the frames C changed since the last exchange
  (its `low` marks) replace Python's from there on;
* `push` (at the end of every Python section): the frames Python changed (`WatchedList`
  lists record the lowest index touched) replace C's from there on, and C is enabled only
  while nothing unusual is open (no signal or exception frame, the recording still the
  directory the writer was made for: a forked child drops its records).

Plans (what a record's values are) are taught by Python: after it has written a call to a
function, or a return at a site, through the reference sink, it states the same layout for
C — the value words, their masks and sizes — when the values are integers, and whether the
record carries them at all (the sink's `plan_values`: for a uftrace directory
`UftraceDirSink._values`' rules, a name uftrace can match, the layout of the function's first
record; the spill file keeps every value, so it lets C write a function's values only in
the one layout it can read back).  The file bytes are therefore the reference's by
construction; tests/test_native_writer.py compares whole directories.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Protocol, TypeVar, cast

from emutrace.backends.tails import TailRule
from emutrace.backends.watched import WatchedList
from emutrace.trace.events import Call, Entry, Event, Exit, Record, Return, TailCall
from emutrace.trace.shadow import Frame, ShadowStack
from emutrace.trace.uftrace_args import spec_of, spec_size
from emutrace.trace.uftrace_write import RecordSink
from emutrace.trace.values import Value

_FRAME = struct.Struct("<5Q")  # ufwrite.c uw_frame: func, ret, sp, time, flags
_TAIL = struct.Struct("<3Q")  # uw_tail: code, ret, flags
_RET_KNOWN, _TAIL_FRAME, _CALLED = 1, 2, 4
_INTEGER_KINDS = frozenset(("auto", "int", "uint", "hex", "oct", "char", "uchar", "bool",
                            "ptr"))
_STRING_KINDS = frozenset(("str", "buf"))  # a `char *`: the hot path copies its string
# ufwrite.h's forms of a value: a number; a string as the sink's `string_form` says
_NUMBER = 0
_STRING_FORMS = {"text": 1, "copy": 2}
# ufwrite.h UW_DEEP_*: what the sink does with records deeper than uftrace's depth field
_DEEP_MODES = {"count": 1, "depth": 2}
_MASK64 = (1 << 64) - 1
T = TypeVar("T")
BUFFER_BYTES = 1 << 16  # C's record buffer (the sink flushes at the same size)

class PackedSink(Protocol):
    """A sink that takes C's record bytes (uftrace's record format, `pack_record`) as well
    as Python's records, and says per function how C may lay out its values.
    `string_form`: how its records hold a `char *` value — "text" (uftrace's `/s`, what
    `uftrace_args.pack_one` writes) or "copy" (the spill file's: the word and the copy).
    `deep_records`: what becomes of a record deeper than uftrace's depth field holds
    (MAX_STACK) — "count" (not written; an entry counted: `write_packed`'s not_recorded) or
    "depth" (written with its depth after it).  `any_thread`: it takes C's records of
    every guest thread (`write_packed`'s thread), not only the main thread's."""

    string_form: str
    deep_records: str
    any_thread: bool

    def write_packed(self, data: bytes, records: int, last_time: int,
                     not_recorded: int = 0, thread: int = 0) -> None: ...

    def plan_values(self, func: int, values: list[Value], retval: bool) -> bool | None:
        """C's records of `func` (its entries; with `retval` its exits) whose values are
        `values`, integers of these kinds and widths: True, written with the values; False,
        written without them; None, not C's (Python writes them)."""


def packed_sink_of(sink: object) -> PackedSink | None:
    """The sink C's writer can write to: `sink` itself, or the one a wrapper forwards to
    (cli/progress.py); None when the records go elsewhere (every event is Python's)."""
    for candidate in (sink, getattr(sink, "sink", None)):
        if callable(getattr(candidate, "write_packed", None)) \
                and callable(getattr(candidate, "plan_values", None)):
            return cast(PackedSink, candidate)
    return None


class NativeWriter:
    """C's writer for one run: `lib` the native library, `nt` the hot path's state (int3's
    hotpath.c); `attach` instead, for another hot path (step.c): hands C's writer state (or
    None, at the end) to it."""

    def __init__(self, lib: ctypes.CDLL, nt: int | None, shadow: ShadowStack, tails: TailRule,
                 sink_now: Callable[[], RecordSink], packed: PackedSink,
                 attach: Callable[[int | None], None] | None = None) -> None:
        self._lib = lib
        self._attach = attach if attach is not None else \
            (lambda u: lib.nt_set_writer(nt, u))
        self.shadow, self.tails = shadow, tails
        self._sink_now, self._wrapper, self.packed = sink_now, sink_now(), packed
        self._u = lib.uw_new(BUFFER_BYTES, tails.mask & _MASK64)
        if not self._u:
            raise MemoryError("native record writer: out of memory")
        self._watch(shadow)
        self._taught_calls: set[int] = set()
        self._taught_returns: set[tuple[int, int]] = set()  # (site, function)
        self.written: dict[int, int] = {}  # records C wrote, per thread (stats)
        self._on = False  # C may take events
        lib.uw_set_deep(self._u, _DEEP_MODES[packed.deep_records])
        self._attach(self._u)
        self.push()

    def _watch(self, shadow: ShadowStack) -> None:
        """The stacks C mirrors: shadow's frames and the tail rule's lists, watched; C's
        copies are replaced whole at the next push."""
        tails = self.tails
        self.shadow = shadow
        self._frames = _watched(shadow.frames)
        self._codes = _watched(tails.frames)
        self._rets = _watched(tails.return_addrs)
        shadow.frames, tails.frames, tails.return_addrs = (self._frames, self._codes,
                                                           self._rets)
        self._frames.low = self._codes.low = self._rets.low = 0
        self._c_lens = (-1, -1)

    def switch_thread(self, shadow: ShadowStack) -> None:
        """Another guest thread runs (after the backend swapped the tail rule's lists for
        its): its shadow stack and lists become the ones C mirrors, from the bottom."""
        self.pull()
        self._watch(shadow)
        self.push()

    # ------------------------------------------------------------ the exchange
    def pull(self) -> None:
        """C → Python: record bytes to the sink, changed frames to both stacks."""
        lib, u = self._lib, self._u
        n, deep = lib.uw_records(u), lib.uw_not_recorded(u)
        if n or deep:
            data = ctypes.string_at(lib.uw_bytes(u), lib.uw_bytes_len(u))
            last = int(lib.uw_last_time(u))
            lib.uw_bytes_clear(u)
            if self._sink_now() is self._wrapper:
                tid = self.shadow.tid
                self.written[tid] = self.written.get(tid, 0) + int(n)
                self.packed.write_packed(data, int(n), last, int(deep), tid)
        if not lib.uw_changed(u):
            return  # (Python may have changed them since: `push` hands that to C)
        assert self._frames.low >= len(self._frames) and self._codes.low >= len(self._codes) \
            and self._rets.low >= len(self._rets), "C and Python both changed a stack"
        count, low = int(lib.uw_frames_count(u)), int(lib.uw_frames_low(u))
        raw = ctypes.string_at(lib.uw_frames(u) + low * _FRAME.size,
                               (count - low) * _FRAME.size)
        self._frames.replace_from(low, (
            Frame(func, ret if flags & _RET_KNOWN else None, sp, time,
                  tail=bool(flags & _TAIL_FRAME), called=bool(flags & _CALLED))
            for func, ret, sp, time, flags in _FRAME.iter_unpack(raw)))
        count, low = int(lib.uw_tails_count(u)), int(lib.uw_tails_low(u))
        raw = ctypes.string_at(lib.uw_tails(u) + low * _TAIL.size, (count - low) * _TAIL.size)
        rows = list(_TAIL.iter_unpack(raw))
        self._codes.replace_from(low, (code for code, _r, _f in rows))
        self._rets.replace_from(low, (ret if flags & _RET_KNOWN else None
                                      for _c, ret, flags in rows))
        lib.uw_clean(u)
        self._c_lens = (len(self._frames), len(self._codes))

    def push(self) -> None:
        """Python → C: the frames Python changed; whether C may take events now."""
        lib, u = self._lib, self._u
        if lib.uw_changed(u):  # (every Python section starts with a pull: never so far)
            self.pull()
        frames = self._frames
        if frames.low < len(frames) or self._c_lens[0] != len(frames):
            low = frames.low
            data = b"".join(_FRAME.pack(
                f.func & _MASK64, (f.return_addr or 0) & _MASK64, f.sp & _MASK64,
                f.entry_time, (_RET_KNOWN if f.return_addr is not None else 0)
                | (_TAIL_FRAME if f.tail else 0) | (_CALLED if f.called else 0))
                for f in frames[low:])
            if lib.uw_frames_set(u, low, data, len(frames) - low) != 0:
                raise MemoryError("native record writer: out of memory")
            frames.clean()
        codes, rets = self._codes, self._rets
        low = min(codes.low, rets.low)
        if low < len(codes) or self._c_lens[1] != len(codes):
            data = b"".join(_TAIL.pack(c & _MASK64, (r or 0) & _MASK64,
                                       _RET_KNOWN if r is not None else 0)
                            for c, r in zip(codes[low:], rets[low:], strict=True))
            if lib.uw_tails_set(u, low, data, len(codes) - low) != 0:
                raise MemoryError("native record writer: out of memory")
            codes.clean()
            rets.clean()
        self._c_lens = (len(frames), len(codes))
        on = (self.shadow.grows_down and not self.shadow.exceptions
              and (self.shadow.tid == 0 or self.packed.any_thread)
              and self._sink_now() is self._wrapper)
        if on != self._on:
            lib.uw_set_enabled(u, int(on))
            self._on = on

    # ------------------------------------------------------------ events Python writes
    def emit(self, ev: Event) -> list[Record]:
        """The tracer's emit (shadow stack, then the sink), returning the records."""
        out = self.shadow.feed(ev)
        self._sink_now().write(out)
        return out

    def teach_call(self, ev: Call | TailCall, words: list[tuple[int, object]] | None,
                   out: list[Record]) -> None:
        """After Python wrote ev (a call or tail call C finished): the callee's entry layout
        for C.  words: per argument its index in C's snapshot and type (None: not integer
        words)."""
        if ev.target in self._taught_calls or words is None or not out \
                or not isinstance(out[-1], Entry) or out[-1].func != ev.target:
            return
        values = ev.args
        if len(values) != len(words) or not all(_c_writes(v) for v in values):
            return
        vals = [v for v in values if isinstance(v, Value)]
        payload = self.packed.plan_values(ev.target, vals, retval=False)
        if payload is None:
            return  # the sink keeps no plan for it (yet): Python writes every such call
        n = len(vals)
        regs = (ctypes.c_uint8 * max(n, 1))(*[i for i, _t in words])
        sizes = (ctypes.c_uint8 * max(n, 1))(*[self._size(v) for v in vals])
        bits = (ctypes.c_uint32 * max(n, 1))(*[v.bits for v in vals])
        forms = (ctypes.c_uint8 * max(n, 1))(*[self._form(v) for v in vals])
        self._taught_calls.add(ev.target)
        if self._lib.uw_callee_plan(self._u, ev.target, int(payload), n, regs, sizes,
                                    bits, forms) != 0:
            raise MemoryError("native record writer: out of memory")

    def _form(self, v: Value) -> int:
        return _STRING_FORMS[self.packed.string_form] if v.kind in _STRING_KINDS else _NUMBER

    @staticmethod
    def _size(v: Value) -> int:
        """A number's bytes in the record (a string's are its own: 0)."""
        return 0 if v.kind in _STRING_KINDS else spec_size(spec_of(v))

    def teach_return(self, ev: Return, integer: bool, out: list[Record]) -> None:
        """After Python wrote ev (a return C finished): the site's exit layout for C when it
        closes the same functions' frames (the top one; with a tail chain, those below it
        too: one exit each, the same value).  integer: the value (if any) is one integer word
        in C's snapshot."""
        if not integer or not out or not all(isinstance(r, Exit) and not r.unwound
                                             for r in out):
            return
        v = ev.retval
        n, size, bits, form = 0, 0, 0, _NUMBER
        if v is not None:
            if not _c_writes(v):
                return
            assert isinstance(v, Value)
            n, size, bits, form = 1, self._size(v), v.bits, self._form(v)
        for rec in out:
            key = (ev.site_addr, rec.func)
            if key in self._taught_returns:
                continue
            payload = self.packed.plan_values(rec.func, [v] if v is not None else [],
                                                retval=True)
            if payload is None:
                continue  # no plan for this function's exit (yet): Python writes it
            self._taught_returns.add(key)
            if self._lib.uw_return_plan(self._u, ev.site_addr, rec.func, int(payload), n,
                                        size, bits, form) != 0:
                raise MemoryError("native record writer: out of memory")

    def close(self) -> None:
        """(After the last pull.)  C's writer goes; the stacks stay Python's."""
        if self._u:
            self._attach(None)
            self._lib.uw_free(self._u)
            self._u = None


def _watched(items: list[T]) -> WatchedList[T]:
    """items as a WatchedList (itself, when it is one: a thread's lists come back)."""
    return items if isinstance(items, WatchedList) else WatchedList(items)


def _c_writes(v: object) -> bool:
    """Can C's writer write this value from its word (and, for a `char *`, the copy the hot
    path makes at the event: hotpath.c writer_strings)?"""
    return isinstance(v, Value) and v.bits <= 64 and (v.kind in _INTEGER_KINDS
                                                      or v.kind in _STRING_KINDS)
