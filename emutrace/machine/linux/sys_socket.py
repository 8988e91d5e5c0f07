"""Socket calls on descriptors that are not sockets.  emutrace gives a guest no sockets of
its own: `socket` and `socketpair` fail with EACCES (the sandbox has no network and no
local sockets), quietly for AF_UNIX — static glibc asks for one in every user or group
lookup, to reach nscd, and falls back to the files — and with a one-line warning for any
other family.  A call that names a descriptor fails as Linux fails it on a file or pipe:
EBADF for a closed number, else ENOTSOCK (net/socket.c sockfd_lookup).  Shells ask
`getpeername(0)` to learn whether they were started by rshd; that answer is ENOTSOCK.

`socketcall` (i386, s390x, ppc, mips o32) multiplexes them: its first argument picks the
call (include/uapi/linux/net.h SYS_*), its second points at the call's arguments."""

from __future__ import annotations

import os
import stat

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.table import syscall

K = LinuxKernel

FD_CALLS = ("bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername",
            "sendto", "recvfrom", "shutdown", "setsockopt", "getsockopt", "sendmsg",
            "recvmsg", "sendmmsg", "recvmmsg", "send", "recv")
# include/uapi/linux/net.h SYS_* numbers -> (name, argument count as net/socket.c nargs[])
SOCKETCALLS = {1: ("socket", 3), 2: ("bind", 3), 3: ("connect", 3), 4: ("listen", 2),
               5: ("accept", 3), 6: ("getsockname", 3), 7: ("getpeername", 3),
               8: ("socketpair", 4), 9: ("send", 4), 10: ("recv", 4), 11: ("sendto", 6),
               12: ("recvfrom", 6), 13: ("shutdown", 2), 14: ("setsockopt", 5),
               15: ("getsockopt", 5), 16: ("sendmsg", 3), 17: ("recvmsg", 3),
               18: ("accept4", 4), 19: ("recvmmsg", 5), 20: ("sendmmsg", 4)}


def _not_a_socket(k: K, fd: int) -> int:
    desc = k.fd(fd)
    if not stat.S_ISSOCK(os.fstat(desc.host_fd).st_mode):
        raise GuestError("ENOTSOCK")
    # a socket the guest inherited (emutrace's own stdio may be one): not served
    k.warn_once("socket-inherited", "emutrace: socket calls on an inherited socket are not "
                "supported: returning ENOSYS")
    raise GuestError("ENOSYS")


def _refuse(k: K, family: int) -> int:
    if family != k.const("AF_UNIX"):
        k.warn_once(f"socket:{family}", f"emutrace: sandbox: socket of address family "
                    f"{family} denied (no network): returning EACCES")
    raise GuestError("EACCES")


@syscall("socket", "socketpair")
def sys_socket(k: K, a: tuple[int, ...]) -> int:
    return _refuse(k, k.int32(a[0]))


@syscall(*FD_CALLS)
def sys_socket_fd_call(k: K, a: tuple[int, ...]) -> int:
    return _not_a_socket(k, a[0])


@syscall("socketcall")
def sys_socketcall(k: K, a: tuple[int, ...]) -> int:
    entry = SOCKETCALLS.get(k.int32(a[0]))
    if entry is None:
        raise GuestError("EINVAL")
    name, count = entry
    args = k.unpack_words(k.read(a[1], count * k.word))
    if name in FD_CALLS:
        return _not_a_socket(k, args[0])
    return _refuse(k, k.int32(args[0]))  # socket, socketpair
