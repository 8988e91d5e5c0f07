"""Descriptors of the objects emutrace serves (/dev: devfs.py, /proc: procfs.py): opening
them, reading and writing through them, stat.

Every guest descriptor has a host descriptor (poll, dup, fork and execve carry it); for a
served object it is a stand-in made here, never a host /dev or /proc file:

* a /proc file: a sealed memory file holding the text computed at the open (reads, seeks,
  mmap and poll then work as on a file; writes fail, as the seal refuses them);
* a device emulated in Python and a directory: an empty memory file (always ready for
  poll, as the memory devices are), with the guest's reads and writes going to the
  device (FileDesc.node);
* the terminal (/dev/tty): a duplicate of emutrace's own standard descriptor that is the
  user's terminal;
* a descriptor link (/proc/self/fd/N, /dev/stdin): the same file again: a pipe, socket
  or terminal as another descriptor of it, a regular file opened anew (its own offset,
  `O_TRUNC` and `O_APPEND` honoured, as Linux reopens it), with access the descriptor
  does not have only where the sandbox allows it (reading under the root, writing in an
  --allow-write directory).
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from emutrace.isa.base import GuestError
from emutrace.machine.linux import file_size
from emutrace.machine.linux.kernel import IO_CHUNK, FileDesc, LinuxKernel, rw_count
from emutrace.machine.linux.vfs import Device, FdLink, File, Node, node_stat
from emutrace.sandbox import Virtual

K = LinuxKernel
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def _memory_file(data: bytes) -> int:
    """A host descriptor of an anonymous file holding `data`, sealed against change."""
    fd = os.memfd_create("emutrace-served", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except OSError:
        os.close(fd)
        raise
    return fd


def open_served(k: K, found: Virtual, flags: int) -> FileDesc:
    """The descriptor of an open(2) of a served object (the sandbox's lookup has checked
    that a write open is of a writable one)."""
    c = k.abi.constants
    node, path = found.node, os.fsdecode(found.guest_path)
    cloexec = bool(flags & c["O_CLOEXEC"])
    access = flags & 3
    if flags & c["O_DIRECTORY"] and node.kind != "dir":
        raise GuestError("ENOTDIR")
    if node.kind == "dir":
        if access:
            raise GuestError("EISDIR")
        return FileDesc(_memory_file(b""), path, cloexec, node=node)
    if isinstance(node, File):
        return FileDesc(_memory_file(node.content()), path, cloexec, node=node)
    if isinstance(node, FdLink):
        extra = 0  # what a new open of a regular file honours (`> /dev/stdout` truncates)
        for name in ("O_TRUNC", "O_APPEND"):
            if flags & c[name] and access:
                extra |= getattr(os, name)
        return _reopen(k, node.number, access, extra, cloexec)
    if not isinstance(node, Device):  # O_NOFOLLOW of a link: ELOOP, as Linux answers
        raise GuestError("ELOOP")
    if node.host_fd is not None:
        return FileDesc(node.host_fd(), path, cloexec)
    return FileDesc(_memory_file(b""), path, cloexec, node=node)


def _reopen(k: K, number: int, access: int, extra: int, cloexec: bool) -> FileDesc:
    desc = k.fds.get(number)
    if desc is None:
        raise GuestError("ENOENT")  # closed between the lookup and now
    if isinstance(desc.node, File):  # a /proc file opened anew: computed anew
        return FileDesc(_memory_file(desc.node.content()), desc.guest_path, cloexec,
                        node=desc.node)
    if desc.node is not None:
        return FileDesc(os.dup(desc.host_fd), desc.guest_path, cloexec, node=desc.node)
    if not stat.S_ISREG(os.fstat(desc.host_fd).st_mode):
        return FileDesc(os.dup(desc.host_fd), desc.guest_path, cloexec)
    # a new open file description of the same file, through emutrace's own descriptor's
    # magic link (the host kernel's, for emutrace's process; nothing of the host's /proc
    # reaches the guest).  Linux checks the file's permissions, not the descriptor's
    # mode; the sandbox adds its rule: access the descriptor does not have needs the
    # file to be readable under the root, or writable by --allow-write
    magic = f"/proc/self/fd/{desc.host_fd}"
    have = fcntl.fcntl(desc.host_fd, fcntl.F_GETFL) & os.O_ACCMODE
    host = os.readlink(magic)
    if access in (os.O_RDONLY, os.O_RDWR) and have == os.O_WRONLY and not (
            host.startswith("/") and Path(host).is_relative_to(k.sandbox.root)):
        raise GuestError("EACCES")
    if access in (os.O_WRONLY, os.O_RDWR) and have == os.O_RDONLY and not (
            host.startswith("/") and k.sandbox.is_writable(host)):
        raise GuestError("EACCES")
    return FileDesc(os.open(magic, access | extra | os.O_CLOEXEC), desc.guest_path, cloexec)


def served_stat(k: K, found: Virtual) -> os.stat_result:
    """stat(2) of a served object; through a followed descriptor link, of its file."""
    node = found.node
    if isinstance(node, FdLink):
        desc = k.fds.get(node.number)
        if desc is None:
            raise GuestError("ENOENT")
        if desc.node is None:
            return os.fstat(desc.host_fd)
        return node_stat(desc.node, os.fsencode(desc.guest_path))
    assert isinstance(node, Node)
    return node_stat(node, found.guest_path)


def read_fd(k: K, desc: FileDesc, addr: int, size: int, offset: int | None = None) -> int:
    """read(2)/pread(2) of a guest descriptor: a Python device's bytes, or the host's."""
    node = desc.node
    if node is None or node.kind == "file":
        return k.from_host(desc.host_fd, addr, size, offset)
    if node.kind == "dir":
        raise GuestError("EISDIR")
    wanted = rw_count(size)
    size = k.mapped_length(addr, wanted)
    if wanted and not size:
        raise GuestError("EFAULT")
    done = 0
    while done < size:
        data = node.read(min(IO_CHUNK, size - done))
        k.write(addr + done, data)
        done += len(data)
        if not data:
            break
    return done


def write_fd(k: K, desc: FileDesc, addr: int, size: int, offset: int | None = None) -> int:
    """write(2)/pwrite(2) of a guest descriptor: to a Python device, or the host's."""
    node = desc.node
    if node is None:
        return k.to_host(desc.host_fd, addr, file_size.room(k, desc.host_fd, size, offset),
                         offset)
    if node.kind != "device":
        raise GuestError("EBADF")  # a /proc file or directory is open read-only
    size = rw_count(size)
    if size and not k.mapped_length(addr, size):
        raise GuestError("EFAULT")
    done = 0
    while done < size:  # the device sees the data, IO_CHUNK at a time
        n = min(IO_CHUNK, size - done, k.mapped_length(addr + done, IO_CHUNK))
        if not n:
            break
        took = node.write(k.read(addr + done, n))
        done += took
        if took < n:
            break
    return done
