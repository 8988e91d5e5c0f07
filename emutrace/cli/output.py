"""emutrace's own output: the trace file (`-o FILE`), opened before the guest runs, and the
trace written to stderr — both through `whole_writes`, where every write is whole or an
OSError: Python's buffered writer takes a short write (a file reaching RLIMIT_FSIZE, a full
disk) as success and drops the rest, which cut traces at a 64 KiB boundary without a word."""

from __future__ import annotations

import io
import os
from typing import Any, TextIO

from emutrace.errors import UsageError

BUFFER = 1 << 16


class WholeWrites(io.RawIOBase):
    """A descriptor whose writes are whole or raise (os.write again after a short one,
    which then reports the error); closing it closes the descriptor only when `owned`."""

    def __init__(self, fd: int, owned: bool) -> None:
        super().__init__()
        self.fd, self.owned = fd, owned

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data: Any) -> int:  # (a buffer: bytes, bytearray, memoryview)
        with memoryview(data) as view, view.cast("B") as flat:
            done = 0
            while done < len(flat):
                done += os.write(self.fd, flat[done:])
            return done

    def close(self) -> None:
        if not self.closed and self.owned:
            os.close(self.fd)
        super().close()


def whole_writes(fd: int, owned: bool, encoding: str = "utf-8",
                 errors: str = "strict") -> TextIO:
    """A text stream on `fd` whose writes are whole or an OSError (module docstring)."""
    return io.TextIOWrapper(io.BufferedWriter(WholeWrites(fd, owned), BUFFER),
                            encoding=encoding, errors=errors)


OUTPUT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def open_output(path: str) -> TextIO:
    """Open emutrace's own output file for writing, before the program runs: not through a
    symlink in its last component (O_NOFOLLOW), never a directory; any failure is a usage
    error naming the file."""
    try:
        fd = os.open(path, OUTPUT_FLAGS, 0o644)
    except OSError as e:
        raise UsageError(f"-o {path}: {e.strerror or e}") from None
    return whole_writes(fd, owned=True)


class OutputPlace:
    """Where `-o FILE` and the traces that follow it (a forked child's FILE.<pid>, an
    execve'd image's FILE.exec) are written: FILE's directory is opened once, before the
    guest runs, and every later file is created in that directory by descriptor
    (openat, O_NOFOLLOW), never looked up by path again, so a guest that swaps the
    directory or a path component for a symlink cannot redirect emutrace's files."""

    def __init__(self, path: str) -> None:
        directory, self.name = os.path.split(path)
        try:
            self.dir_fd = os.open(directory or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise UsageError(f"-o {path}: {e.strerror or e}") from None
        self.path = path

    def open(self, path: str) -> TextIO:
        """`path` (FILE and a suffix: FILE.exec, FILE.1234), created or truncated in FILE's
        directory."""
        assert path.startswith(self.path), path
        fd = os.open(self.name + path[len(self.path):], OUTPUT_FLAGS, 0o644,
                     dir_fd=self.dir_fd)
        return whole_writes(fd, owned=True)
