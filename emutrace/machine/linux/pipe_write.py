"""A write to a full pipe that blocks only the calling thread.

While the process has more than one thread, a write(2) to a blocking pipe or FIFO must
not wait on the host: the reader may be another thread of the same process, which runs
only when this one gives up the CPU.  The write goes in pieces of at most PIPE_BUF
bytes, each made only while the pipe is writable (poll(2) POLLOUT: fs/pipe.c pipe_poll
reports it while a buffer slot is free, and a free slot takes PIPE_BUF bytes, so the
host's write never waits).  When the pipe is full the thread waits for POLLOUT
(WouldBlock, threads.py) and the rest of the write is made when it runs again; the
guest sees one write(2) of the whole count, as Linux's pipe_write gives a blocking
writer.  A write of at most PIPE_BUF bytes stays atomic (pipe(7)): it goes in one piece.
The reader gone after a part was written: that part's count, and SIGPIPE (pipe_write)."""

from __future__ import annotations

import functools
import os
import select
import stat
from typing import TYPE_CHECKING

from emutrace.machine.linux.threads import WouldBlock

if TYPE_CHECKING:  # kernel.py imports this module
    from emutrace.machine.linux.kernel import LinuxKernel as K


def blocking_pipe(host_fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(host_fd).st_mode) and os.get_blocking(host_fd)
    except OSError:
        return False


def write_pipe(k: K, host_fd: int, data: bytes) -> int:
    """write(2) of `data` to a blocking pipe while other threads run."""
    return _write_from(k, host_fd, data, 0)


def _write_from(k: K, host_fd: int, data: bytes, done: int) -> int:
    poller = select.poll()
    poller.register(host_fd, select.POLLOUT)
    while done < len(data):
        ready = poller.poll(0)
        if not ready or not ready[0][1] & (select.POLLOUT | select.POLLERR):
            raise WouldBlock({host_fd: select.POLLOUT},
                             resume=functools.partial(_write_from, k, host_fd, data, done))
        try:
            done += os.write(host_fd, data[done:done + select.PIPE_BUF])
        except BrokenPipeError:
            if not done:
                raise  # EPIPE (and SIGPIPE: the kernel's OSError path)
            k.pipe_broken()
            return done
    return done
