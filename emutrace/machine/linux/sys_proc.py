"""Process, identity, time, limits and signal system calls."""

from __future__ import annotations

import os
import resource
import signal as host_signal
import time

from emutrace.isa.base import GuestError
from emutrace.machine.linux import sys_sigdeliver, sys_signal  # noqa: F401 (signal calls)
from emutrace.machine.linux.kernel import GuestExit, GuestKilled, LinuxKernel, fd_limit
from emutrace.machine.linux.table import syscall
from emutrace.machine.linux.threads import Wait

K = LinuxKernel
__all__ = ["GuestKilled"]  # its home was here; sessions import it from this module


# ---------------------------------------------------------------- lifetime
@syscall("exit_group")
def sys_exit(k: K, a: tuple[int, ...]) -> int:
    raise GuestExit(a[0] & 0xFF)


def _signal_self(k: K, sig: int) -> int:
    if sig == 0 or sig in k.sig_ignored:  # kernel/signal.c: an ignored signal is discarded
        return 0
    name = k.signal_name(sig)
    if name is None:
        raise GuestError("EINVAL")
    act = k.sig_actions.get(sig)
    if (act is not None and act.handler > 1) or k.sig_mask >> (sig - 1) & 1:
        sys_sigdeliver.queue(k, sig)  # a handler, or blocked: delivered later
        return 0
    if name in sys_sigdeliver.DEFAULT_IGNORED or sys_sigdeliver.stop_self(k, name):
        return 0
    raise GuestKilled(name, int(getattr(host_signal, name, 9)))


@syscall("getpid")
def sys_getpid(k: K, a: tuple[int, ...]) -> int:
    return os.getpid()


@syscall("getppid")
def sys_getppid(k: K, a: tuple[int, ...]) -> int:
    return os.getppid()


@syscall("getuid", "getuid32")
def sys_getuid(k: K, a: tuple[int, ...]) -> int:
    return os.getuid()


@syscall("geteuid", "geteuid32")
def sys_geteuid(k: K, a: tuple[int, ...]) -> int:
    return os.geteuid()


@syscall("getgid", "getgid32")
def sys_getgid(k: K, a: tuple[int, ...]) -> int:
    return os.getgid()


@syscall("getegid", "getegid32")
def sys_getegid(k: K, a: tuple[int, ...]) -> int:
    return os.getegid()


@syscall("getgroups", "getgroups32")
def sys_getgroups(k: K, a: tuple[int, ...]) -> int:
    return 0


@syscall("fadvise64", "fadvise64_64", "arm_fadvise64_64")
def sys_accept_quietly(k: K, a: tuple[int, ...]) -> int:
    return 0  # fadvise is only advice


@syscall("rseq")
def sys_not_supported(k: K, a: tuple[int, ...]) -> int:
    raise GuestError("ENOSYS")  # glibc treats ENOSYS from rseq as "no rseq"


TASK_COMM_LEN = 16  # include/linux/sched.h: the command name with its NUL


@syscall("prctl")
def sys_prctl(k: K, a: tuple[int, ...]) -> int:
    """prctl(2) PR_SET_NAME / PR_GET_NAME: the command name /proc/self/comm, status and
    stat show (at most 15 bytes; Perl's `$0 = ...` sets it); other options are ENOSYS
    (busybox ignores prctl failures)."""
    c = k.abi.constants
    if a[0] == c.get("PR_SET_NAME"):
        size = k.mapped_length(a[1], TASK_COMM_LEN - 1)
        if not size:
            raise GuestError("EFAULT")
        k.comm = k.read(a[1], size).split(b"\0", 1)[0]
        return 0
    if a[0] == c.get("PR_GET_NAME"):
        name = k.comm if k.comm is not None else os.fsencode(
            os.path.basename(k.exe_guest_path))[:TASK_COMM_LEN - 1]
        k.write(a[1], name.ljust(TASK_COMM_LEN, b"\0"))
        return 0
    raise GuestError("ENOSYS")


@syscall("umask")
def sys_umask(k: K, a: tuple[int, ...]) -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


@syscall("uname")
def sys_uname(k: K, a: tuple[int, ...]) -> int:
    host = os.uname()
    fields = (host.sysname, host.nodename, host.release, host.version,
              k.isa.uname_machine, "(none)")
    layout = k.abi.structs["new_utsname"]
    width = layout.size // 6
    k.write(a[0], b"".join(f.encode()[:width - 1].ljust(width, b"\0") for f in fields))
    return 0


# ---------------------------------------------------------------- time
CLOCKS = {"CLOCK_REALTIME": time.CLOCK_REALTIME, "CLOCK_MONOTONIC": time.CLOCK_MONOTONIC,
          "CLOCK_PROCESS_CPUTIME_ID": time.CLOCK_PROCESS_CPUTIME_ID,
          "CLOCK_THREAD_CPUTIME_ID": time.CLOCK_THREAD_CPUTIME_ID,
          "CLOCK_MONOTONIC_RAW": time.CLOCK_MONOTONIC_RAW,
          "CLOCK_REALTIME_COARSE": time.CLOCK_REALTIME,
          "CLOCK_MONOTONIC_COARSE": time.CLOCK_MONOTONIC,
          "CLOCK_BOOTTIME": time.CLOCK_BOOTTIME}


def _clock_ns(k: K, clk: int) -> int:
    for name, host in CLOCKS.items():
        if k.abi.constants.get(name) == clk:
            return time.clock_gettime_ns(host)
    raise GuestError("EINVAL")


def _put_time(k: K, layout: str, addr: int, ns: int, sub: str = "tv_nsec",
              scale: int = 1) -> int:
    if addr:
        sec, rest = divmod(ns, 10**9)
        k.write(addr, k.struct_bytes(layout, {"tv_sec": sec, sub: rest // scale}))
    return 0


@syscall("clock_gettime")
def sys_clock_gettime(k: K, a: tuple[int, ...]) -> int:
    return _put_time(k, "timespec", a[1], _clock_ns(k, a[0]))


@syscall("clock_gettime64")
def sys_clock_gettime64(k: K, a: tuple[int, ...]) -> int:
    return _put_time(k, "kernel_timespec", a[1], _clock_ns(k, a[0]))


@syscall("clock_getres")
def sys_clock_getres(k: K, a: tuple[int, ...]) -> int:
    _clock_ns(k, a[0])
    return _put_time(k, "timespec", a[1], 1)


@syscall("clock_getres_time64")
def sys_clock_getres64(k: K, a: tuple[int, ...]) -> int:
    _clock_ns(k, a[0])
    return _put_time(k, "kernel_timespec", a[1], 1)


@syscall("gettimeofday")
def sys_gettimeofday(k: K, a: tuple[int, ...]) -> int:
    return _put_time(k, "timeval", a[0], time.time_ns(), "tv_usec", 1000)


@syscall("time")
def sys_time(k: K, a: tuple[int, ...]) -> int:
    now = int(time.time())
    if a[0]:
        k.write(a[0], k.pack_words(now))
    return now


def _sleep_ns(k: K, layout: str, addr: int) -> int:
    lay = k.abi.structs[layout]
    blob = k.read(addr, lay.size)
    sec_off, sec_size = lay.fields["tv_sec"]
    ns_off, ns_size = lay.fields["tv_nsec"]
    sec = int.from_bytes(blob[sec_off:sec_off + sec_size], k.endian, signed=True)
    nsec = int.from_bytes(blob[ns_off:ns_off + ns_size], k.endian, signed=True)
    if sec < 0 or not 0 <= nsec < 10**9:
        raise GuestError("EINVAL")
    return sec * 10**9 + nsec


def _sleep(k: K, ns: int) -> int:
    """Sleep ns; while other threads can run, the thread waits on the scheduler's clock
    instead (threads.py) and they run meanwhile."""
    if k.threads.active:
        k.threads.block(Wait("sleep", deadline=k.threads.clock + max(ns, 0)))
        return 0
    if ns > 0 and not k.sleep(ns / 1e9):
        return -k.errno("EINTR")
    return 0


@syscall("nanosleep")
def sys_nanosleep(k: K, a: tuple[int, ...]) -> int:
    return _sleep(k, _sleep_ns(k, "timespec", a[0]))


def _clock_nanosleep(k: K, a: tuple[int, ...], layout: str) -> int:
    ns = _sleep_ns(k, layout, a[2])
    if a[1] & 1:  # TIMER_ABSTIME
        ns -= _clock_ns(k, a[0])
    return _sleep(k, ns)


@syscall("clock_nanosleep")
def sys_clock_nanosleep(k: K, a: tuple[int, ...]) -> int:
    return _clock_nanosleep(k, a, "timespec")


@syscall("clock_nanosleep_time64")
def sys_clock_nanosleep64(k: K, a: tuple[int, ...]) -> int:
    return _clock_nanosleep(k, a, "kernel_timespec")


# drivers/char/random.c before 5.18 capped one read at 32 MiB - 1 (a partial read, which
# callers loop over); bounding each call keeps --timeout and Ctrl-C prompt
GETRANDOM_MAX = (1 << 25) - 1


@syscall("getrandom")
def sys_getrandom(k: K, a: tuple[int, ...]) -> int:
    count = min(a[1], GETRANDOM_MAX)  # one call's share: the run stays stoppable
    if k.mapped_length(a[0], count) < count:  # checked before any byte is made
        raise GuestError("EFAULT")
    k.write(a[0], k.random_bytes(count))
    return count


# ---------------------------------------------------------------- limits
def _host_resource(k: K, number: int) -> int:
    for name, value in k.abi.constants.items():
        if name.startswith("RLIMIT_") and value == number and hasattr(resource, name):
            return int(getattr(resource, name))
    raise GuestError("EINVAL")


def _limits(k: K, number: int, bits: int) -> tuple[int, int]:
    top = (1 << bits) - 1
    host = _host_resource(k, number)
    if host == resource.RLIMIT_NOFILE:  # what is left after emutrace's reserve
        return fd_limit(), fd_limit(hard=True)
    if host in k.rlimits:  # one the guest set (None: unlimited)
        soft, hard = k.rlimits[host]
        return (top if soft is None else min(soft, top), top if hard is None else min(hard, top))
    cur, hi = resource.getrlimit(host)
    return (top if cur == resource.RLIM_INFINITY else min(cur, top),
            top if hi == resource.RLIM_INFINITY else min(hi, top))


@syscall("prlimit64")
def sys_prlimit64(k: K, a: tuple[int, ...]) -> int:
    pid = k.int32(a[0])
    if pid not in (0, os.getpid()):
        # another process: its limits may be read as the host allows (EPERM, ESRCH),
        # never changed (emutrace may run as root)
        if a[2]:
            raise GuestError("EPERM")
        cur, hi = resource.prlimit(pid, _host_resource(k, a[1]))
        top = (1 << 64) - 1
        cur, hi = (top if v == resource.RLIM_INFINITY else v for v in (cur, hi))
    else:
        cur, hi = _limits(k, a[1], 64)
    if a[2] and pid in (0, os.getpid()):
        _set_limit(k, a[1], _read_limit(k, "rlimit64", a[2]), 64)
    if a[3]:
        k.write(a[3], k.struct_bytes("rlimit64", {"rlim_cur": cur, "rlim_max": hi}))
    return 0


@syscall("getrlimit", "ugetrlimit")
def sys_getrlimit(k: K, a: tuple[int, ...]) -> int:
    cur, hi = _limits(k, a[0], 8 * k.word)
    k.write(a[1], k.struct_bytes("rlimit", {"rlim_cur": cur, "rlim_max": hi}))
    return 0


@syscall("setrlimit")
def sys_setrlimit(k: K, a: tuple[int, ...]) -> int:
    _set_limit(k, a[0], _read_limit(k, "rlimit", a[1]), 8 * k.word)
    return 0


APPLIED_LIMITS = ("RLIMIT_FSIZE",)  # the limits the Linux layer applies (file_size.py)


def _read_limit(k: K, layout: str, addr: int) -> tuple[int, int]:
    lay = k.abi.structs[layout]
    blob = k.read(addr, lay.size)
    (c_off, c_size), (m_off, m_size) = lay.fields["rlim_cur"], lay.fields["rlim_max"]
    return (int.from_bytes(blob[c_off:c_off + c_size], k.endian),
            int.from_bytes(blob[m_off:m_off + m_size], k.endian))


def _set_limit(k: K, number: int, new: tuple[int, int], bits: int) -> None:
    """setrlimit(2): soft <= hard (EINVAL).  Applied to the guest where the Linux layer
    serves the limit (APPLIED_LIMITS); any other is accepted and not applied (the host
    process is emutrace's)."""
    host = _host_resource(k, number)
    cur, hi = new
    if cur > hi:
        raise GuestError("EINVAL")
    if not any(host == getattr(resource, name) for name in APPLIED_LIMITS):
        return
    top = (1 << bits) - 1
    k.rlimits[host] = (None if cur == top else cur, None if hi == top else hi)

