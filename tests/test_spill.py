"""trace/spill.py: `run`'s records kept in a temporary file.  What comes back is what went
in, in order, over several chunks and more than one read; a threaded trace prints as the
list of the same records prints; a forked child keeps the records from before the fork and
its parent's later ones stay out of it (and the other way round)."""

from __future__ import annotations

import os
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emutrace.trace import spill
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.format import ReplayOptions, iter_replay_lines
from emutrace.trace.spill import SpillSink


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
