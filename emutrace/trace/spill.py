"""A record sink that keeps `emutrace run`'s trace on disk, not in memory.

`run` prints its text trace when the image's run ends (a call's line needs its return), so
every record made until then must be kept.  In a list that grew with the trace: ~200 bytes
per record, ~1.5 GB for `fib 32`'s 7 M records.  `SpillSink` holds up to HELD records in
memory (a short trace never touches the disk) and then appends them, pickled in chunks of
CHUNK, to an anonymous temporary file (already unlinked: nothing is left behind by a crash
or a kill); reading it back yields the records in order, one chunk in memory at a time.  The
file holds only what this process pickled itself.  Where the file cannot be written (a full
disk, RLIMIT_FSIZE) the records stay in memory, as before.

A forked child (`run` follows a guest fork with a host fork) shares the file's descriptor
and offset with its parent: `for_child` gives the child a file of its own with the records
written before the fork.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from emutrace.trace.events import Record

CHUNK = 4096  # records pickled together (a chunk in memory: ~1 MB)
HELD = 4 * CHUNK  # records held in memory before they are written (~3 MB)


class SpillSink:
    def __init__(self, directory: str | None = None) -> None:
        self._file: BinaryIO = tempfile.TemporaryFile(dir=directory, buffering=0)  # noqa: SIM115
        self._chunks: list[tuple[int, int]] = []  # (offset, length) of each pickled chunk
        self._size = 0  # bytes written to the file
        self._held: list[Record] = []
        self.count = 0  # records written, held ones included
        self.tids: set[int] = set()  # the threads the records belong to
        self._writable = True  # False once a write failed: the records stay in memory

    def write(self, records: Iterable[Record]) -> None:
        for rec in records:
            self._held.append(rec)
            self.tids.add(rec.tid)
            self.count += 1
            if len(self._held) >= HELD and self._writable:
                self._spill()

    def close(self, exit_status: int = 0) -> None:
        pass  # the records are read after the run; the file goes with the object

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Record]:
        """Every record written, in order (the sink may be read more than once)."""
        fd = self._file.fileno()
        for offset, length in list(self._chunks):
            chunk: list[Record] = pickle.loads(_read(fd, offset, length))  # noqa: S301
            yield from chunk
        yield from list(self._held)

    def of_thread(self, tid: int) -> Iterator[Record]:
        return (rec for rec in self if rec.tid == tid)

    def for_child(self) -> None:
        """In a forked child: a file of its own holding what was spilled before the fork
        (read and written at explicit offsets: the offset it shares with the parent is
        left alone)."""
        fresh: BinaryIO = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115
        for offset, length in self._chunks:
            _write(fresh.fileno(), _read(self._file.fileno(), offset, length), offset)
        old, self._file = self._file, fresh
        old.close()

    def _spill(self) -> None:
        fd = self._file.fileno()
        while self._held:
            data = pickle.dumps(self._held[:CHUNK], protocol=pickle.HIGHEST_PROTOCOL)
            try:
                _write(fd, data, self._size)
            except OSError:  # what was written stays; a cut chunk lies beyond _size
                self._writable = False
                return
            self._chunks.append((self._size, len(data)))
            self._size += len(data)
            del self._held[:CHUNK]


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
