"""File-system system calls.  Every path goes through the sandbox; every descriptor is a
host descriptor of our own (the guest's numbers map to them in ``kernel.fds``)."""

from __future__ import annotations

import os
import stat as st_mod
from typing import Any

from emutrace.isa.base import GuestError
from emutrace.machine.linux import file_size
from emutrace.machine.linux.kernel import MAX_RW_COUNT, FileDesc, LinuxKernel
from emutrace.machine.linux.served_io import open_served, read_fd, served_stat, write_fd
from emutrace.machine.linux.table import syscall
from emutrace.machine.linux.vfs import DT_OF_KIND, inode
from emutrace.sandbox import Virtual

# open(2) flags we translate from the guest's numbering to the host's, by name
OPEN_FLAGS = ("O_CREAT", "O_EXCL", "O_NOCTTY", "O_TRUNC", "O_APPEND", "O_NONBLOCK",
              "O_DIRECTORY", "O_NOFOLLOW", "O_DSYNC", "O_SYNC", "O_PATH")
DT_TYPES = ((st_mod.S_ISDIR, 4), (st_mod.S_ISREG, 8), (st_mod.S_ISLNK, 10), (st_mod.S_ISCHR, 2),
            (st_mod.S_ISBLK, 6), (st_mod.S_ISFIFO, 1), (st_mod.S_ISSOCK, 12))
PROC_SELF_EXE = (b"/proc/self/exe", b"/proc/self/fd/exe")

K = LinuxKernel
# permission and sticky bits only: a guest never creates set-user-ID or set-group-ID files
# (emutrace may run as root; such a file would be a host privilege escalation)
GUEST_MODE_BITS = 0o1777


def _base(k: K, dirfd: int) -> bytes | None:
    if k.int32(dirfd) == k.const("AT_FDCWD"):
        return None
    return current_path(k, k.fd(dirfd))


def current_path(k: K, desc: FileDesc) -> bytes:
    """The guest path of a descriptor's object now (a directory renamed since it was opened
    under its new name, as Linux's descriptors name the object); a served one's own."""
    known = os.fsencode(desc.guest_path)
    return known if desc.node is not None else k.sandbox.guest_path_of(desc.host_fd, known)


def _resolve(k: K, dirfd: int, path_addr: int, **kw: Any) -> str:
    return str(k.sandbox.resolve(k.string(path_addr), base=_base(k, dirfd), **kw))


def _host_open_flags(k: K, flags: int) -> int:
    host = flags & 3  # O_ACCMODE: 0, 1, 2 on every Linux ISA
    for name in OPEN_FLAGS:
        if name in k.abi.constants and flags & k.abi.constants[name]:
            host |= getattr(os, name, 0)
    return host


# ---------------------------------------------------------------- open / close
def _open_tmpfile(k: K, dirfd: int, path_addr: int, flags: int, mode: int) -> int:
    """open(2) O_TMPFILE: an unnamed file in the directory, so the directory itself must be
    one the guest may create in (writable, or inside a writable one); O_WRONLY or O_RDWR
    is required (EINVAL otherwise, as Linux's build_open_flags)."""
    if flags & 3 == 0:
        raise GuestError("EINVAL")
    directory = str(k.sandbox.resolve(k.string(path_addr), base=_base(k, dirfd)))
    if not k.sandbox.is_writable(os.path.join(directory, ".tmpfile")):
        raise GuestError("EACCES")
    host_flags = (flags & 3) | os.O_TMPFILE | os.O_CLOEXEC
    if flags & k.abi.constants["O_EXCL"]:
        host_flags |= os.O_EXCL  # never linked into the tree later
    hfd = os.open(directory, host_flags, mode & GUEST_MODE_BITS)
    return k.new_fd(FileDesc(hfd, k.sandbox.to_guest(directory) + "/#tmpfile",
                             cloexec=bool(flags & k.abi.constants["O_CLOEXEC"])))


def _openat(k: K, dirfd: int, path_addr: int, flags: int, mode: int) -> int:
    c = k.abi.constants
    if "O_TMPFILE" in c and flags & c["O_TMPFILE"] == c["O_TMPFILE"]:
        return _open_tmpfile(k, dirfd, path_addr, flags, mode)
    writes = flags & 3 != 0 or flags & (c["O_CREAT"] | c["O_TRUNC"] | c["O_APPEND"])
    excl = flags & c["O_CREAT"] and flags & c["O_EXCL"]
    found = k.sandbox.lookup(k.string(path_addr), base=_base(k, dirfd), write=bool(writes),
                             create=bool(flags & c["O_CREAT"]),
                             follow_final=not (flags & c["O_NOFOLLOW"] or excl))
    if isinstance(found, Virtual):
        return k.new_fd(open_served(k, found, flags))
    host = str(found)
    hfd = os.open(host, _host_open_flags(k, flags) | os.O_CLOEXEC, mode & GUEST_MODE_BITS)
    try:
        guest = k.sandbox.to_guest(host)
    except ValueError:
        guest = host
    return k.new_fd(FileDesc(hfd, guest, cloexec=bool(flags & c["O_CLOEXEC"])))


@syscall("openat")
def sys_openat(k: K, a: tuple[int, ...]) -> int:
    return _openat(k, a[0], a[1], a[2], a[3])


@syscall("open")
def sys_open(k: K, a: tuple[int, ...]) -> int:
    return _openat(k, k.const("AT_FDCWD"), a[0], a[1], a[2])


@syscall("creat")
def sys_creat(k: K, a: tuple[int, ...]) -> int:
    c = k.abi.constants
    return _openat(k, c["AT_FDCWD"], a[0], c["O_CREAT"] | c["O_WRONLY"] | c["O_TRUNC"], a[1])


@syscall("close")
def sys_close(k: K, a: tuple[int, ...]) -> int:
    desc = k.fd(a[0])
    del k.fds[k.int32(a[0])]
    if not any(d.host_fd == desc.host_fd for d in k.fds.values()):
        os.close(desc.host_fd)
    return 0


# ---------------------------------------------------------------- read / write
@syscall("read")
def sys_read(k: K, a: tuple[int, ...]) -> int:
    return read_fd(k, k.fd(a[0]), a[1], a[2])


@syscall("write")
def sys_write(k: K, a: tuple[int, ...]) -> int:
    return write_fd(k, k.fd(a[0]), a[1], a[2])


UIO_MAXIOV = 1024  # include/uapi/linux/uio.h: more iovecs is EINVAL


def _iovecs(k: K, addr: int, count: int) -> list[tuple[int, int]]:
    if count > UIO_MAXIOV:
        raise GuestError("EINVAL")
    words = k.unpack_words(k.read(addr, 2 * k.word * count))
    return list(zip(words[0::2], words[1::2], strict=True))


@syscall("readv")
def sys_readv(k: K, a: tuple[int, ...]) -> int:
    total, desc = 0, k.fd(a[0])
    for base, length in _iovecs(k, a[1], a[2]):
        length = min(length, MAX_RW_COUNT - total)  # the kernel's cap on the sum
        try:
            got = read_fd(k, desc, base, length)
        except GuestError:
            if total:
                break
            raise
        total += got
        if got < length or total >= MAX_RW_COUNT:
            break
    return total


@syscall("writev")
def sys_writev(k: K, a: tuple[int, ...]) -> int:
    total, desc = 0, k.fd(a[0])
    for base, length in _iovecs(k, a[1], a[2]):
        length = min(length, MAX_RW_COUNT - total)  # the kernel's cap on the sum
        if not length:
            continue
        try:
            put = write_fd(k, desc, base, length)
        except GuestError:
            if total:
                break
            raise
        total += put
        if put < length or total >= MAX_RW_COUNT:
            break
    return total


@syscall("pread64")
def sys_pread64(k: K, a: tuple[int, ...]) -> int:
    offset, _ = k.arg64(a, 3)
    return read_fd(k, k.fd(a[0]), a[1], a[2], offset)


@syscall("pwrite64")
def sys_pwrite64(k: K, a: tuple[int, ...]) -> int:
    offset, _ = k.arg64(a, 3)
    return write_fd(k, k.fd(a[0]), a[1], a[2], offset)


@syscall("lseek")
def sys_lseek(k: K, a: tuple[int, ...]) -> int:
    return os.lseek(k.fd(a[0]).host_fd, k.signed(a[1]), _whence(a[2]))  # off_t: a long


SEEK_MAX = 4  # SEEK_SET, CUR, END, DATA, HOLE (include/uapi/linux/fs.h)


def _whence(value: int) -> int:
    if not 0 <= value <= SEEK_MAX:
        raise GuestError("EINVAL")
    return value


@syscall("_llseek")
def sys_llseek(k: K, a: tuple[int, ...]) -> int:
    offset = (a[1] << 32) | a[2]
    pos = os.lseek(k.fd(a[0]).host_fd, offset - (1 << 64) if offset >> 63 else offset,
                   _whence(a[4]))
    k.write(a[3], pos.to_bytes(8, k.endian))
    return 0


@syscall("sendfile", "sendfile64")
def sys_sendfile(k: K, a: tuple[int, ...]) -> int:
    raise GuestError("ENOSYS")  # callers (busybox cat, coreutils) fall back to read/write


@syscall("copy_file_range")
def sys_copy_file_range(k: K, a: tuple[int, ...]) -> int:
    """copy_file_range(2) between two host files: the host's call, with the guest's loff_t
    offsets when given (read and written back in the guest's byte order).  An object
    emutrace serves (/dev, /proc) is EINVAL, as Linux answers for anything but regular
    files; callers (coreutils cat, cp) then read and write."""
    if a[5]:
        raise GuestError("EINVAL")  # no flags are defined
    src, dst = k.fd(a[0]), k.fd(a[2])
    if src.node is not None or dst.node is not None:
        raise GuestError("EINVAL")
    offsets = [_loff(k, a[1]), _loff(k, a[3])]
    if any(off is not None and off < 0 for off in offsets):
        raise GuestError("EINVAL")
    done = os.copy_file_range(src.host_fd, dst.host_fd, min(a[4], MAX_RW_COUNT),
                              offsets[0], offsets[1])
    for addr, off in ((a[1], offsets[0]), (a[3], offsets[1])):
        if off is not None:
            k.write(addr, (off + done).to_bytes(8, k.endian, signed=True))
    return done


def _loff(k: K, addr: int) -> int | None:
    """A loff_t the guest points at, or None for a NULL pointer (the file's position)."""
    if not addr:
        return None
    return int.from_bytes(k.read(addr, 8), k.endian, signed=True)


# ---------------------------------------------------------------- stat family
def _stat_values(s: os.stat_result) -> dict[str, int]:
    out = {"st_dev": s.st_dev, "st_ino": s.st_ino, "__st_ino": s.st_ino, "st_mode": s.st_mode,
           "st_nlink": s.st_nlink,
           "st_uid": s.st_uid, "st_gid": s.st_gid, "st_rdev": s.st_rdev, "st_size": s.st_size,
           "st_blksize": s.st_blksize, "st_blocks": s.st_blocks}
    for t in ("atime", "mtime", "ctime"):
        ns = getattr(s, f"st_{t}_ns")
        out[f"st_{t}"], out[f"st_{t}_nsec"] = divmod(ns, 10**9)
    return out


def _stat_at(k: K, dirfd: int, path_addr: int, flags: int) -> os.stat_result:
    c = k.abi.constants
    path = k.string(path_addr)
    if not path and flags & c.get("AT_EMPTY_PATH", 0x1000):
        return _fstat(k, k.fd(dirfd))
    follow = not flags & c["AT_SYMLINK_NOFOLLOW"]
    found = k.sandbox.lookup(path, base=_base(k, dirfd), follow_final=follow)
    if isinstance(found, Virtual):
        return served_stat(k, found)
    return os.stat(str(found), follow_symlinks=follow)


def _fstat(k: K, desc: FileDesc) -> os.stat_result:
    if desc.node is not None:
        return served_stat(k, Virtual(desc.node, os.fsencode(desc.guest_path)))
    return os.fstat(desc.host_fd)


def _put_stat(k: K, layout: str, addr: int, s: os.stat_result) -> int:
    k.write(addr, k.struct_bytes(layout, _stat_values(s)))
    return 0


@syscall("fstat")
def sys_fstat(k: K, a: tuple[int, ...]) -> int:
    return _put_stat(k, "stat", a[1], _fstat(k, k.fd(a[0])))


@syscall("fstat64")
def sys_fstat64(k: K, a: tuple[int, ...]) -> int:
    return _put_stat(k, "stat64", a[1], _fstat(k, k.fd(a[0])))


@syscall("newfstatat")
def sys_newfstatat(k: K, a: tuple[int, ...]) -> int:
    return _put_stat(k, "stat", a[2], _stat_at(k, a[0], a[1], a[3]))


@syscall("fstatat64")
def sys_fstatat64(k: K, a: tuple[int, ...]) -> int:
    return _put_stat(k, "stat64", a[2], _stat_at(k, a[0], a[1], a[3]))


def _path_stat(layout: str, nofollow: bool) -> Any:
    def handler(k: K, a: tuple[int, ...]) -> int:
        flags = k.const("AT_SYMLINK_NOFOLLOW") if nofollow else 0
        return _put_stat(k, layout, a[1], _stat_at(k, k.const("AT_FDCWD"), a[0], flags))
    return handler


syscall("stat")(_path_stat("stat", False))
syscall("lstat")(_path_stat("stat", True))
syscall("stat64")(_path_stat("stat64", False))
syscall("lstat64")(_path_stat("stat64", True))


@syscall("statx")
def sys_statx(k: K, a: tuple[int, ...]) -> int:
    s = _stat_at(k, a[0], a[1], a[2])
    values = {"stx_mask": k.abi.constants.get("STATX_BASIC_STATS", 0x7FF),
              "stx_blksize": s.st_blksize, "stx_nlink": s.st_nlink, "stx_uid": s.st_uid,
              "stx_gid": s.st_gid, "stx_mode": s.st_mode, "stx_ino": s.st_ino,
              "stx_size": s.st_size, "stx_blocks": s.st_blocks,
              "stx_rdev_major": os.major(s.st_rdev), "stx_rdev_minor": os.minor(s.st_rdev),
              "stx_dev_major": os.major(s.st_dev), "stx_dev_minor": os.minor(s.st_dev)}
    blob = bytearray(k.struct_bytes("statx", values))
    ts = k.abi.structs["statx_timestamp"]
    for name, ns in (("atime", s.st_atime_ns), ("mtime", s.st_mtime_ns),
                     ("ctime", s.st_ctime_ns), ("btime", s.st_ctime_ns)):
        off = k.abi.structs["statx"].fields[f"stx_{name}"][0]
        sec, nsec = divmod(ns, 10**9)
        blob[off:off + ts.size] = k.struct_bytes("statx_timestamp",
                                                 {"tv_sec": sec, "tv_nsec": nsec})
    k.write(a[4], bytes(blob))
    return 0


# ---------------------------------------------------------------- directories
@syscall("getdents64")
def sys_getdents64(k: K, a: tuple[int, ...]) -> int:
    desc = k.fd(a[0])
    if desc.dir_entries is None and desc.node is not None:
        desc.dir_entries = _served_entries(desc)
    if desc.dir_entries is None:
        here = current_path(k, desc)
        host = str(k.sandbox.resolve(here))
        entries = [(b".", os.stat(host).st_ino, 4), (b"..", os.stat(host + "/..").st_ino, 4)]
        with os.scandir(os.fsencode(host)) as it:
            for e in it:
                mode = e.stat(follow_symlinks=False).st_mode
                dtype = next((t for test, t in DT_TYPES if test(mode)), 0)
                entries.append((e.name, e.inode(), dtype))
        if here == b"/":  # the served trees are there whatever the root holds
            names = {name for name, _, _ in entries}
            entries += [(name, inode(b"/" + name), 4) for name in k.sandbox.mounts
                        if name not in names]
        desc.dir_entries = entries
    layout = k.abi.structs["linux_dirent64"]
    name_off = layout.fields["d_name"][0]
    out = bytearray()
    while desc.dir_pos < len(desc.dir_entries):
        name, ino, dtype = desc.dir_entries[desc.dir_pos]
        reclen = (name_off + len(name) + 1 + 7) & ~7
        if len(out) + reclen > a[2]:
            break
        rec = bytearray(k.struct_bytes("linux_dirent64", {
            "d_ino": ino, "d_off": desc.dir_pos + 1, "d_reclen": reclen, "d_type": dtype}))
        rec[name_off:] = name + b"\0"
        out += rec.ljust(reclen, b"\0")
        desc.dir_pos += 1
    if not out and desc.dir_pos < len(desc.dir_entries):
        raise GuestError("EINVAL")  # buffer too small for one entry
    k.write(a[1], bytes(out))
    return len(out)


def _served_entries(desc: FileDesc) -> list[tuple[bytes, int, int]]:
    """A served directory's listing: ".", ".." and its entries (ENOTDIR for another
    object, as getdents of a file gives)."""
    if desc.node.kind != "dir":
        raise GuestError("ENOTDIR")
    here = os.fsencode(desc.guest_path)
    parent = os.path.dirname(here.rstrip(b"/")) or b"/"
    out = [(b".", inode(here), 4), (b"..", inode(parent), 4)]
    for name, child in desc.node.entries().items():
        out.append((name, inode(here + b"/" + name), DT_OF_KIND[child.kind]))
    return out


@syscall("getcwd")
def sys_getcwd(k: K, a: tuple[int, ...]) -> int:
    cwd = os.fsencode(k.sandbox.guest_cwd) + b"\0"
    if len(cwd) > a[1]:
        raise GuestError("ERANGE")
    k.write(a[0], cwd)
    return len(cwd)


@syscall("chdir")
def sys_chdir(k: K, a: tuple[int, ...]) -> int:
    k.sandbox.chdir(k.string(a[0]))
    return 0


@syscall("fchdir")
def sys_fchdir(k: K, a: tuple[int, ...]) -> int:
    k.sandbox.chdir(current_path(k, k.fd(a[0])))
    return 0


def _readlink(k: K, dirfd: int, path_addr: int, buf: int, size: int) -> int:
    path = k.string(path_addr)
    found = k.sandbox.lookup(path, base=_base(k, dirfd), follow_final=False)
    if isinstance(found, Virtual):
        if found.node.kind not in ("link", "fd"):
            raise GuestError("EINVAL")  # readlink(2): not a symbolic link
        target = found.node.target()
    else:
        target = os.readlink(os.fsencode(str(found)))
    k.write(buf, target[:size])
    return min(len(target), size)


@syscall("readlinkat")
def sys_readlinkat(k: K, a: tuple[int, ...]) -> int:
    return _readlink(k, a[0], a[1], a[2], a[3])


@syscall("readlink")
def sys_readlink(k: K, a: tuple[int, ...]) -> int:
    return _readlink(k, k.const("AT_FDCWD"), a[0], a[1], a[2])


def _access(k: K, dirfd: int, path_addr: int, mode: int, flags: int) -> int:
    found = k.sandbox.lookup(k.string(path_addr), base=_base(k, dirfd),
                             write=bool(mode & os.W_OK),
                             follow_final=not flags & k.const("AT_SYMLINK_NOFOLLOW"))
    if isinstance(found, Virtual):
        # served objects: readable; searchable directories; nothing executable
        if mode & os.X_OK and found.node.kind != "dir":
            raise GuestError("EACCES")
        return 0
    host = str(found)
    if not os.path.lexists(host):
        raise GuestError("ENOENT")
    if not os.access(host, mode):
        raise GuestError("EACCES")
    return 0


@syscall("faccessat", "faccessat2")
def sys_faccessat(k: K, a: tuple[int, ...]) -> int:
    return _access(k, a[0], a[1], a[2], a[3] if len(a) > 3 else 0)


@syscall("access")
def sys_access(k: K, a: tuple[int, ...]) -> int:
    return _access(k, k.const("AT_FDCWD"), a[0], a[1], 0)


# ---------------------------------------------------------------- changing the tree
@syscall("unlinkat")
def sys_unlinkat(k: K, a: tuple[int, ...]) -> int:
    host = _resolve(k, a[0], a[1], write=True, follow_final=False)
    if a[2] & k.const("AT_REMOVEDIR"):
        os.rmdir(host)
    else:
        os.unlink(host)
    return 0


@syscall("unlink")
def sys_unlink(k: K, a: tuple[int, ...]) -> int:
    os.unlink(_resolve(k, k.const("AT_FDCWD"), a[0], write=True, follow_final=False))
    return 0


@syscall("rmdir")
def sys_rmdir(k: K, a: tuple[int, ...]) -> int:
    os.rmdir(_resolve(k, k.const("AT_FDCWD"), a[0], write=True, follow_final=False))
    return 0


@syscall("mkdirat")
def sys_mkdirat(k: K, a: tuple[int, ...]) -> int:
    os.mkdir(_resolve(k, a[0], a[1], write=True, create=True, follow_final=False),
             a[2] & GUEST_MODE_BITS)
    return 0


@syscall("mkdir")
def sys_mkdir(k: K, a: tuple[int, ...]) -> int:
    return sys_mkdirat(k, (k.const("AT_FDCWD"), a[0], a[1]))


@syscall("renameat", "renameat2")
def sys_renameat(k: K, a: tuple[int, ...]) -> int:
    if len(a) > 4 and a[4]:
        raise GuestError("EINVAL")  # RENAME_NOREPLACE/EXCHANGE/WHITEOUT not supported
    old = _resolve(k, a[0], a[1], write=True, follow_final=False)
    new = _resolve(k, a[2], a[3], write=True, follow_final=False)  # may replace: no create
    os.rename(old, new)
    return 0


@syscall("rename")
def sys_rename(k: K, a: tuple[int, ...]) -> int:
    fdcwd = k.const("AT_FDCWD")
    return sys_renameat(k, (fdcwd, a[0], fdcwd, a[1]))


@syscall("ftruncate")
def sys_ftruncate(k: K, a: tuple[int, ...]) -> int:
    length = k.signed(a[1])
    if length < 0:
        raise GuestError("EINVAL")
    file_size.check_length(k, length)
    os.ftruncate(k.fd(a[0]).host_fd, length)
    return 0


@syscall("ftruncate64")
def sys_ftruncate64(k: K, a: tuple[int, ...]) -> int:
    length, _ = k.arg64(a, 1)
    file_size.check_length(k, length)
    os.ftruncate(k.fd(a[0]).host_fd, length)
    return 0
