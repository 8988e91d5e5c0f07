"""System calls as events of the trace (`run --syscalls`, `record --syscalls`; pure).

Each system call the guest makes is one `SyscallEvent`: its name, its arguments as the
registers held them, its result (or the errno's name).  In a call graph it is shown as a
call of `linux:<name>` that takes no time, at the depth where the program made it, with
its arguments and its result as values — `linux:write(1, 0x4a8f90, 11) = 11;` — as uftrace
names the kernel's events (`linux:schedule`).  A recording keeps them in `extern.dat`,
uftrace's external data (utils/extern.c: one `SECONDS.NANOSECONDS MESSAGE` line each), which
uftrace's replay and dump show in time order (`/* external-data: linux:write(...) = 11 */`)
and emutrace's replay turns back into those calls.  Times are guest instructions, as the
records' are."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.recording_files import read_text
from emutrace.trace.values import Value, format_auto

PREFIX = "linux:"
EXTERN_FILE = "extern.dat"  # uftrace's default external data file in a data directory
# the pseudo-function addresses of the calls in a merged stream: outside every address
# space (above 2^64), one per event, named by `named`
PSEUDO_BASE = 1 << 64

# arguments of the common calls (the kernel's SYSCALL_DEFINEn); others show six
ARITY = {
    "read": 3, "write": 3, "open": 3, "openat": 4, "close": 1, "stat": 2, "fstat": 2,
    "lstat": 2, "newfstatat": 4, "fstatat64": 4, "statx": 5, "poll": 3, "lseek": 3,
    "_llseek": 5, "mmap": 6, "mmap2": 6, "mprotect": 3, "munmap": 2, "brk": 1,
    "rt_sigaction": 4, "rt_sigprocmask": 4, "rt_sigreturn": 0, "ioctl": 3, "pread64": 4,
    "pwrite64": 4, "readv": 3, "writev": 3, "access": 2, "faccessat": 3, "faccessat2": 4,
    "pipe": 1, "pipe2": 2, "dup": 1, "dup2": 2, "dup3": 3, "getpid": 0, "getppid": 0,
    "gettid": 0, "getuid": 0, "geteuid": 0, "getgid": 0, "getegid": 0, "getuid32": 0,
    "geteuid32": 0, "getgid32": 0, "getegid32": 0, "clone": 5, "fork": 0, "vfork": 0,
    "clone3": 2, "execve": 3, "exit": 1, "exit_group": 1, "wait4": 4, "kill": 2, "uname": 1,
    "fcntl": 3, "fcntl64": 3, "getcwd": 2, "chdir": 1, "readlink": 3, "readlinkat": 4,
    "getdents64": 3, "arch_prctl": 2, "set_tid_address": 1, "set_robust_list": 2,
    "rseq": 4, "prlimit64": 4, "getrandom": 3, "clock_gettime": 2, "clock_gettime64": 2,
    "gettimeofday": 2, "nanosleep": 2, "clock_nanosleep": 4, "futex": 6, "sysinfo": 1,
    "getrlimit": 2, "ugetrlimit": 2, "sched_yield": 0, "madvise": 3, "mremap": 5,
    "set_thread_area": 1, "unlink": 1, "unlinkat": 3, "mkdir": 2, "mkdirat": 3,
    "rename": 2, "renameat2": 5, "umask": 1, "sigaltstack": 2, "tgkill": 3, "exit_": 1,
}


@dataclass(frozen=True, slots=True)
class SyscallEvent:
    time: int  # guest instructions run when it was made
    tid: int  # the guest thread's number (Record.tid)
    name: str
    args: tuple[int, ...]
    result: int | None  # None: it did not return (exit, exit_group, execve that ran)
    error: str = ""  # the errno's name where the result is -errno
    bits: int = 64  # the ISA's word: how a register word reads signed

    def text(self) -> str:
        """`linux:write(1, 0x4a8f90, 11) = 11` (`= -1 ENOENT`, `= ?`: no return); words as
        the trace shows an untyped value (values.format_auto: -100, 0x4a8f90)."""
        args = ", ".join(format_auto(a, self.bits) for a in self.args)
        if self.result is None:
            result = "?"
        elif self.error:
            result = f"-1 {self.error}"
        else:
            result = format_auto(self.result, self.bits)
        return f"{PREFIX}{self.name}({args}) = {result}"


def shown_args(name: str, args: Iterable[int]) -> tuple[int, ...]:
    """The arguments a call of `name` takes, from the registers' words."""
    return tuple(args)[:ARITY.get(name, 6)]


def _retval(ev: SyscallEvent) -> Value | int | None:
    """The result as the call's return value: `-1 ENOENT` for an error (shown as its text,
    as an enum's name is)."""
    if ev.result is None:
        return None
    if ev.error:
        return Value("enum", 64, ev.result & (2**64 - 1), f"-1 {ev.error}")
    return ev.result


def extern_line(ev: SyscallEvent) -> str:
    """One line of uftrace's external data: the time (instructions, as uftrace reads
    nanoseconds) and the event's text."""
    thread = f" [thread {ev.tid}]" if ev.tid else ""
    return f"{ev.time // 10**9}.{ev.time % 10**9:09d} {ev.text()}{thread}\n"


_LINE = re.compile(rf"(\d+)\.(\d{{9}}) {re.escape(PREFIX)}([\w]+)\((.*)\) = (.*?)"
                   r"(?: \[thread (\d+)\])?")


def parse_extern(text: str) -> list[SyscallEvent]:
    """The events of an `extern.dat` written by `extern_line` (other lines are skipped:
    uftrace's external data may hold any message); a thread's events end in `[thread N]`
    (N as Record.tid: the N-th thread created), the main thread's in nothing."""
    events = []
    for line in text.splitlines():
        m = _LINE.fullmatch(line.strip())
        if m is None:
            continue
        seconds, nanos, name, args, result, thread = m.groups()
        try:
            values = tuple(int(a, 0) for a in args.split(", ")) if args else ()
            error = result.split()[1] if result.startswith("-1 ") else ""
            value = None if result == "?" else -1 if error else int(result, 0)
        except (ValueError, IndexError):
            continue
        events.append(SyscallEvent(int(seconds) * 10**9 + int(nanos), int(thread or 0),
                                   name, values, value, error))
    return events


def recorded_syscalls(directory: str) -> list[SyscallEvent]:
    """The events a recording's `extern.dat` holds (none when it has none), in time
    order."""
    text = read_text(os.path.join(directory, EXTERN_FILE), "extern")
    return sorted(parse_extern(text), key=lambda ev: ev.time) if text else []


def merged(records: Iterable[Record], events: list[SyscallEvent],
           symbolize: Callable[[int], str], tid: int | None = None
           ) -> tuple[Iterator[Record], Callable[[int], str]]:
    """The records with each event (of thread `tid` only, when given: one task's records)
    as a call of `linux:<name>` that takes no time (an Entry with its arguments, an Exit
    with its result), placed after the records of its thread made up to its time, at the
    depth its thread is at there; and the symbolizer that names those calls (the same for
    every `tid`).  `events` in time order."""
    names = {PSEUDO_BASE + i: PREFIX + ev.name for i, ev in enumerate(events)}

    def named(addr: int) -> str:
        return names.get(addr) or symbolize(addr)

    def stream() -> Iterator[Record]:
        depth: dict[int, int] = {}  # per thread: the frames open
        i = 0

        def calls_up_to(time: int | None) -> Iterator[Record]:
            nonlocal i
            while i < len(events) and (time is None or events[i].time < time):
                ev = events[i]
                if tid is not None and ev.tid != tid:
                    i += 1
                    continue
                d = depth.get(ev.tid, 0)
                func = PSEUDO_BASE + i
                yield Entry(ev.time, d, func, ev.args, tid=ev.tid)
                yield Exit(ev.time, d, func, _retval(ev), 0, tid=ev.tid)
                i += 1

        for rec in records:
            yield from calls_up_to(rec.time)
            yield rec
            depth[rec.tid] = rec.depth + 1 if isinstance(rec, Entry) else rec.depth
        yield from calls_up_to(None)

    return stream(), named
