"""Opening the files of a data directory as untrusted input (pure: no emulator).  A data
directory may come from anywhere, so every file in it is opened the same careful way:

* the last path component must not be a symbolic link (`O_NOFOLLOW`: a link to /dev/zero
  or to a file elsewhere is refused, not followed);
* the open must not block (`O_NONBLOCK`: a FIFO in place of a file would wait for a writer
  forever); once open, anything that is not a regular file (FIFO, device, socket,
  directory) is refused;
* a file read whole must be no larger than the cap of its kind (`CAPS`), checked on the
  open file's size and again while reading (a file growing under us cannot get past it);
  the caps are far above what a real recording holds and bound the memory the reader uses;
* the `.dat` files are streamed (`open_stream`): they grow with the recording, never whole
  in memory, so they have no cap.

Every refusal is one `EmutraceError` naming the file, exit 65 (EX_DATAERR); a file that is
absent is `None` to the caller, which knows whether that is allowed.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from emutrace.errors import EXIT_BAD_ELF, EmutraceError
from emutrace.trace.uftrace_names import printable

MIB = 1 << 20
# the most bytes read whole from a file of each kind; `.sym` files count together (a
# dynamic program has one per library).  (`task.txt` is for uftrace: no viewer reads it.)
CAPS = {
    "info": 4 * MIB,  # header, command line, argument specs (one line per traced function)
    "emutrace.txt": 4 * MIB,  # the ISA and the value kinds (as long as the specs)
    "map": 4 * MIB,  # one line per module; /proc/PID/maps of a big program is < 1 MiB
    "sym": 64 * MIB,  # one line per function: about a million functions
    "extern": 256 * MIB,  # `--syscalls`: one line per system call (extern.dat)
}
LINE_CAP = 4096  # the longest line of a streamed text file (emutrace-exits.txt)


def bad_file(path: str, problem: str) -> EmutraceError:
    """The one-line refusal of a damaged file of a recording (exit 65), control characters
    (from the path, or from a name quoted out of the file) escaped."""
    return EmutraceError(printable(f"{path}: {problem}"), EXIT_BAD_ELF)


def _open_regular(path: str) -> int | None:
    """A descriptor of `path` if it is a regular file; None if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise bad_file(path, "a symbolic link, not a file (not followed)") from None
        raise bad_file(path, f"cannot be opened ({e.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise bad_file(path, f"not a regular file ({_kind(mode)})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def read_capped(path: str, kind: str, budget: list[int] | None = None) -> bytes | None:
    """The whole of `path` (a file of `kind`, a key of CAPS), or None if it is absent.
    `budget`: one-element list of the bytes left for this kind across several files
    (the `.sym` files of one recording share one cap); it is lowered by what was read."""
    fd = _open_regular(path)
    if fd is None:
        return None
    cap = CAPS[kind] if budget is None else budget[0]
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > cap:
            raise _too_big(path, kind, budget)
        data = f.read(cap + 1)
    if len(data) > cap:
        raise _too_big(path, kind, budget)
    if budget is not None:
        budget[0] -= len(data)
    return data


def _too_big(path: str, kind: str, budget: list[int] | None) -> EmutraceError:
    together = f" ({kind} files together)" if budget is not None else ""
    return bad_file(path, f"larger than the {CAPS[kind] // MIB} MiB a {kind} file may "
                          f"hold{together}")


def read_text(path: str, kind: str, budget: list[int] | None = None) -> str | None:
    """`read_capped` as text: UTF-8, a byte that is not UTF-8 kept as the text `\\xNN` (a
    name with such a byte is shown that way, as `printable` shows a control character)."""
    data = read_capped(path, kind, budget)
    return None if data is None else data.decode(errors="backslashreplace")


def open_stream(path: str) -> BinaryIO | None:
    """`path` opened for streaming (a `.dat` file, the exits file), None if absent."""
    fd = _open_regular(path)
    return None if fd is None else os.fdopen(fd, "rb")


def file_size(path: str) -> int:
    """The size of a file already opened once through this module (0 if it vanished)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0
