"""`--syscalls` (run, record, live): the guest's system calls as events of its trace, told by
the Linux layer (`LinuxKernel.syscall_listeners`) and timed by the tracer's clock
(trace/syscall_events.py has their form).  `run` keeps each image's events and merges them
into its text trace; `record` appends each to the directory's `extern.dat` as it is made
(uftrace's external data: its replay and dump show them, and so does emutrace's replay).

Why `--syscalls`: strace's view of a run under emutrace's own option style (a long option
that says what it adds); uftrace's `-E`/`--event` names kernel and SDT events it reads
through perf and tracefs, which an emulated guest has not, and `-e` is strace's filter."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from emutrace.errors import OutputError
from emutrace.session import Process
from emutrace.trace.syscall_events import (
    EXTERN_FILE,
    SyscallEvent,
    extern_line,
    shown_args,
)

MAX_ERRNO = 4095  # results in [-4095, -1] are -errno (include/linux/err.h)


def add_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--syscalls", action="store_true",
                   help="show the guest's system calls in the trace, as calls of "
                        "linux:NAME(arguments) = result that take no time (strace's view; "
                        "record keeps them in DIR/extern.dat, uftrace's external data)")


def listen(process: Process, keep: Callable[[SyscallEvent], None]) -> None:
    """Each system call `process` makes from now on, as an event handed to `keep`."""
    kernel = process.kernel
    errno_names = kernel.abi.errno_names
    bits = 8 * kernel.word

    def made(name: str, args: tuple[int, ...], result: int | None) -> None:
        backend = process.tracer.backend
        error = ""
        if result is not None and -MAX_ERRNO <= result < 0:
            error = errno_names.get(-result, str(-result))
        keep(SyscallEvent(int(getattr(backend, "time", 0)), process.tracer.shadow.tid,
                          name, shown_args(name, args), result, error, bits))

    kernel.syscall_listeners.append(made)


def forget(process: Process) -> None:
    """No more events from `process` (a forked child that runs untraced)."""
    process.kernel.syscall_listeners.clear()


class ExternFile:
    """A recording's `extern.dat`, one line appended per event with a single write (a forked
    child that went on writing could not duplicate a buffer of its parent's)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, EXTERN_FILE)
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC
                              | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise OutputError(f"{self.path}: cannot write ({e.strerror})") from None

    def keep(self, event: SyscallEvent) -> None:
        data = extern_line(event).encode()
        try:
            if os.write(self.fd, data) != len(data):
                raise OSError(0, "short write")
        except OSError as e:
            raise OutputError(f"{self.path}: cannot write ({e.strerror or e})") from None

    def close(self) -> None:
        os.close(self.fd)
