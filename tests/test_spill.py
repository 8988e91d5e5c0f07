"""trace/spill.py: `run`'s records kept in a temporary file.  What comes back is what went
in, in order, over several chunks and more than one read; a threaded trace prints as the
list of the same records prints; a forked child keeps the records from before the fork and
its parent's later ones stay out of it (and the other way round).  C's records (packed as
uftrace records by the writer, whose Python reference packs them here) come back as the
records they were made of, between Python's."""

from __future__ import annotations

import os
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emutrace.trace import spill
from emutrace.trace.events import Entry, Exit, Record, row_of
from emutrace.trace.format import ReplayOptions, iter_replay_lines
from emutrace.trace.spill import SpillSink
from emutrace.trace.uftrace_args import pack_values, spec_of
from emutrace.trace.uftrace_write import pack_record
from emutrace.trace.values import Value, render


def calls(n: int, tid: int = 0, base: int = 0) -> list[Record]:
    out: list[Record] = []
    for i in range(n):
        out.append(Entry(base + 2 * i, 0, 0x1000 + i % 7, (i, -i), tid))
        out.append(Exit(base + 2 * i + 1, 0, 0x1000 + i % 7, i * 3, 1, tid=tid))
    return out


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill, "CHUNK", 5)
    monkeypatch.setattr(spill, "HELD", 11)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=23), max_size=8))
def test_records_come_back_in_order(batches: list[int]) -> None:
    sink, want = SpillSink(), []
    for i, n in enumerate(batches):
        batch = calls(n, base=1000 * i)
        sink.write(batch)
        want += batch
    assert len(sink) == len(want)
    assert list(sink) == want
    assert list(sink) == want  # read again
    sink.write(calls(3, base=99_000))
    assert list(sink) == want + calls(3, base=99_000)


def test_a_threaded_trace_prints_as_its_list() -> None:
    records = [r for pair in zip(calls(9, 0), calls(9, 2), strict=True) for r in pair]
    records += calls(4, 1, base=500)
    sink = SpillSink()
    sink.write(records)
    opts = ReplayOptions(start=None)
    want = list(iter_replay_lines(records, hex, opts))
    assert "# thread 2" in want
    assert list(iter_replay_lines(sink, hex, opts)) == want


def test_a_forked_child_has_its_own_file() -> None:
    sink = SpillSink()
    sink.write(calls(12))
    before = list(sink)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own file, then records of its own
        try:
            sink.for_child()
            sink.write(calls(6, base=7000))
            os.write(write, pickle.dumps(list(sink)))
        finally:
            os._exit(0)
    sink.write(calls(8, base=3000))  # the parent's, meanwhile
    os.close(write)
    with os.fdopen(read, "rb") as got:
        child = pickle.loads(got.read())
    os.waitpid(pid, 0)
    assert child == before + calls(6, base=7000)
    assert list(sink) == before + calls(8, base=3000)


def test_records_stay_in_memory_when_the_file_cannot_grow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk or RLIMIT_FSIZE: the first chunk is written, the second fails; every
    record still comes back, in order."""
    real, calls_made = spill._write, []

    def failing(fd: int, data: bytes, offset: int) -> None:
        calls_made.append(offset)
        if len(calls_made) > 1:
            raise OSError(27, "File too large")
        real(fd, data, offset)

    monkeypatch.setattr(spill, "_write", failing)
    sink = SpillSink()
    sink.write(calls(40))
    assert len(calls_made) == 2
    assert list(sink) == calls(40)


def packed(records: list[Record], sink: SpillSink) -> bytes:
    """The bytes C's writer makes of these records (its Python reference: uftrace_write's
    pack_record and pack_values), each function's values laid out as the sink accepted."""
    out = b""
    for rec in records:
        values = rec.args if isinstance(rec, Entry) else \
            (() if rec.retval is None else (rec.retval,))
        vals = [v for v in values if isinstance(v, Value)]
        assert sink.plan_values(rec.func, vals, retval=isinstance(rec, Exit)) is not None
        data = pack_values(vals, [spec_of(v) for v in vals]) if vals else b""
        out += pack_record(rec, bool(data)) + data
    return out


def nested(base: int, depth: int) -> list[Record]:
    """Calls nested `depth` deep at base, each with an int argument and an auto return."""
    entries = [Entry(base + k, k, 0x2000 + 16 * k, (Value("int", 32, k + 2 ** 31),))
               for k in range(depth)]
    exits = [Exit(base + 100 - k, k, 0x2000 + 16 * k, Value("auto", 64, 7 * k),
                  100 - 2 * k) for k in reversed(range(depth))]
    return [*entries, *exits]


def test_packed_records_come_back_between_pythons(monkeypatch: pytest.MonkeyPatch) -> None:
    """C's packed records (trace/spill.py write_packed) read back as the records they were
    made of, in order with Python's (an exit's duration from its entry, which Python may
    have written), through the file too; `rows` is the same as the formatter reads it."""
    monkeypatch.setattr(spill, "HELD_BYTES", 100)
    sink = SpillSink()
    want: list[Record] = []
    for i in range(6):
        outer = Entry(1000 * i, 0, 0x1000, (i,))  # Python's entry, C's calls inside it
        inner = nested(1000 * i + 1, 3)
        shifted = [Entry(r.time, r.depth + 1, r.func, r.args) if isinstance(r, Entry) else
                   Exit(r.time, r.depth + 1, r.func, r.retval, r.duration) for r in inner]
        last = Exit(1000 * i + 500, 0, 0x1000, None, 500, unwound=True)
        sink.write([outer])
        sink.write_packed(packed(shifted, sink), len(shifted), shifted[-1].time)
        sink.write([last])
        want += [outer, *shifted, last]
    assert len(sink) == len(want)
    assert list(sink) == want
    assert list(sink) == want  # read again
    assert list(sink.rows()) == [row_of(r) if isinstance(r, Entry) and not r.args
                                 or isinstance(r, Exit) and r.retval is None
                                 or r.func == 0x1000 else _rendered(row_of(r))
                                 for r in want]
    opts = ReplayOptions(start=None)
    assert list(iter_replay_lines(sink, hex, opts)) == list(iter_replay_lines(want, hex, opts))


def _rendered(row: tuple) -> tuple:
    if row[0]:
        return (*row[:2], render(row[2]), *row[3:])
    return (*row[:2], tuple(render(v) for v in row[2]), *row[3:])


def test_a_second_layout_stays_pythons() -> None:
    """The spill file keeps every value: C may write a function's values in one layout only
    (the first it is asked for); beyond 48 address bits nothing is C's."""
    sink = SpillSink()
    first = [Value("int", 32, 1)]
    assert sink.plan_values(0x1000, first, retval=False) is True
    assert sink.plan_values(0x1000, [Value("int", 32, 9)], retval=False) is True
    assert sink.plan_values(0x1000, [Value("uint", 32, 1)], retval=False) is None
    assert sink.plan_values(0x1000, [Value("int", 16, 1)], retval=False) is None
    assert sink.plan_values(0x1000, [Value("auto", 64, 1)], retval=True) is True
    assert sink.plan_values(0x1000, [], retval=False) is False
    assert sink.plan_values(1 << 48, first, retval=False) is None


def test_packed_strings_and_deep_records_come_back() -> None:
    """The spill file's own forms, as ufwrite.c writes them for this sink: a `char *` value
    as its word and the bytes copied (`pack_layout`/`pack_copy`: a text with bytes above
    0x7f; NULL and an unreadable pointer, no text: shown as their word), and a record deeper
    than uftrace's 10-bit depth field with magic 6 and its depth in the u64 after it.  They
    read back as the records made of them, and print as those records print."""
    sink = SpillSink()
    strs = [Value("str", 64, 0x5000, "caf\xe9 \"x\""), Value("str", 64, 0, None),
            Value("str", 64, 0xDEAD, None)]
    want: list[Record] = []
    data = b""
    for k, text in enumerate(strs):
        args = (Value("int", 32, k), text)
        assert sink.plan_values(0x2000, list(args), retval=False) is True
        depth = 1023 + k  # 1023 fits the field; 1024 and 1025 do not
        entry = Entry(10 * k, depth, 0x2000, args)
        header = pack_record(entry, True)
        if depth >= 1024:  # magic 5 -> 6, then the depth
            word = int.from_bytes(header[8:], "little") & ~(7 << 3) | (6 << 3)
            header = header[:8] + word.to_bytes(8, "little") + depth.to_bytes(8, "little")
        data += header + spill.pack_layout(list(args), sink._args[0x2000])
        want.append(entry)
    sink.write_packed(data, len(want), want[-1].time)
    assert list(sink) == want
    opts = ReplayOptions(start=None)
    lines = list(iter_replay_lines(sink, hex, opts))
    assert lines == list(iter_replay_lines(want, hex, opts))
    text = "\n".join(lines)
    assert '(0, "caf\\xe9 \\"x\\"")' in text and "(1, 0)" in text and "(2, 0xdead)" in text
