"""File metadata, links, special files and syncing: chmod, chown, link, symlink, utimensat,
mknod, truncate, fsync and their variants.  Every path goes through the sandbox with the
flags its guidance gives (``emutrace/sandbox.py``): metadata changes only inside the
directories the user made writable; a guest never gains a set-user-ID bit, a device node or
another owner."""

from __future__ import annotations

import os
import time

from emutrace.isa.base import GuestError
from emutrace.machine.linux import file_size
from emutrace.machine.linux.kernel import FileDesc, LinuxKernel
from emutrace.machine.linux.sys_fs import GUEST_MODE_BITS, _base, _resolve
from emutrace.machine.linux.table import syscall
from emutrace.machine.linux.vfs import FdLink
from emutrace.sandbox import Virtual

K = LinuxKernel
# utimensat(2) tv_nsec markers, the same on every Linux ISA (include/uapi/linux/stat.h)
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
DELETED = " (deleted)"  # the end of /proc/self/fd/N's text for a file without a name
NO_CHANGE = 0xFFFFFFFF  # chown(2): (uid_t)-1 leaves the owner as it is


def _flag(k: K, flags: int, name: str) -> bool:
    return bool(flags & k.abi.constants[name])


def _writable_desc(k: K, desc: FileDesc) -> int:
    """The host descriptor of an open file the guest may change (fchmod, fchown,
    futimens): one whose name lies inside a writable directory (a file whose name is gone,
    " (deleted)" in its link: its directory)."""
    if desc.node is not None:
        raise GuestError("EPERM")  # a served /dev or /proc object: never changed
    host = os.readlink(f"/proc/self/fd/{desc.host_fd}")
    if host.endswith(DELETED) and os.fstat(desc.host_fd).st_nlink == 0:
        host = os.path.join(os.path.dirname(host), ".deleted")
    if not k.sandbox.is_writable(host):
        raise GuestError("EPERM")
    return desc.host_fd


def _target(k: K, dirfd: int, path_addr: int, flags: int) -> tuple[str | int, bool]:
    """What an *at metadata call changes: a sandboxed host path (following a final
    symlink unless AT_SYMLINK_NOFOLLOW), or with AT_EMPTY_PATH and "" the descriptor."""
    if path_addr and k.string(path_addr):
        follow = not _flag(k, flags, "AT_SYMLINK_NOFOLLOW")
        return _resolve(k, dirfd, path_addr, write=True, metadata=True,
                        follow_final=follow), follow
    if path_addr and not flags & k.abi.constants.get("AT_EMPTY_PATH", 0x1000):
        raise GuestError("ENOENT")
    return _writable_desc(k, k.fd(dirfd)), True


# ---------------------------------------------------------------- permissions
def _chmod(k: K, host: str | int, mode: int, follow: bool = True) -> int:
    if not follow:
        raise GuestError("EOPNOTSUPP")  # fchmodat(AT_SYMLINK_NOFOLLOW): as Linux's links
    os.chmod(host, mode & GUEST_MODE_BITS)
    return 0


@syscall("fchmodat", "fchmodat2")
def sys_fchmodat(k: K, a: tuple[int, ...]) -> int:
    flags = a[3] if len(a) > 3 else 0
    host, follow = _target(k, a[0], a[1], flags)
    return _chmod(k, host, a[2], follow)


@syscall("chmod")
def sys_chmod(k: K, a: tuple[int, ...]) -> int:
    return sys_fchmodat(k, (k.const("AT_FDCWD"), a[0], a[1], 0))


@syscall("fchmod")
def sys_fchmod(k: K, a: tuple[int, ...]) -> int:
    return _chmod(k, _writable_desc(k, k.fd(a[0])), a[1])


# ---------------------------------------------------------------- owners
def _chown(k: K, host: str | int, uid: int, gid: int, follow: bool) -> int:
    """The owner stays the user's: a change to the present owner and group (or -1) is
    accepted, any other is EPERM, as for an unprivileged process (chown(2))."""
    now = os.stat(host, follow_symlinks=follow)
    for wanted, present in ((uid & NO_CHANGE, now.st_uid), (gid & NO_CHANGE, now.st_gid)):
        if wanted not in (NO_CHANGE, present):
            raise GuestError("EPERM")
    return 0


@syscall("fchownat")
def sys_fchownat(k: K, a: tuple[int, ...]) -> int:
    host, follow = _target(k, a[0], a[1], a[4])
    return _chown(k, host, a[2], a[3], follow)


@syscall("chown", "chown32")
def sys_chown(k: K, a: tuple[int, ...]) -> int:
    return sys_fchownat(k, (k.const("AT_FDCWD"), a[0], a[1], a[2], 0))


@syscall("lchown", "lchown32")
def sys_lchown(k: K, a: tuple[int, ...]) -> int:
    return sys_fchownat(k, (k.const("AT_FDCWD"), a[0], a[1], a[2],
                            k.const("AT_SYMLINK_NOFOLLOW")))


@syscall("fchown", "fchown32")
def sys_fchown(k: K, a: tuple[int, ...]) -> int:
    return _chown(k, _writable_desc(k, k.fd(a[0])), a[1], a[2], True)


# ---------------------------------------------------------------- links
def _linked_desc(k: K, desc: FileDesc) -> str:
    """The host name that links an open file (linkat of /proc/self/fd/N with
    AT_SYMLINK_FOLLOW, or of the descriptor with AT_EMPTY_PATH: how an O_TMPFILE file gets
    its name): a file not yet in the tree (the guest made it in a writable directory), or
    one the guest may write anyway."""
    if desc.node is not None:
        raise GuestError("EXDEV")  # an object emutrace serves: not on the host's file system
    if os.fstat(desc.host_fd).st_nlink:
        _writable_desc(k, desc)
    return f"/proc/self/fd/{desc.host_fd}"


def _link_open_file(magic: str, new: str) -> None:
    """linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, new, AT_SYMLINK_FOLLOW) on the host
    (os.link without a directory descriptor makes link(2), which does not follow)."""
    root = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        os.link(magic, new, src_dir_fd=root, follow_symlinks=True)
    finally:
        os.close(root)


@syscall("linkat")
def sys_linkat(k: K, a: tuple[int, ...]) -> int:
    follow = _flag(k, a[4], "AT_SYMLINK_FOLLOW")
    new = _resolve(k, a[2], a[3], write=True, create=True, follow_final=False)
    if not k.string(a[1]) and _flag(k, a[4], "AT_EMPTY_PATH"):
        _link_open_file(_linked_desc(k, k.fd(a[0])), new)
        return 0
    found = k.sandbox.lookup(k.string(a[1]), base=_base(k, a[0]), follow_final=follow,
                             write=not follow)
    if isinstance(found, Virtual):
        if found.node.kind != "fd" or not isinstance(found.node, FdLink):
            raise GuestError("EXDEV")
        _link_open_file(_linked_desc(k, k.fd(found.node.number)), new)
        return 0
    # the old path writable too: a hard link must not make a read-only file writable
    old = _resolve(k, a[0], a[1], write=True, follow_final=follow)
    os.link(old, new, follow_symlinks=False)
    return 0


@syscall("link")
def sys_link(k: K, a: tuple[int, ...]) -> int:
    fdcwd = k.const("AT_FDCWD")
    return sys_linkat(k, (fdcwd, a[0], fdcwd, a[1], 0))


@syscall("symlinkat")
def sys_symlinkat(k: K, a: tuple[int, ...]) -> int:
    # the text is stored as it is: the sandbox reads it inside the root when followed
    text = k.string(a[0])
    if not text:
        raise GuestError("ENOENT")
    os.symlink(text, _resolve(k, a[1], a[2], write=True, create=True, follow_final=False))
    return 0


@syscall("symlink")
def sys_symlink(k: K, a: tuple[int, ...]) -> int:
    return sys_symlinkat(k, (a[0], k.const("AT_FDCWD"), a[1]))


# ---------------------------------------------------------------- special files
@syscall("mknodat")
def sys_mknodat(k: K, a: tuple[int, ...]) -> int:
    """Regular files and FIFOs only; a device node or socket file is EPERM, as for an
    unprivileged process (mknod(2))."""
    c = k.abi.constants
    kind = a[2] & c["S_IFMT"]
    if kind not in (0, c["S_IFREG"], c["S_IFIFO"]):
        raise GuestError("EPERM")
    host = _resolve(k, a[0], a[1], write=True, create=True, follow_final=False)
    if kind == c["S_IFIFO"]:
        os.mkfifo(host, a[2] & GUEST_MODE_BITS)
    else:
        os.close(os.open(host, os.O_CREAT | os.O_EXCL | os.O_WRONLY, a[2] & GUEST_MODE_BITS))
    return 0


@syscall("mknod")
def sys_mknod(k: K, a: tuple[int, ...]) -> int:
    return sys_mknodat(k, (k.const("AT_FDCWD"), a[0], a[1], a[2]))


# ---------------------------------------------------------------- times
def _pair(k: K, layout: str, addr: int, sub: str) -> list[tuple[int, int]]:
    """Two (seconds, sub-second) fields of the guest's timespec or timeval array."""
    lay = k.abi.structs[layout]
    blob = k.read(addr, 2 * lay.size)
    (s_off, s_size), (n_off, n_size) = lay.fields["tv_sec"], lay.fields[sub]
    out = []
    for part in (blob[:lay.size], blob[lay.size:]):
        out.append((int.from_bytes(part[s_off:s_off + s_size], k.endian, signed=True),
                    int.from_bytes(part[n_off:n_off + n_size], k.endian, signed=True)))
    return out


def _set_times(host: str | int, wanted: list[tuple[int, int]], follow: bool) -> int:
    """utimensat(2)'s rule: UTIME_NOW is the present time, UTIME_OMIT keeps the time."""
    present = os.stat(host, follow_symlinks=follow)
    now = time.time_ns()
    ns = []
    for (sec, nsec), kept in zip(wanted, (present.st_atime_ns, present.st_mtime_ns), strict=True):
        if nsec == UTIME_NOW:
            ns.append(now)
        elif nsec == UTIME_OMIT:
            ns.append(kept)
        elif not 0 <= nsec < 10**9:
            raise GuestError("EINVAL")
        else:
            ns.append(sec * 10**9 + nsec)
    os.utime(host, ns=(ns[0], ns[1]), follow_symlinks=follow)
    return 0


def _utimensat(k: K, a: tuple[int, ...], layout: str) -> int:
    if a[1]:
        host, follow = _target(k, a[0], a[1], a[3])
    else:  # a NULL path: the descriptor itself (futimens)
        host, follow = _writable_desc(k, k.fd(a[0])), True
    if not a[2]:
        os.utime(host, follow_symlinks=follow)
        return 0
    return _set_times(host, _pair(k, layout, a[2], "tv_nsec"), follow)


@syscall("utimensat")
def sys_utimensat(k: K, a: tuple[int, ...]) -> int:
    return _utimensat(k, a, "timespec")


@syscall("utimensat_time64")
def sys_utimensat64(k: K, a: tuple[int, ...]) -> int:
    return _utimensat(k, a, "kernel_timespec")


@syscall("utimes")
def sys_utimes(k: K, a: tuple[int, ...]) -> int:
    """utimes(2): two timevals, or NULL for now."""
    host = _resolve(k, k.const("AT_FDCWD"), a[0], write=True, metadata=True)
    if not a[1]:
        os.utime(host)
        return 0
    wanted = _pair(k, "timeval", a[1], "tv_usec")
    if any(not 0 <= usec < 10**6 for _, usec in wanted):
        raise GuestError("EINVAL")
    return _set_times(host, [(sec, usec * 1000) for sec, usec in wanted], True)


# ---------------------------------------------------------------- sizes and syncing
@syscall("truncate")
def sys_truncate(k: K, a: tuple[int, ...]) -> int:
    length = k.signed(a[1])
    if length < 0:
        raise GuestError("EINVAL")
    file_size.check_length(k, length)
    os.truncate(_resolve(k, k.const("AT_FDCWD"), a[0], write=True), length)
    return 0


@syscall("truncate64")
def sys_truncate64(k: K, a: tuple[int, ...]) -> int:
    length, _ = k.arg64(a, 1)
    return sys_truncate(k, (a[0], length))


@syscall("fsync", "fdatasync")
def sys_fsync(k: K, a: tuple[int, ...]) -> int:
    """The data reaches the host's page cache with every write; a served object or a pipe
    has nothing to sync (EINVAL, as Linux for a pipe)."""
    desc = k.fd(a[0])
    if desc.node is not None:
        raise GuestError("EINVAL")
    os.fsync(desc.host_fd)  # a pipe: the host's EINVAL
    return 0


@syscall("syncfs")
def sys_syncfs(k: K, a: tuple[int, ...]) -> int:
    k.fd(a[0])  # EBADF for a closed descriptor
    return 0  # the host's file systems are the user's to sync, not the guest's


@syscall("sync")
def sys_sync(k: K, a: tuple[int, ...]) -> int:
    return 0


