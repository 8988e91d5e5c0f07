"""Landlock (Linux 5.13+, Documentation/userspace-api/landlock.rst): the file-system rights
a confined native guest keeps, enforced by the kernel on every open, exec, create, remove
and rename of the guest and of everything it starts, whatever system call or seccomp
filter it uses.  The rights handled are every file right of the ABI version the kernel
reports; a guest may read and execute beneath the sandbox root (and /proc, /dev, the
program's own file when it lies outside the root), and create, write, truncate, remove
and rename only beneath the writable directories.  ABI 6 also scopes signals and
abstract UNIX sockets to the guest's own domain.

Called in the child between fork and execve (target/namespaces.py), after
PR_SET_NO_NEW_PRIVS (landlock_restrict_self(2) requires it of a process without
CAP_SYS_ADMIN).  ctypes over the raw system calls: the calls are three and stable, and no
Debian-packaged binding exists for this Python."""

from __future__ import annotations

import ctypes
import os
import struct

# <asm/unistd_64.h>
SYS_LANDLOCK_CREATE_RULESET = 444
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0  # (flag)
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
# <linux/landlock.h>
LANDLOCK_RULE_PATH_BENEATH = 1
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # what a rule on a file may hold
_WRITE_V1 = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG \
    | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def abi_version() -> int:
    """The Landlock ABI version of this kernel; 0 when it has none (ENOSYS: not built;
    EOPNOTSUPP: built but not enabled at boot, `lsm=`)."""
    ret = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(ret), 0)


def handled(abi: int) -> int:
    """Every file-system right the ABI knows (handled = denied unless a rule allows)."""
    rights = READ | _WRITE_V1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def restrict(readable: list[str], writable: list[str], files: dict[str, int]) -> str | None:
    """Restrict this process (and what it execs and forks) to reading beneath `readable`,
    everything beneath `writable`, and `files` (path → rights).  None, or why not (one
    line)."""
    abi = abi_version()
    if abi < 1:
        return "Landlock is not enabled in this kernel"
    rights = handled(abi)
    if abi >= 6:  # struct landlock_ruleset_attr: handled_access_fs, _net, scoped
        attr = struct.pack("=QQQ", rights, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    else:
        attr = struct.pack("=Q", rights)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        rules = [(p, READ) for p in readable] + [(p, rights) for p in writable] + \
            [(p, r & rights & FILE_RIGHTS) for p, r in files.items()]
        for path, allowed in rules:
            failure = _add_rule(int(ruleset), path, allowed)
            if failure is not None:
                return failure
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset),
                         ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(int(ruleset))
    return None


def _add_rule(ruleset: int, path: str, allowed: int) -> str | None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None  # nothing there: nothing to allow
    try:
        # struct landlock_path_beneath_attr { __u64 allowed_access; __s32 parent_fd; }
        # __attribute__((packed))
        attr = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
        if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset),
                         ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), attr,
                         ctypes.c_uint32(0)) != 0:
            return f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    return None
