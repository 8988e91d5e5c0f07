"""Process groups and sessions.  Each guest process is one host process (its pid is the
host's, see `getpid`), so these calls are the host's own, on that process: a shell that
puts a job into its own group does so for real, as under qemu-user."""

from __future__ import annotations

import os

from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.table import syscall

K = LinuxKernel


@syscall("getpgid")
def sys_getpgid(k: K, a: tuple[int, ...]) -> int:
    return os.getpgid(k.int32(a[0]))  # 0: the caller, as the host's


@syscall("getpgrp")
def sys_getpgrp(k: K, a: tuple[int, ...]) -> int:
    return os.getpgrp()


@syscall("setpgid")
def sys_setpgid(k: K, a: tuple[int, ...]) -> int:
    os.setpgid(k.int32(a[0]), k.int32(a[1]))
    return 0


@syscall("getsid")
def sys_getsid(k: K, a: tuple[int, ...]) -> int:
    return os.getsid(k.int32(a[0]))


@syscall("setsid")
def sys_setsid(k: K, a: tuple[int, ...]) -> int:
    os.setsid()
    return os.getsid(0)  # the new session's id: the caller's pid
