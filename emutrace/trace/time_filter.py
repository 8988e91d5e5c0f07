"""uftrace's time filter (`uftrace replay -t TIME`, `emutrace replay -t N`) as a stream
transformation: every record comes out tagged with whether its frame ran at least N
timestamp units (guest instructions).  A frame shorter than N is hidden with everything it
called (a callee never runs longer than its caller, so a hidden frame's subtree is hidden
too); uftrace 0.13 shows a frame whose duration equals N.

Streaming with bounded memory: a record is held back only while some frame that encloses it
is still undecided, i.e. has been open for fewer than N units and has not exited.  So at
most the records of N instructions are held, whatever the recording's length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from emutrace.trace.events import Entry, Record


@dataclass(slots=True)
class _Held:
    record: Record
    keep: bool | None  # None: its frame is still undecided


@dataclass(slots=True)
class _Open:
    start: int
    entry: _Held | None  # the held entry while the frame is undecided


def time_tagged(records: Iterable[Record], threshold: int | None
                ) -> Iterator[tuple[Record, bool]]:
    """(record, shown) in the records' order; `threshold` None or <= 0 shows every frame."""
    if threshold is None or threshold <= 0:
        for rec in records:
            yield rec, True
        return
    held: deque[_Held] = deque()
    stack: list[_Open] = []
    undecided = 0  # stack[undecided:] are the frames not yet known to be shown
    for rec in records:
        # frames open for N units are shown; outer frames opened earlier, so the undecided
        # ones are always the innermost
        while undecided < len(stack) and rec.time - stack[undecided].start >= threshold:
            entry = stack[undecided].entry
            if entry is not None:
                entry.keep = True
                stack[undecided].entry = None
            undecided += 1
        if isinstance(rec, Entry):
            item = _Held(rec, None)
            held.append(item)
            stack.append(_Open(rec.time, item))
        else:
            frame = stack.pop() if stack else None
            undecided = min(undecided, len(stack))
            if frame is None or frame.entry is None:
                keep = True  # decided earlier (or an exit without entry: the reader's error)
            else:
                keep = rec.duration >= threshold
                frame.entry.keep = keep
            held.append(_Held(rec, keep))
        while held and held[0].keep is not None:
            first = held.popleft()
            yield first.record, bool(first.keep)
    for item in held:  # only when the records ended with frames open
        yield item.record, True

