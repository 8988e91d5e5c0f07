"""The rule for each system call a confined native run checks (target/seccomp_filter.py
CONFINED): which arguments are paths and how the emulation's `Sandbox` looks them up
(the same rules as machine/linux/sys_fs.py and the sandbox docstring's guidance), what
else is refused.  Each rule reads the stopped call through its `Confinement`
(target/ptrace_confine.py) and records what the call is to run with: host paths for
path arguments (`Call.paths`), changed values (`Call.values`, e.g. a mode without
set-user-ID bits) or a result that replaces the call (`Call.result`); it raises
`SandboxError` or `Refused` to skip the call with an errno."""

from __future__ import annotations

import ctypes
import functools
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emutrace.target.ptrace_confine import Confinement

SOCKET_CALLS = {1: "socket", 8: "socketpair"}  # <linux/net.h> SYS_SOCKET, SYS_SOCKETPAIR
GUEST_MODE_BITS = 0o1777  # as emulation: no set-user-ID or set-group-ID bits
# <fcntl.h>, the same on x86_64 and i386 (emutrace/isa/abi)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH = 0x100, 0x400, 0x1000
O_ACCMODE, O_CREAT, O_EXCL, O_TRUNC, O_APPEND = 3, 0o100, 0o200, 0o1000, 0o2000
O_NOFOLLOW, O_TMPFILE_BIT = 0o400000, 0o20000000
IN_DONT_FOLLOW = 0x02000000  # <linux/inotify.h>
CLONE_VM, CLONE_FILES, CLONE_VFORK = 0x100, 0x400, 0x4000  # <linux/sched.h>
AF_UNIX = 1
PT_INTERP = 3  # <elf.h>
SECCOMP_SET_MODE_FILTER, SECCOMP_FLAG_NEW_LISTENER = 1, 8  # <linux/seccomp.h>
# <linux/openat2.h>: RESOLVE_NO_XDEV, _NO_MAGICLINKS, _NO_SYMLINKS (BENEATH, IN_ROOT and
# CACHED are lookups of their own); the open flags openat2 accepts (fs/open.c
# VALID_OPEN_FLAGS on x86: every bit from O_CREAT to __O_TMPFILE, and O_ACCMODE)
RESOLVE_NO_SYMLINKS, RESOLVE_KEPT = 0x04, 0x01 | 0x02 | 0x04
OPENAT2_FLAGS = 0o37777703
OPENAT2_X86_64 = 437  # (the tracer's own table: this x86_64 host)
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # <asm-generic/ioctls.h>


class Refused(Exception):
    """Skip the call with this errno; `message` (if any) is warned once."""

    def __init__(self, errno_name: str, message: str = "") -> None:
        super().__init__(message)
        self.errno_name = errno_name
        self.message = message


def int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@dataclass
class Call:
    """One stopped system call: its table, name and arguments, and what the check decided
    (`paths`: argument index → host path to pass; `values`: argument index → new value;
    `result`: skip the call with this result)."""

    arch: str
    name: str
    args: list[int]
    paths: dict[int, bytes] = field(default_factory=dict)
    values: dict[int, int] = field(default_factory=dict)
    result: int | None = None
    becomes: str | None = None  # the call is made as this one (open → openat2)


Check = Callable[["Confinement", Call], None]


def _at(c: Confinement, call: Call, dirfd_i: int | None, path_i: int, empty_ok: bool,
        **kw: bool) -> None:
    """A path argument, maybe relative to a directory descriptor argument; an empty path
    with AT_EMPTY_PATH (`empty_ok`) or a NULL one (utimensat) means the descriptor itself:
    a write must then be allowed on its object."""
    dirfd = int32(call.args[dirfd_i]) if dirfd_i is not None else AT_FDCWD
    if empty_ok and (call.args[path_i] == 0 or c.string(call.args[path_i]) == b""):
        if kw.get("write"):
            c.check_fd_write(dirfd)
        return
    c.resolve(call, path_i, dirfd, **kw)


def _open(c: Confinement, call: Call, dirfd_i: int | None, path_i: int, flags: int,
          mode: int, resolve: int = 0) -> None:
    """open(2) as emulation checks it (machine/linux/sys_fs.py _openat), made as
    openat2(AT_FDCWD, host path, {flags, mode, RESOLVE_NO_SYMLINKS}): the resolved host
    path has no symlink to follow, so one that appears meanwhile (another guest process
    or a host process swapping a directory for a symlink) fails the call with ELOOP
    instead of leading it out (openat2(2); O_PATH|O_NOFOLLOW still opens a final link)."""
    writes = bool(flags & O_ACCMODE or flags & (O_CREAT | O_TRUNC | O_APPEND | O_TMPFILE_BIT))
    excl = flags & O_CREAT and flags & O_EXCL
    _at(c, call, dirfd_i, path_i, False, write=writes, create=bool(flags & O_CREAT),
        follow_final=not (flags & O_NOFOLLOW or excl))
    mode = mode & GUEST_MODE_BITS if flags & (O_CREAT | O_TMPFILE_BIT) else 0
    if not host_has_openat2():  # (Linux before 5.6: the open runs on the checked path)
        mode_index = {"open": 2, "openat": 3, "creat": 1}.get(call.name)
        if mode_index is not None:
            call.values[mode_index] = mode
        return
    host = call.paths.pop(path_i)
    call.becomes = "openat2"
    how = struct.pack("=QQQ", flags & 0xFFFFFFFF & OPENAT2_FLAGS, mode,
                      resolve | RESOLVE_NO_SYMLINKS)
    call.paths.update({1: host, 2: how})
    call.values.update({0: AT_FDCWD & 0xFFFFFFFF, 3: len(how)})


@functools.cache
def host_has_openat2() -> bool:
    """Whether this kernel has openat2 (Linux 5.6): asked once, in the tracer itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    how = ctypes.create_string_buffer(struct.pack("=QQQ", 0o10000000, 0, 0), 24)  # O_PATH
    fd = libc.syscall(OPENAT2_X86_64, AT_FDCWD, b"/", how, 24)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _openat2(c: Confinement, call: Call) -> None:
    """The guest's own openat2: its `struct open_how` read once (the kernel reads the copy
    made in the scratch page); resolve flags other than the no-symlink/no-crossing ones
    mean lookups the sandbox does not do: ENOSYS, as on an older kernel."""
    size = call.args[3]
    raw = c.read(call.args[2], 24) if size >= 24 else b""
    if len(raw) < 24:
        raise Refused("EINVAL" if size < 24 else "EFAULT")
    flags, mode, resolve = struct.unpack("=QQQ", raw)
    if resolve & ~RESOLVE_KEPT or flags >> 32:
        raise Refused("ENOSYS" if resolve & ~RESOLVE_KEPT else "EINVAL")
    _open(c, call, 0, 1, flags, mode, resolve)


def _flags_follow(flags: int) -> bool:
    return not flags & AT_SYMLINK_NOFOLLOW


def _path(index: int, **kw: bool) -> Check:
    return lambda c, call: _at(c, call, None, index, False, **kw)


def _path_at(dirfd_i: int, path_i: int, flags_i: int | None = None, empty: bool = False,
             follow: bool = True, **kw: bool) -> Check:
    """A *at call; with `empty`, AT_EMPTY_PATH (or, for calls without flags, a NULL path)
    names the descriptor itself."""
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        empty_ok = empty and (flags_i is None or bool(flags & AT_EMPTY_PATH))
        _at(c, call, dirfd_i, path_i, empty_ok, follow_final=follow and _flags_follow(flags),
            **kw)
    return check


def _mode(index: int, inner: Check) -> Check:
    def check(c: Confinement, call: Call) -> None:
        inner(c, call)
        call.values[index] = call.args[index] & GUEST_MODE_BITS
    return check


def _access(dirfd_i: int | None, path_i: int, mode_i: int, flags_i: int | None) -> Check:
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        _at(c, call, dirfd_i, path_i, bool(flags & AT_EMPTY_PATH),
            write=bool(call.args[mode_i] & os.W_OK), follow_final=_flags_follow(flags))
    return check


def _mknod(dirfd_i: int | None, path_i: int, mode_i: int) -> Check:
    def check(c: Confinement, call: Call) -> None:
        kind = stat.S_IFMT(call.args[mode_i])
        if kind in (stat.S_IFCHR, stat.S_IFBLK):
            raise Refused("EPERM", "emutrace: sandbox: device nodes are not created "
                                   "(mknod): returning EPERM")
        _at(c, call, dirfd_i, path_i, False, write=True, create=True, follow_final=False)
        call.values[mode_i] = kind | (call.args[mode_i] & GUEST_MODE_BITS)
    return check


def _two(old: tuple[int | None, int], new: tuple[int | None, int], link: bool = False,
         flags_i: int | None = None) -> Check:
    """rename (both paths written, neither followed) and link (the old path is written
    too, or a hard link would make a read-only file writable: sandbox.py)."""
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        follow_old = link and bool(flags & AT_SYMLINK_FOLLOW)
        _at(c, call, old[0], old[1], link and bool(flags & AT_EMPTY_PATH), write=True,
            follow_final=follow_old)
        _at(c, call, new[0], new[1], False, write=True, create=link, follow_final=False)
    return check


def _fd_write(index: int = 0) -> Check:
    return lambda c, call: c.check_fd_write(int32(call.args[index]))


def _fchdir(c: Confinement, call: Call) -> None:
    c.guest_dir(int32(call.args[0]))  # the new current directory must be under the root


def _getcwd(c: Confinement, call: Call) -> None:
    """The guest's directory (with a root other than `/` the kernel's answer would be the
    host path): written into the guest's buffer, the call skipped."""
    if c.sandbox.root.as_posix() == "/":
        return
    cwd = c.guest_dir(AT_FDCWD) + b"\0"
    if len(cwd) > call.args[1]:
        raise Refused("ERANGE")
    c.write(call.args[0], cwd)
    call.result = len(cwd)


def _execve(dirfd_i: int | None, path_i: int, flags_i: int | None) -> Check:
    """The program must be under the root; with a root other than `/`, one whose
    interpreter the kernel would take from the host (`#!`, PT_INTERP) is refused."""
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        dirfd = int32(call.args[dirfd_i]) if dirfd_i is not None else AT_FDCWD
        if flags & AT_EMPTY_PATH and c.string(call.args[path_i]) == b"":
            found = c.fd_host_path(dirfd)
            if found is None:
                raise Refused("EACCES")
            c.guest_dir(dirfd)  # (fexecve) the file must be under the root, or refused
            host = found
        else:
            host = c.resolve(call, path_i, dirfd, follow_final=_flags_follow(flags))
        if c.sandbox.root.as_posix() != "/" and _host_interpreter(host):
            raise Refused("EACCES", f"emutrace: sandbox: exec of {os.fsdecode(host)} denied "
                                    f"(natively its interpreter would be the host's)")
    return check


def _host_interpreter(host: bytes) -> bool:
    try:
        with open(host, "rb") as f:
            head = f.read(64)
            if head.startswith(b"#!"):
                return True
            if head[:4] != b"\x7fELF" or len(head) < 52:
                return False
            # ELF64 or ELF32 header (little-endian: the x86 programs that run natively)
            phoff, phentsize, phnum = (_le(head, 32, 8), _le(head, 54, 2), _le(head, 56, 2)) \
                if head[4] == 2 else (_le(head, 28, 4), _le(head, 42, 2), _le(head, 44, 2))
            for i in range(min(phnum, 256)):
                f.seek(phoff + i * phentsize)
                if int.from_bytes(f.read(4), "little") == PT_INTERP:
                    return True
    except OSError:
        return False
    return False


def _le(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at:at + size], "little")


def _socket(c: Confinement, call: Call) -> None:
    """emutrace gives a guest no sockets (machine/linux/sys_socket.py): EACCES, with a
    warning for any family but AF_UNIX (glibc's nscd probe)."""
    _refuse_socket(c, int32(call.args[0]))


def _refuse_socket(c: Confinement, family: int) -> None:
    if family != AF_UNIX:
        raise Refused("EACCES", f"emutrace: sandbox: socket of address family {family} "
                                f"denied (no network): returning EACCES")
    raise Refused("EACCES")


def _socket_fd(c: Confinement, call: Call) -> None:
    """A socket call on a descriptor: runs (the host says ENOTSOCK or EBADF) unless the
    descriptor is an inherited socket, which emulation does not serve either."""
    if c.is_socket(int32(call.args[0])):
        raise Refused("ENOSYS", "emutrace: socket calls on an inherited socket are not "
                                "supported: returning ENOSYS")


def _socketcall(c: Confinement, call: Call) -> None:
    """i386 socketcall(call, args): the arguments are copied into the scratch page so that
    the kernel reads what was checked."""
    which = int32(call.args[0])
    block = next((got for n in range(6, 0, -1) if len(got := c.read(call.args[1], 4 * n))
                  == 4 * n), b"")  # (up to 6 arguments, as many as are readable)
    if not block:
        raise Refused("EFAULT")
    first = int32(int.from_bytes(block[:4], "little"))
    if which in SOCKET_CALLS:
        _refuse_socket(c, first)
    if c.is_socket(first):
        raise Refused("ENOSYS", "emutrace: socket calls on an inherited socket are not "
                                "supported: returning ENOSYS")
    call.paths[1] = block  # (copied into the scratch page like a path)


def _clone(c: Confinement, call: Call) -> None:
    flags = call.args[0]
    if flags & (CLONE_VM | CLONE_FILES) and not flags & CLONE_VFORK:
        raise Refused("EPERM", "emutrace: native: a thread (clone sharing memory or "
                               "descriptors) refused: the sandbox's checks would race it; "
                               "returning EPERM (run under emulation, or --unconfined)")


def _seccomp(c: Confinement, call: Call) -> None:
    """A guest filter is fine (it can only refuse more) unless it comes with a listener:
    SECCOMP_RET_USER_NOTIF outranks our SECCOMP_RET_TRACE (seccomp(2) "the return value
    with the highest precedence"), and its supervisor may let the call run unchecked."""
    if call.args[0] == SECCOMP_SET_MODE_FILTER and call.args[1] & SECCOMP_FLAG_NEW_LISTENER:
        raise Refused("EPERM", "emutrace: native: a seccomp filter with a listener refused "
                               "(it could let calls past the sandbox): returning EPERM")


def _ioctl(c: Confinement, call: Call) -> None:
    """The requests the filter stops for (seccomp_filter.ioctl_checked): terminal input
    injection is refused, a file attribute change needs a writable file."""
    if call.args[1] & 0xFFFFFFFF in (TIOCSTI, TIOCLINUX):
        raise Refused("EPERM", "emutrace: sandbox: ioctl pushing input into a terminal "
                               "denied: returning EPERM")
    c.check_fd_write(int32(call.args[0]))


def _openat(c: Confinement, call: Call) -> None:
    _open(c, call, 0, 1, call.args[2], call.args[3])


def _inotify(c: Confinement, call: Call) -> None:
    _at(c, call, None, 1, False, follow_final=not call.args[2] & IN_DONT_FOLLOW)


CHECKS: dict[str, Check] = {
    "open": lambda c, call: _open(c, call, None, 0, call.args[1], call.args[2]),
    "openat": _openat,
    "openat2": _openat2,
    "creat": lambda c, call: _open(c, call, None, 0, O_CREAT | O_TRUNC | 1, call.args[1]),
    **{n: _path(0) for n in ("stat", "oldstat", "stat64", "statfs", "statfs64", "getxattr",
                             "listxattr", "chdir")},
    **{n: _path(0, follow_final=False) for n in ("lstat", "oldlstat", "lstat64", "readlink",
                                                  "lgetxattr", "llistxattr")},
    "newfstatat": _path_at(0, 1, 3, empty=True),
    "fstatat64": _path_at(0, 1, 3, empty=True),
    "statx": _path_at(0, 1, 2, empty=True),
    "readlinkat": _path_at(0, 1, follow=False),
    "access": _access(None, 0, 1, None),
    "faccessat": _access(0, 1, 2, None),
    "faccessat2": _access(0, 1, 2, 3),
    "execve": _execve(None, 0, None),
    "execveat": _execve(0, 1, 4),
    "mkdir": _mode(1, _path(0, write=True, create=True, follow_final=False)),
    "mkdirat": _mode(2, _path_at(0, 1, write=True, create=True, follow=False)),
    "mknod": _mknod(None, 0, 1),
    "mknodat": _mknod(0, 1, 2),
    **{n: _path(0, write=True, follow_final=False) for n in ("unlink", "rmdir")},
    "unlinkat": _path_at(0, 1, write=True, follow=False),
    "rename": _two((None, 0), (None, 1)),
    "renameat": _two((0, 1), (2, 3)),
    "renameat2": _two((0, 1), (2, 3)),
    "link": _two((None, 0), (None, 1), link=True),
    "linkat": _two((0, 1), (2, 3), link=True, flags_i=4),
    "symlink": _path(1, write=True, create=True, follow_final=False),
    "symlinkat": _path_at(1, 2, write=True, create=True, follow=False),
    "chmod": _mode(1, _path(0, write=True, metadata=True)),
    "fchmodat": _mode(2, _path_at(0, 1, write=True, metadata=True)),
    "fchmod": _mode(1, _fd_write()),
    **{n: _path(0, write=True, metadata=True) for n in ("chown", "chown32", "utime", "utimes",
                                                         "setxattr", "removexattr")},
    **{n: _path(0, write=True, metadata=True, follow_final=False)
       for n in ("lchown", "lchown32", "lsetxattr", "lremovexattr")},
    "fchownat": _path_at(0, 1, 4, empty=True, write=True, metadata=True),
    **{n: _fd_write() for n in ("fchown", "fchown32", "fsetxattr", "fremovexattr")},
    **{n: _path(0, write=True) for n in ("truncate", "truncate64")},
    "futimesat": _path_at(0, 1, empty=True, write=True, metadata=True),
    **{n: _path_at(0, 1, 3, empty=True, write=True, metadata=True)
       for n in ("utimensat", "utimensat_time64")},
    "inotify_add_watch": _inotify,
    "fchdir": _fchdir,
    "getcwd": _getcwd,
    **{n: _socket for n in ("socket", "socketpair")},
    **{n: _socket_fd for n in ("bind", "connect", "listen", "accept", "accept4", "sendto",
                               "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
                               "getsockname", "getpeername", "shutdown", "setsockopt",
                               "getsockopt", "send", "recv")},
    "socketcall": _socketcall,
    "clone": _clone,
    "seccomp": _seccomp,
    "ioctl": _ioctl,
}
