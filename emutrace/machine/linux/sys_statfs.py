"""File-system statistics: `statfs`, `fstatfs`, `statfs64`, `fstatfs64` (statfs(2)).  The
values are the host's for the file the sandbox resolves (as qemu-user passes them through:
`ls`, `find`, `sed -i` and `df` ask), written in the guest's layout of `struct statfs` /
`struct statfs64` from the ABI tables.  The host is asked through its C library's
`statfs64` / `fstatfs64` (Python's os.statvfs has no `f_type`).  The trees emutrace serves
answer as Linux's do: /proc is a proc file system, /dev a devtmpfs (tmpfs's magic), with
no blocks and no files counted."""

from __future__ import annotations

import ctypes
import os

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.table import syscall
from emutrace.sandbox import Virtual

K = LinuxKernel
COUNTS = ("f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree")
SCALARS = ("f_type", "f_bsize", *COUNTS, "f_namelen", "f_frsize", "f_flags")


class HostStatfs(ctypes.Structure):
    """glibc's `struct statfs64` (bits/statfs.h): __fsword_t is a long, the block and
    file counts 64-bit, f_fsid two ints."""

    _fields_ = [("f_type", ctypes.c_long), ("f_bsize", ctypes.c_long),
                ("f_blocks", ctypes.c_uint64), ("f_bfree", ctypes.c_uint64),
                ("f_bavail", ctypes.c_uint64), ("f_files", ctypes.c_uint64),
                ("f_ffree", ctypes.c_uint64), ("f_fsid", ctypes.c_int * 2),
                ("f_namelen", ctypes.c_long), ("f_frsize", ctypes.c_long),
                ("f_flags", ctypes.c_long), ("f_spare", ctypes.c_long * 4)]


_LIBC = ctypes.CDLL(None, use_errno=True)
# glibc's large-file names; a C library without them (musl) has 64-bit counts in statfs
_STATFS = getattr(_LIBC, "statfs64", None) or _LIBC.statfs
_FSTATFS = getattr(_LIBC, "fstatfs64", None) or _LIBC.fstatfs


def _host_statfs(where: str | int) -> HostStatfs:
    out = HostStatfs()
    if isinstance(where, int):
        rc = _FSTATFS(ctypes.c_int(where), ctypes.byref(out))
    else:
        rc = _STATFS(os.fsencode(where), ctypes.byref(out))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return out


# include/uapi/linux/magic.h
SERVED_MAGIC = {"proc": 0x9FA0, "dev": 0x01021994}  # PROC_SUPER_MAGIC, TMPFS_MAGIC
NAME_MAX = 255


def _served_statfs(guest_path: str) -> HostStatfs:
    out = HostStatfs()
    out.f_type = SERVED_MAGIC.get(guest_path.strip("/").split("/")[0], SERVED_MAGIC["dev"])
    out.f_bsize = out.f_frsize = 4096
    out.f_namelen = NAME_MAX
    return out


def _statfs_path(k: K, addr: int) -> HostStatfs:
    found = k.sandbox.lookup(k.string(addr))
    if isinstance(found, Virtual):
        return _served_statfs(os.fsdecode(found.guest_path))
    return _host_statfs(str(found))


def _statfs_fd(k: K, fd: int) -> HostStatfs:
    desc = k.fd(fd)
    if desc.node is not None:
        return _served_statfs(desc.guest_path)
    return _host_statfs(desc.host_fd)


def _put(k: K, layout: str, addr: int, s: HostStatfs) -> int:
    fields = k.abi.structs[layout].fields
    values = {name: getattr(s, name) & ((1 << 64) - 1) for name in SCALARS}
    # fs/statfs.c do_statfs_native: counts a 32-bit field cannot hold are EOVERFLOW
    for name in COUNTS:
        if values[name] >> (8 * fields[name][1]):
            raise GuestError("EOVERFLOW")
    blob = bytearray(k.struct_bytes(layout, values))
    off, _ = fields["f_fsid"]  # __kernel_fsid_t: int val[2], each in the guest's order
    for i, val in enumerate(s.f_fsid):
        blob[off + 4 * i:off + 4 * i + 4] = (val & 0xFFFFFFFF).to_bytes(4, k.endian)
    k.write(addr, bytes(blob))
    return 0


def _sized(k: K, layout: str, size: int) -> None:
    """statfs64(path, sz, buf): sz must be the guest's sizeof(struct statfs64) (or a size
    the ISA's kernel takes for it)."""
    if size != k.abi.structs[layout].size and size not in k.isa.statfs64_size_aliases:
        raise GuestError("EINVAL")


@syscall("statfs")
def sys_statfs(k: K, a: tuple[int, ...]) -> int:
    return _put(k, "statfs", a[1], _statfs_path(k, a[0]))


@syscall("fstatfs")
def sys_fstatfs(k: K, a: tuple[int, ...]) -> int:
    return _put(k, "statfs", a[1], _statfs_fd(k, a[0]))


@syscall("statfs64")
def sys_statfs64(k: K, a: tuple[int, ...]) -> int:
    _sized(k, "statfs64", a[1])
    return _put(k, "statfs64", a[2], _statfs_path(k, a[0]))


@syscall("fstatfs64")
def sys_fstatfs64(k: K, a: tuple[int, ...]) -> int:
    _sized(k, "statfs64", a[1])
    return _put(k, "statfs64", a[2], _statfs_fd(k, a[0]))
