"""Waiting for descriptors: poll, ppoll, select, pselect6 (and their time64 and old-style
variants).  Guest descriptors map to host ones; the wait itself is the host's `poll(2)`,
taken in short slices so that Ctrl-C and --timeout stay prompt.  Event bits are translated
by name (MIPS numbers POLLWRNORM/POLLWRBAND differently, asm/poll.h).  The signal mask
argument of ppoll/pselect6 is accepted and not applied (no signal delivery yet).

While the process has more than one thread, a call that finds nothing ready does not wait
on the host: only its thread waits (WouldBlock, threads.py) with the call's timeout on the
scheduler's clock, and the others run; the call is made again when a descriptor is ready,
or once more without waiting when the timeout has passed."""

from __future__ import annotations

import select
import time

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.sys_proc import _sleep_ns
from emutrace.machine.linux.sys_sigdeliver import interrupted
from emutrace.machine.linux.table import syscall
from emutrace.machine.linux.threads import WouldBlock

K = LinuxKernel
EVENTS = ("POLLIN", "POLLPRI", "POLLOUT", "POLLERR", "POLLHUP", "POLLNVAL", "POLLRDNORM",
          "POLLRDBAND", "POLLWRNORM", "POLLWRBAND", "POLLRDHUP")
SLICE_MS = 100  # longest host wait between checks for a stop request
FD_SETSIZE_MAX = 1 << 20  # fs/select.c: n beyond the process's fd limit is EINVAL


def _to_host(k: K, guest: int) -> int:
    c = k.abi.constants
    return sum(getattr(select, n, 0) for n in EVENTS if n in c and guest & c[n])


def _to_guest(k: K, host: int) -> int:
    c = k.abi.constants
    return sum(c[n] for n in EVENTS if n in c and host & getattr(select, n, 0))


def _wait(k: K, watch: dict[int, int], timeout_ns: int | None) -> dict[int, int]:
    """Host fd -> host event mask; returns host fd -> ready events (possibly empty after a
    timeout or a stop request)."""
    poller = select.poll()
    for fd, events in watch.items():
        poller.register(fd, events)
    if k.threads.active or k.threads.timed_out:  # only this thread waits (threads.py)
        now = dict(poller.poll(0))
        if now or timeout_ns == 0 or k.threads.timed_out:
            return now
        raise WouldBlock(watch, timeout_ns=timeout_ns)
    deadline = None if timeout_ns is None else time.monotonic_ns() + timeout_ns
    while True:
        left = SLICE_MS if deadline is None else max(0, (deadline - time.monotonic_ns()))
        slice_ms = SLICE_MS if deadline is None else min(SLICE_MS, -(-left // 1_000_000))
        ready = poller.poll(slice_ms)
        if ready:
            return dict(ready)
        if interrupted(k):  # a signal for a guest handler: the wait ends with EINTR
            raise GuestError("EINTR")
        if (deadline is not None and time.monotonic_ns() >= deadline) \
                or k.cpu.stop_requested.is_set():
            return {}


def _idle(k: K, timeout_ns: int | None) -> None:
    """Nothing to watch (pause() is ppoll(NULL, 0, NULL, mask) on the newer ISAs): sleep
    until the timeout, a signal for the guest (EINTR) or a stop request."""
    if k.threads.active or k.threads.timed_out:  # only this thread sleeps (threads.py)
        if interrupted(k):
            raise GuestError("EINTR")
        if timeout_ns == 0 or k.threads.timed_out:
            return
        raise WouldBlock({}, probe=lambda: interrupted(k), timeout_ns=timeout_ns)
    deadline = None if timeout_ns is None else time.monotonic_ns() + timeout_ns
    while deadline is None or time.monotonic_ns() < deadline:
        if interrupted(k):
            raise GuestError("EINTR")
        if k.cpu.stop_requested.wait(0.01):
            return


def _poll(k: K, addr: int, count: int, timeout_ns: int | None) -> int:
    if count > FD_SETSIZE_MAX:
        raise GuestError("EINVAL")
    layout = k.abi.structs["pollfd"]
    blob = bytearray(k.read(addr, count * layout.size))
    fd_off, _ = layout.fields["fd"]
    ev_off, _ = layout.fields["events"]
    rev_off, _ = layout.fields["revents"]
    entries = []
    for i in range(count):
        base = i * layout.size
        fd = int.from_bytes(blob[base + fd_off:base + fd_off + 4], k.endian, signed=True)
        events = int.from_bytes(blob[base + ev_off:base + ev_off + 2], k.endian)
        entries.append((fd, events))
    nval = k.const("POLLNVAL")
    watch: dict[int, int] = {}
    result: list[int] = []
    for fd, events in entries:
        desc = k.fds.get(fd) if fd >= 0 else None
        result.append(0 if fd < 0 else (nval if desc is None else -1))
        if desc is not None:
            watch[desc.host_fd] = watch.get(desc.host_fd, 0) | _to_host(k, events)
    immediate = any(r > 0 for r in result)
    ready = _wait(k, watch, 0 if immediate else timeout_ns) if watch else {}
    if not watch and not immediate and timeout_ns != 0:
        _idle(k, timeout_ns)
    always = k.const("POLLERR") | k.const("POLLHUP") | nval
    for i, (fd, events) in enumerate(entries):
        if result[i] < 0:
            host = ready.get(k.fds[fd].host_fd, 0)
            result[i] = _to_guest(k, host) & (events | always)
        base = i * layout.size
        blob[base + rev_off:base + rev_off + 2] = result[i].to_bytes(2, k.endian)
    k.write(addr, bytes(blob))
    return sum(1 for r in result if r)


@syscall("poll")
def sys_poll(k: K, a: tuple[int, ...]) -> int:
    ms = k.int32(a[2])
    return _poll(k, a[0], a[1], None if ms < 0 else ms * 1_000_000)


def _timeout(k: K, layout: str, addr: int) -> int | None:
    return None if addr == 0 else _sleep_ns(k, layout, addr)


@syscall("ppoll")
def sys_ppoll(k: K, a: tuple[int, ...]) -> int:
    return _poll(k, a[0], a[1], _timeout(k, "timespec", a[2]))


@syscall("ppoll_time64")
def sys_ppoll64(k: K, a: tuple[int, ...]) -> int:
    return _poll(k, a[0], a[1], _timeout(k, "kernel_timespec", a[2]))


def _fd_set(k: K, addr: int, n: int) -> set[int]:
    if not addr:
        return set()
    bits = 8 * k.word
    words = k.unpack_words(k.read(addr, -(-n // bits) * k.word))
    return {fd for fd in range(n) if words[fd // bits] >> (fd % bits) & 1}


def _put_fd_set(k: K, addr: int, n: int, fds: set[int]) -> None:
    if addr:
        bits = 8 * k.word
        words = [0] * (-(-n // bits))
        for fd in fds:
            words[fd // bits] |= 1 << (fd % bits)
        k.write(addr, k.pack_words(*words))


def _select(k: K, n: int, sets: tuple[int, int, int], timeout_ns: int | None) -> int:
    n = k.int32(n)
    if not 0 <= n <= FD_SETSIZE_MAX:
        raise GuestError("EINVAL")
    wanted = [_fd_set(k, addr, n) for addr in sets]
    masks = (select.POLLIN | select.POLLHUP | select.POLLERR,
             select.POLLOUT | select.POLLERR, select.POLLPRI)
    watch: dict[int, int] = {}
    for fds, mask in zip(wanted, masks, strict=True):
        for fd in fds:
            watch[k.fd(fd).host_fd] = watch.get(k.fd(fd).host_fd, 0) | mask  # EBADF
    if watch:
        ready = _wait(k, watch, timeout_ns)
    else:
        if timeout_ns is None or timeout_ns > 0:
            _idle(k, timeout_ns)
        ready = {}
    total = 0
    for addr, fds, mask in zip(sets, wanted, masks, strict=True):
        hit = {fd for fd in fds if ready.get(k.fds[fd].host_fd, 0) & mask}
        _put_fd_set(k, addr, n, hit)
        total += len(hit)
    return total


@syscall("select", "_newselect")
def sys_select(k: K, a: tuple[int, ...]) -> int:
    return _select(k, a[0], (a[1], a[2], a[3]), _timeout_us(k, a[4]))


def _timeout_us(k: K, addr: int) -> int | None:
    if addr == 0:
        return None
    lay = k.abi.structs["timeval"]
    blob = k.read(addr, lay.size)
    (s_off, s_size), (u_off, u_size) = lay.fields["tv_sec"], lay.fields["tv_usec"]
    sec = int.from_bytes(blob[s_off:s_off + s_size], k.endian, signed=True)
    usec = int.from_bytes(blob[u_off:u_off + u_size], k.endian, signed=True)
    if sec < 0 or usec < 0:
        raise GuestError("EINVAL")
    return sec * 10**9 + usec * 1000


@syscall("pselect6")
def sys_pselect6(k: K, a: tuple[int, ...]) -> int:
    return _select(k, a[0], (a[1], a[2], a[3]), _timeout(k, "timespec", a[4]))


@syscall("pselect6_time64")
def sys_pselect6_64(k: K, a: tuple[int, ...]) -> int:
    return _select(k, a[0], (a[1], a[2], a[3]), _timeout(k, "kernel_timespec", a[4]))
