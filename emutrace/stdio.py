"""emutrace started with a standard descriptor closed (from cron, a CI runner, `<&-`).

Descriptors 0, 1 and 2 that are closed at start are held open on /dev/null at once, before
emutrace opens anything: otherwise the first file emutrace opens (a trace, a spill file, a
recording) would take the number, and a guest handed "its standard output" would write into
emutrace's own file.  The guest still gets them closed, as Linux passes them on (the Linux
layer's descriptor table leaves them out; a native child closes them before execve)."""

from __future__ import annotations

import os
import sys

STANDARD = (0, 1, 2)
CLOSED: frozenset[int] = frozenset()  # the standard descriptors closed when emutrace started


def hold_closed() -> None:
    """Put /dev/null on every closed standard descriptor and remember which they were;
    Python's own sys.stdin/stdout/stderr (None when closed at start) write there."""
    global CLOSED
    closed = []
    for number in STANDARD:
        try:
            os.fstat(number)
        except OSError:
            held = os.open(os.devnull, os.O_RDWR)
            if held != number:
                os.dup2(held, number)
                os.close(held)
            closed.append(number)
    CLOSED = frozenset(closed)
    for number, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if number in CLOSED and getattr(sys, name) is None:
            setattr(sys, name, open(number, mode, closefd=False))  # noqa: SIM115 - for life


def close_for_guest() -> None:
    """In a native child before execve: the standard descriptors emutrace found closed."""
    for number in CLOSED:
        os.close(number)
