"""What discovery reads from a program file, kept for the next run of the same file in
this Python process.

The tests and `bench` trace one binary with several backends in one process; each run
would read the symbol table, the DWARF prototypes and decode the same functions again
(about a second per run, and `entry` decodes all of static glibc up front).  All of it is
a pure function of the file's bytes and the load bias, so it is kept per (real path,
inode, size, mtime, bias) for the last few files.  Only results that are the same
whatever the run learnt are kept: instructions, symbol tables, functions read from a
symbol (never those found by descent, which depends on the entries seen so far).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

FILES_KEPT = 2  # the last files used, per kind of result (a static glibc: ~10-60 MB)

_memo: dict[str, OrderedDict[tuple[Any, ...], Any]] = {}


def file_key(path: str, bias: int = 0) -> tuple[Any, ...] | None:
    """The identity of the file's current bytes as loaded at bias; None if unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns, bias)


def kept(kind: str, key: tuple[Any, ...] | None, make: Callable[[], T]) -> T:
    """make()'s result for (kind, key), made once while the file stays among the last
    FILES_KEPT of that kind; key None: made every time."""
    if key is None:
        return make()
    table = _memo.setdefault(kind, OrderedDict())
    if key in table:
        table.move_to_end(key)
        return table[key]  # type: ignore[no-any-return]
    value = make()
    table[key] = value
    while len(table) > FILES_KEPT:
        table.popitem(last=False)
    return value


def forget(kind: str, key: tuple[Any, ...] | None) -> None:
    if key is not None and kind in _memo:
        _memo[kind].pop(key, None)
