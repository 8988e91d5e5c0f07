"""Extended attributes.  Reading is the host's answer for the file the sandbox resolves
(ENODATA for a missing attribute, EOPNOTSUPP where the host file system has none, as
qemu-user passes them through).  Writing follows the sandbox's write rule for metadata and
is limited to the `user.` namespace: `security.capability` or `trusted.*` set by a guest
(emutrace may run as root) would change host privileges, so those are EPERM, as for an
unprivileged process (xattr(7))."""

from __future__ import annotations

import os
from collections.abc import Callable

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.table import Handler, syscall
from emutrace.sandbox import Virtual

K = LinuxKernel
XATTR_SIZE_MAX = 65536  # include/uapi/linux/limits.h
XATTR_NAME_MAX = 255
GUEST_NAMESPACE = b"user."
XATTR_CREATE, XATTR_REPLACE = 1, 2  # include/uapi/linux/xattr.h (every ISA)

Target = int | str  # a host descriptor or a host path
SERVED = -1  # the Target of an object of /dev or /proc: it has no extended attributes


def _name(k: K, addr: int) -> bytes:
    name = k.string(addr)
    if not name or len(name) > XATTR_NAME_MAX:
        raise GuestError("ERANGE")
    return name


def _target(k: K, kind: str, first: int, write: bool) -> tuple[Target, bool]:
    """What the call names: a descriptor ("f" calls), a path followed to its end (plain
    calls) or the link itself ("l" calls); with `write`, checked against --allow-write."""
    if kind == "f":
        desc = k.fd(first)
        if write and not k.sandbox.is_writable(k.sandbox.resolve(desc.guest_path)):
            raise GuestError("EACCES")
        return desc.host_fd, True
    follow = kind == ""
    found = k.sandbox.lookup(k.string(first), follow_final=follow, write=write, metadata=True)
    if isinstance(found, Virtual):
        return SERVED, follow
    return str(found), follow


def _get(k: K, kind: str, a: tuple[int, ...]) -> int:
    where, follow = _target(k, kind, a[0], False)
    if where == SERVED:
        raise GuestError("ENODATA")
    value = os.getxattr(where, _name(k, a[1]), follow_symlinks=follow)
    return _reply(k, value, a[2], a[3])


def _list(k: K, kind: str, a: tuple[int, ...]) -> int:
    where, follow = _target(k, kind, a[0], False)
    if where == SERVED:
        return 0
    names = os.listxattr(where, follow_symlinks=follow)
    return _reply(k, b"".join(os.fsencode(n) + b"\0" for n in names), a[1], a[2])


def _reply(k: K, value: bytes, buf: int, size: int) -> int:
    """A size of 0 asks for the length; a buffer too small is ERANGE (fs/xattr.c)."""
    if size == 0:
        return len(value)
    if len(value) > size:
        raise GuestError("ERANGE")
    k.write(buf, value)
    return len(value)


def _guest_name(k: K, addr: int) -> bytes:
    name = _name(k, addr)
    if not name.startswith(GUEST_NAMESPACE):
        raise GuestError("EPERM")
    return name


def _set(k: K, kind: str, a: tuple[int, ...]) -> int:
    size, flags = a[3], k.int32(a[4])
    if size > XATTR_SIZE_MAX:
        raise GuestError("E2BIG")
    if flags & ~(XATTR_CREATE | XATTR_REPLACE):
        raise GuestError("EINVAL")
    name = _guest_name(k, a[1])
    where, follow = _target(k, kind, a[0], True)
    os.setxattr(where, name, k.read(a[2], size), flags, follow_symlinks=follow)
    return 0


def _remove(k: K, kind: str, a: tuple[int, ...]) -> int:
    name = _guest_name(k, a[1])
    where, follow = _target(k, kind, a[0], True)
    os.removexattr(where, name, follow_symlinks=follow)
    return 0


OPERATIONS: dict[str, Callable[[K, str, tuple[int, ...]], int]] = {
    "get": _get, "list": _list, "set": _set, "remove": _remove}


def _handler(fn: Callable[[K, str, tuple[int, ...]], int], kind: str) -> Handler:
    return lambda k, a: fn(k, kind, a)


for _kind in ("", "l", "f"):  # getxattr lgetxattr fgetxattr, listxattr ..., ...
    for _op, _fn in OPERATIONS.items():
        syscall(f"{_kind}{_op}xattr")(_handler(_fn, _kind))
