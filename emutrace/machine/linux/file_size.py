"""RLIMIT_FSIZE, as the guest set it (setrlimit(2): kept in LinuxKernel.rlimits), applied
to its writes and truncations of regular files: a write that would pass the limit is cut
at it; one that starts at or beyond it sends SIGXFSZ and fails with EFBIG
(mm/filemap.c generic_write_check_limits; fs/attr.c inode_newsize_ok for truncate).  The
limit is the guest's own, not applied to the emutrace process (whose trace files must
not be cut by it)."""

from __future__ import annotations

import fcntl
import os
import resource
import stat

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.sys_proc import _signal_self

K = LinuxKernel


def _limit(k: K) -> int | None:
    soft = k.rlimits.get(resource.RLIMIT_FSIZE, (None, None))[0]
    return soft


def _exceeded(k: K) -> GuestError:
    _signal_self(k, k.const("SIGXFSZ"))  # the default action ends the process here
    return GuestError("EFBIG")


def room(k: K, host_fd: int, size: int, offset: int | None) -> int:
    """How many of `size` bytes a write at `offset` (None: the file position, or the end
    with O_APPEND) may make; raises EFBIG (after SIGXFSZ) when none."""
    limit = _limit(k)
    if limit is None or not size:
        return size
    st = os.fstat(host_fd)
    if not stat.S_ISREG(st.st_mode):
        return size
    if offset is None:
        appends = fcntl.fcntl(host_fd, fcntl.F_GETFL) & os.O_APPEND
        offset = st.st_size if appends else os.lseek(host_fd, 0, os.SEEK_CUR)
    if offset >= limit:
        raise _exceeded(k)
    return min(size, limit - offset)


def check_length(k: K, length: int) -> None:
    """truncate/ftruncate to `length`: EFBIG and SIGXFSZ past the limit."""
    limit = _limit(k)
    if limit is not None and length > limit:
        raise _exceeded(k)
