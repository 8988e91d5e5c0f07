"""A forked child: followed by `record` into the parent's data directory
(`recorded_from_here`), or not followed (`run`/`record --no-follow-forks`): it runs on
untraced, not traced into nothing (`untraced_from_here`)."""

from __future__ import annotations

from emutrace.session import Process
from emutrace.trace.uftrace_write import DroppingSink, UftraceDirSink


def untraced_from_here(process: Process) -> None:
    """From this point of the child (its fork returning 0), `process` runs untraced: the
    backend detached (no breakpoint left in its code, no hook of the mechanism's left to
    run: backends.Backend.detach), no signal-handler frame or system call reported, and
    what was recorded before the fork, the parent's, is not the child's to write (its
    records are dropped).
    The images it execve()s run without a backend (`trace_execs`, the caller's)."""
    process.sink = DroppingSink()
    backend = process.tracer.backend
    if backend is not None:
        backend.detach()
    process.kernel.on_handler_entered = None
    process.kernel.on_handler_returned = None
    process.kernel.syscall_listeners.clear()  # (--syscalls: the child's are not shown)


def recorded_from_here(process: Process, pid: int) -> None:
    """From this point of the child (its fork returning 0), its records go to the data
    directory its parent records into, as the task `pid` (trace/uftrace_write.py
    `UftraceDirSink.forked`): uftrace's recording of a forking program."""
    sink = process.sink
    directory = getattr(sink, "sink", sink)  # (behind cli/progress.py's status line)
    if isinstance(directory, UftraceDirSink):
        directory.forked(pid, directory.last_time, process.tracer.shadow.tid)
