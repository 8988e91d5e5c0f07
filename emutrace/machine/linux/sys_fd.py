"""Descriptor system calls: dup, fcntl, ioctl, pipes."""

from __future__ import annotations

import fcntl
import os
import shutil

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import FileDesc, LinuxKernel, fd_limit
from emutrace.machine.linux.table import syscall

K = LinuxKernel


def _dup(k: K, old: int, new: int | None, cloexec: bool, lowest: int = 0) -> int:
    desc = k.fd(old)
    if new is not None and not 0 <= new < fd_limit():
        raise GuestError("EBADF")  # dup2(2): beyond RLIMIT_NOFILE
    if lowest >= fd_limit():
        raise GuestError("EINVAL")  # fcntl(2) F_DUPFD
    copy = FileDesc(os.dup(desc.host_fd), desc.guest_path, cloexec, node=desc.node)
    if new is None:
        return k.new_fd(copy, lowest)
    if new in k.fds:
        prev = k.fds.pop(new)
        os.close(prev.host_fd)
    k.fds[new] = copy
    return new


@syscall("dup")
def sys_dup(k: K, a: tuple[int, ...]) -> int:
    return _dup(k, a[0], None, False)


@syscall("dup2")
def sys_dup2(k: K, a: tuple[int, ...]) -> int:
    if k.int32(a[0]) == k.int32(a[1]):
        k.fd(a[0])
        return a[1]
    return _dup(k, a[0], k.int32(a[1]), False)


@syscall("dup3")
def sys_dup3(k: K, a: tuple[int, ...]) -> int:
    if k.int32(a[0]) == k.int32(a[1]):
        raise GuestError("EINVAL")
    return _dup(k, a[0], k.int32(a[1]), bool(a[2] & k.const("O_CLOEXEC")))


@syscall("fcntl", "fcntl64")
def sys_fcntl(k: K, a: tuple[int, ...]) -> int:
    c = k.abi.constants
    desc, cmd = k.fd(a[0]), a[1]
    if cmd in (c["F_DUPFD"], c["F_DUPFD_CLOEXEC"]):
        # fs/fcntl.c passes the argument as an int (argi); negative is EINVAL
        lowest = k.int32(a[2])
        if lowest < 0:
            raise GuestError("EINVAL")
        return _dup(k, a[0], None, cmd == c["F_DUPFD_CLOEXEC"], lowest=lowest)
    if cmd == c["F_GETFD"]:
        return c["FD_CLOEXEC"] if desc.cloexec else 0
    if cmd == c["F_SETFD"]:
        desc.cloexec = bool(a[2] & c["FD_CLOEXEC"])
        return 0
    if cmd == c["F_GETFL"]:
        host = fcntl.fcntl(desc.host_fd, fcntl.F_GETFL)
        flags = host & 3  # O_ACCMODE values are the same on every Linux ISA
        if host & os.O_NONBLOCK:
            flags |= c["O_NONBLOCK"]
        if host & os.O_APPEND:
            flags |= c["O_APPEND"]
        return flags
    if cmd == c["F_SETFL"]:
        os.set_blocking(desc.host_fd, not a[2] & c["O_NONBLOCK"])
        return 0
    if cmd in (c["F_GETLK"], c["F_SETLK"], c["F_SETLKW"]):
        return 0  # one process: record locks never conflict
    raise GuestError("EINVAL")


@syscall("ioctl")
def sys_ioctl(k: K, a: tuple[int, ...]) -> int:
    c = k.abi.constants
    desc, req = k.fd(a[0]), a[1]
    tty = os.isatty(desc.host_fd)
    if req == c["TCGETS"]:
        if not tty:
            raise GuestError("ENOTTY")
        # a terminal: report a zeroed termios (glibc's isatty only needs success)
        k.write(a[2], bytes(k.abi.structs["termios"].size))
        return 0
    if req == c["TIOCGWINSZ"]:
        if not tty:
            raise GuestError("ENOTTY")
        size = shutil.get_terminal_size()
        k.write(a[2], k.struct_bytes("winsize", {"ws_row": size.lines, "ws_col": size.columns}))
        return 0
    if req == c.get("FIONBIO"):
        on = int.from_bytes(k.read(a[2], 4), k.endian)
        os.set_blocking(desc.host_fd, not on)
        return 0
    if req == c.get("TIOCGPGRP") and tty:
        k.write(a[2], os.getpgrp().to_bytes(4, k.endian))
        return 0
    raise GuestError("ENOTTY")


def _pipe(k: K, addr: int, flags: int) -> int:
    r, w = os.pipe2(os.O_CLOEXEC)
    cloexec = bool(flags & k.const("O_CLOEXEC"))
    fds = [k.new_fd(FileDesc(r, "pipe:[r]", cloexec)), k.new_fd(FileDesc(w, "pipe:[w]", cloexec))]
    if flags & k.const("O_NONBLOCK"):
        os.set_blocking(r, False)
        os.set_blocking(w, False)
    k.write(addr, b"".join(n.to_bytes(4, k.endian) for n in fds))
    return 0


@syscall("pipe2")
def sys_pipe2(k: K, a: tuple[int, ...]) -> int:
    return _pipe(k, a[0], a[1])


@syscall("pipe")
def sys_pipe(k: K, a: tuple[int, ...]) -> int:
    return _pipe(k, a[0], 0)
