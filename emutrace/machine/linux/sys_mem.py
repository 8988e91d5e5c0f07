"""Memory system calls: brk, mmap family, mprotect, madvise."""

from __future__ import annotations

import fcntl
import os

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.loader import UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE
from emutrace.machine.linux.memory import MMAP_MIN_ADDR, page_up
from emutrace.machine.linux.procfs import note_mapping
from emutrace.machine.linux.table import syscall

K = LinuxKernel


def _perms(k: K, prot: int) -> int:
    c = k.abi.constants
    return ((UC_PROT_READ if prot & c["PROT_READ"] else 0)
            | (UC_PROT_WRITE if prot & c["PROT_WRITE"] else 0)
            | (UC_PROT_EXEC if prot & c["PROT_EXEC"] else 0))


@syscall("brk")
def sys_brk(k: K, a: tuple[int, ...]) -> int:
    return k.space.set_brk(a[0]) if a[0] else k.space.brk


def _mmap(k: K, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
    c = k.abi.constants
    if length == 0 or offset & 0xFFF:
        raise GuestError("EINVAL")
    size = page_up(length)
    fixed = flags & (c["MAP_FIXED"] | c.get("MAP_FIXED_NOREPLACE", 0))
    if fixed:
        if addr & 0xFFF:
            raise GuestError("EINVAL")
        if addr < MMAP_MIN_ADDR:  # security_mmap_addr: the NULL pages stay unmapped
            raise GuestError("EPERM")
        if flags & c.get("MAP_FIXED_NOREPLACE", 0) and not k.space.is_free(addr, addr + size):
            raise GuestError("EEXIST")
        where = addr
    else:
        found = k.space.find_free(size, addr)
        if found is None:
            raise GuestError("ENOMEM")
        where = found
    host_fd, name = None, ""
    if not flags & c["MAP_ANONYMOUS"]:
        host_fd, name = k.fd(fd).host_fd, k.fd(fd).guest_path
        # mm/mmap.c: a shared writable mapping needs a descriptor open for writing
        # (and every file mapping one open for reading): else EACCES
        shared = flags & c["MAP_TYPE"] in (c["MAP_SHARED"], c["MAP_SHARED_VALIDATE"])
        access = fcntl.fcntl(host_fd, fcntl.F_GETFL) & os.O_ACCMODE
        if access == os.O_WRONLY or (shared and prot & c["PROT_WRITE"] and access != os.O_RDWR):
            raise GuestError("EACCES")
    k.space.map(where, size, _perms(k, prot))  # within --max-memory, else ENOMEM
    note_mapping(k, where, where + size, offset if host_fd is not None else 0, name)
    if host_fd is not None:
        # file-backed: a private copy of the file's bytes, read page-bounded chunks
        # (MAP_SHARED writes are not written back: documented limitation)
        pos = 0
        while pos < length:
            chunk = os.pread(host_fd, min(length - pos, 1 << 24), offset + pos)
            if not chunk:
                break
            k.write(where + pos, chunk)
            pos += len(chunk)
        if prot & c["PROT_EXEC"] and k.on_exec_map is not None:
            k.on_exec_map(os.readlink(f"/proc/self/fd/{host_fd}"), where, offset)
    return where


@syscall("mmap")
def sys_mmap(k: K, a: tuple[int, ...]) -> int:
    return _mmap(k, a[0], a[1], a[2], a[3], a[4], a[5])


@syscall("mmap2")
def sys_mmap2(k: K, a: tuple[int, ...]) -> int:
    return _mmap(k, a[0], a[1], a[2], a[3], a[4], a[5] * 4096)  # offset in 4 KiB units


@syscall("munmap")
def sys_munmap(k: K, a: tuple[int, ...]) -> int:
    if a[0] & 0xFFF:
        raise GuestError("EINVAL")
    k.space.unmap(a[0], a[1])
    return 0


@syscall("mprotect")
def sys_mprotect(k: K, a: tuple[int, ...]) -> int:
    if not k.space.protect(a[0], a[1], _perms(k, a[2])):
        raise GuestError("ENOMEM")
    return 0


@syscall("mremap")
def sys_mremap(k: K, a: tuple[int, ...]) -> int:
    old, old_size, new_size, flags = a[0], page_up(a[1]), page_up(a[2]), a[3]
    if old & 0xFFF or new_size == 0:
        raise GuestError("EINVAL")
    parts = k.space.mapped(old, old + old_size)
    if sum(hi - lo for lo, hi in parts) != old_size:
        raise GuestError("EFAULT")
    if new_size <= old_size:
        k.space.unmap(old + new_size, old_size - new_size)
        return old
    if k.space.is_free(old + old_size, old + new_size):
        k.space.map(old + old_size, new_size - old_size, 3)
        return old
    if not flags & k.const("MREMAP_MAYMOVE"):
        raise GuestError("ENOMEM")
    where = k.space.find_free(new_size)
    if where is None:
        raise GuestError("ENOMEM")
    data = k.read(old, old_size)
    k.space.map(where, new_size, 3)
    k.write(where, data)
    k.space.unmap(old, old_size)
    return where


@syscall("madvise", "mlock", "munlock", "msync")
def sys_madvise(k: K, a: tuple[int, ...]) -> int:
    return 0  # advice only; nothing to do for an emulated, fully resident address space
