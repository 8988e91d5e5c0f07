"""The objects of the trees the Linux layer serves itself (/dev: devfs.py, /proc: procfs.py),
as the sandbox's walk sees them (sandbox.VirtualNode) and the system calls use them.

A tree is built from four shapes: a directory whose entries are computed when it is looked
at (a process's fd/ changes with every open), a read-only file whose bytes are computed
when it is opened (Linux's seq_file: the text describes the moment of the open), a link
whose text is computed when it is followed, and a character device whose reads and writes
are Python.  A descriptor link (/proc/<pid>/fd/N) is a link that, followed as the last
component, stands for the descriptor itself.
"""

from __future__ import annotations

import os
import stat
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

STARTED = time.time()  # the served objects' times: when emutrace started


@dataclass
class Node:
    """What every served object has: its kind, permission bits and whether data may be
    written to it."""

    kind: ClassVar[str] = ""
    type_bits: ClassVar[int] = 0
    perms: int = 0o444
    writable: bool = False

    def child(self, name: bytes) -> Node | None:
        return None

    def target(self) -> bytes:
        return b""

    @property
    def mode(self) -> int:
        return self.type_bits | self.perms


@dataclass
class Dir(Node):
    """A directory: `entries()` lists its children by name when it is looked at."""

    kind: ClassVar[str] = "dir"
    type_bits: ClassVar[int] = stat.S_IFDIR
    entries: Callable[[], Mapping[bytes, Node]] = dict
    perms: int = 0o555

    def child(self, name: bytes) -> Node | None:
        return self.entries().get(name)


def fixed_dir(children: Mapping[bytes, Node]) -> Dir:
    """A directory whose children never change."""
    return Dir(entries=lambda: children)


@dataclass
class File(Node):
    """A read-only file whose bytes `content()` computes at each open."""

    kind: ClassVar[str] = "file"
    type_bits: ClassVar[int] = stat.S_IFREG
    content: Callable[[], bytes] = bytes


def text_file(value: str | Callable[[], str]) -> File:
    """A file of one text (or a function giving it), UTF-8 encoded."""
    if callable(value):
        return File(content=lambda: value().encode())
    data = value.encode()
    return File(content=lambda: data)


@dataclass
class Link(Node):
    """A symbolic link whose text `text()` gives when it is followed or read."""

    kind: ClassVar[str] = "link"
    type_bits: ClassVar[int] = stat.S_IFLNK
    text: Callable[[], bytes] = bytes
    perms: int = 0o777

    def target(self) -> bytes:
        return self.text()


def fixed_link(text: bytes) -> Link:
    return Link(text=lambda: text)


@dataclass
class FdLink(Node):
    """/proc/<pid>/fd/N: a link to open descriptor `number`; followed to the end, the
    descriptor itself (opening it opens the same file, as Linux's magic link does)."""

    kind: ClassVar[str] = "fd"
    type_bits: ClassVar[int] = stat.S_IFLNK
    number: int = 0
    text: Callable[[], bytes] = bytes
    perms: int = 0o700
    writable: bool = True  # an open for writing is checked against the descriptor's mode

    def target(self) -> bytes:
        return self.text()


@dataclass
class Device(Node):
    """A character device (`rdev` = makedev(major, minor)) read and written in Python:
    `read(n)` gives at most n bytes, `write(data)` how many it took (or raises GuestError);
    `host_fd()`, when given, opens a host descriptor that stands for the device instead
    (the user's own terminal), and `host_stat()` is then what stat(2) says of it."""

    kind: ClassVar[str] = "device"
    type_bits: ClassVar[int] = stat.S_IFCHR
    rdev: int = 0
    read: Callable[[int], bytes] = field(default=lambda n: b"")
    write: Callable[[bytes], int] = field(default=len)
    host_fd: Callable[[], int] | None = None
    host_stat: Callable[[], os.stat_result] | None = None  # the stat(2) it answers, if not its own
    perms: int = 0o666
    writable: bool = True


def inode(guest_path: bytes) -> int:
    """A stable inode number for a served object (its path's CRC; nothing on Linux gives
    /proc objects meaningful numbers either)."""
    return zlib.crc32(guest_path) | 0x10000


DT_OF_KIND = {"dir": 4, "file": 8, "link": 10, "fd": 10, "device": 2}  # dirent.h DT_*


PROC_DEV = 0x16  # st_dev of the served trees: an anonymous device (major 0), as procfs's


def node_stat(node: Node, guest_path: bytes) -> os.stat_result:
    """stat(2) of a served object: its kind and permissions, owned by the user, size 0
    (as Linux's /proc and device files say), the process's start as its times."""
    if isinstance(node, Device) and node.host_stat is not None:
        return node.host_stat()
    ns = int(STARTED * 1e9)
    rdev = node.rdev if isinstance(node, Device) else 0
    nlink = 2 if node.kind == "dir" else 1
    return os.stat_result(
        (node.mode, inode(guest_path), PROC_DEV, nlink, os.getuid(), os.getgid(), 0,
         int(STARTED), int(STARTED), int(STARTED)),
        {"st_rdev": rdev, "st_blksize": 1024, "st_blocks": 0, "st_atime_ns": ns,
         "st_mtime_ns": ns, "st_ctime_ns": ns})
