"""emutrace's own output file (`-o FILE`), opened before the guest runs."""

from __future__ import annotations

import os
from typing import TextIO

from emutrace.errors import UsageError


def open_output(path: str) -> TextIO:
    """Open emutrace's own output file for writing, before the program runs: not through a
    symlink in its last component (O_NOFOLLOW), never a directory; any failure is a usage
    error naming the file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        raise UsageError(f"-o {path}: {e.strerror or e}") from None
    return os.fdopen(fd, "w")
