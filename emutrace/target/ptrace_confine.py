"""Confinement of a native run: the tracer's side of the seccomp filter
(target/seccomp_filter.py).  At each PTRACE_EVENT_SECCOMP stop the call is checked with the
emulation's `Sandbox` rules (machine/linux/sandbox.py) and then either

* runs on the *resolved host path*: the path the tracer resolved (symlinks already
  followed by the sandbox, `..` and the root applied) is written into a scratch mapping
  of the tracee and the argument register pointed at it; the guest's own buffer is not
  read again by the kernel;
* or is skipped (orig_rax = -1, Linux's "no system call" for a tracer, and rax = -errno)
  with the same one-line warning emulation prints (`emutrace: sandbox: ...`).

The scratch mapping (`SCRATCH_SIZE`, private, anonymous, read-only to the guest, below
2 GiB so that an i386 call can name it) is mapped by the tracee itself on the first call
that needs it: the stopped call is turned into mmap, run to its syscall-exit stop, and the
registers are put back with the instruction pointer 2 bytes back (the length of `syscall`
and of `int $0x80`, which the kernel's own system call restart also assumes: the i386
vDSO's sysenter returns past an `int $0x80`), so the original call is made again.

What holds the check and the call together (no TOCTOU): the tracee is stopped from the
check until the kernel has read its arguments; the path the kernel reads is in the
scratch mapping, checked at every use to be still the private anonymous mapping made here
(/proc/PID/maps), so no other process can write it; a process sharing the tracee's memory
or descriptor table (clone with CLONE_VM or CLONE_FILES, not a vfork) is refused, so
nothing runs beside the tracee in its address space; forked children run untraced, where
every checked call fails with ENOSYS (no tracer: seccomp(2)), so they cannot create or
rename anything under the paths the tracer resolves.  Host processes of the user racing
the tracee on the same directories are outside this, as under emulation."""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import signal
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from emutrace.isa.abi import load_abi
from emutrace.machine.linux.sandbox import Sandbox, SandboxError
from emutrace.target.ptrace import (
    PTRACE_CONT,
    PTRACE_DETACH,
    PTRACE_EVENT_EXEC,
    PTRACE_EVENT_FORK,
    PTRACE_EVENT_SECCOMP,
    PTRACE_EVENT_VFORK,
    PTRACE_GETEVENTMSG,
    USER_REGS,
    WALL,
    ptrace,
)
from emutrace.target.seccomp_filter import REFUSED, TRACE_DATA_REFUSE

PTRACE_SYSCALL = 24  # <linux/ptrace.h>
PTRACE_GET_SYSCALL_INFO = 0x420E
PTRACE_SYSCALL_INFO_SECCOMP = 3
SYSCALL_INFO_SIZE = 88  # struct ptrace_syscall_info (op, arch, ip, sp, seccomp{nr, args, ret})
SCRATCH_SIZE = 3 * 4096  # two paths of PATH_MAX and a socketcall argument block
SLOT = 4096
PROT_READ = 1
MAP_PRIVATE, MAP_ANONYMOUS, MAP_32BIT = 0x02, 0x20, 0x40  # <asm/mman.h> (x86)
SYSCALL_INSN_LENGTH = 2  # `syscall` 0f 05, `int $0x80` cd 80
# argument registers of the system call ABIs (syscall(2) "Architecture calling
# conventions"), as slots of the 64-bit user_regs_struct a 64-bit tracer sees
ARG_REGS = {"x86_64": ("rdi", "rsi", "rdx", "r10", "r8", "r9"),
            "i386": ("rbx", "rcx", "rdx", "rsi", "rdi", "rbp")}
AUDIT_ARCH = {0xC000003E: "x86_64", 0x40000003: "i386"}
MMAP_CALL = {"x86_64": "mmap", "i386": "mmap2"}
SOCKET_CALLS = {1: "socket", 8: "socketpair"}  # <linux/net.h> SYS_SOCKET, SYS_SOCKETPAIR
GUEST_MODE_BITS = 0o1777  # as emulation: no set-user-ID or set-group-ID bits
# <fcntl.h>, the same on x86_64 and i386 (emutrace/isa/abi)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH = 0x100, 0x400, 0x1000
O_ACCMODE, O_CREAT, O_EXCL, O_TRUNC, O_APPEND = 3, 0o100, 0o200, 0o1000, 0o2000
O_NOFOLLOW, O_TMPFILE_BIT = 0o400000, 0o20000000
IN_DONT_FOLLOW = 0x02000000  # <linux/inotify.h>
CLONE_VM, CLONE_FILES, CLONE_VFORK = 0x100, 0x400, 0x4000  # <linux/sched.h>
AF_UNIX = 1
PT_INTERP = 3  # <elf.h>


class Refused(Exception):
    """Skip the call with this errno; `message` (if any) is warned once."""

    def __init__(self, errno_name: str, message: str = "") -> None:
        super().__init__(message)
        self.errno_name = errno_name
        self.message = message


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@dataclass
class Call:
    """One stopped system call: its table, name and arguments, and what the check decided
    (`paths`: argument index → host path to pass; `values`: argument index → new value;
    `result`: skip the call with this result)."""

    arch: str
    name: str
    args: list[int]
    paths: dict[int, bytes] = field(default_factory=dict)
    values: dict[int, int] = field(default_factory=dict)
    result: int | None = None


class Confinement:
    """The sandbox of one traced process (and of what it execs)."""

    def __init__(self, sandbox: Sandbox, pid: int,
                 warn: Callable[[str], None] | None = None) -> None:
        self.sandbox = sandbox
        self.pid = pid
        self.warn = warn or _stderr
        self.warned: set[str] = set()
        self.scratch: int | None = None
        self.names = {arch: {n: name for name, n in load_abi(arch).syscalls.items()}
                      for arch in ARG_REGS}
        self.numbers = {arch: dict(load_abi(arch).syscalls) for arch in ARG_REGS}
        self.regs = (ctypes.c_ulong * len(USER_REGS))()
        self.slot = {name: i for i, name in enumerate(USER_REGS)}
        self.stops = 0  # checked calls (bench: what confinement costs)
        self._mem: int | None = None

    def warn_once(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            self.warn(message)

    # -------------------------------------------------------------- the stop
    def on_seccomp(self) -> None:
        """At a PTRACE_EVENT_SECCOMP stop of `pid`: check the call, then let it run on host
        paths, or skip it."""
        self.stops += 1
        arch, nr, args, data = self._syscall_info()
        name = self.names[arch].get(nr, f"syscall {nr}")
        call = Call(arch, name, args)
        result = None
        try:
            if data == TRACE_DATA_REFUSE:
                errno_name, why = REFUSED.get(name, ("EPERM", "not confinable natively"))
                raise Refused(errno_name, f"emutrace: native: {name} refused ({why}): "
                                          f"returning {errno_name}")
            check = CHECKS.get(name)
            if check is not None:
                check(self, call)
            result = call.result
        except SandboxError as e:
            if e.denied:
                self.warn_once(str(e))
            result = -e.host_errno
        except Refused as e:
            if e.message:
                self.warn_once(e.message)
            result = -int(getattr(_errno, e.errno_name))
        if result is not None:
            self._skip(arch, result)
        elif call.paths and not self._scratch_ok():
            self._map_scratch(arch)
        else:
            self._apply(call)

    def _syscall_info(self) -> tuple[str, int, list[int], int]:
        buf = ctypes.create_string_buffer(SYSCALL_INFO_SIZE)
        ptrace(PTRACE_GET_SYSCALL_INFO, self.pid, SYSCALL_INFO_SIZE,
               ctypes.c_void_p(ctypes.addressof(buf)))
        raw = buf.raw
        if raw[0] != PTRACE_SYSCALL_INFO_SECCOMP:
            raise OSError(_errno.EINVAL, "not a seccomp stop")
        arch = AUDIT_ARCH[int.from_bytes(raw[4:8], "little")]
        nr = int.from_bytes(raw[24:32], "little")
        args = [int.from_bytes(raw[32 + 8 * i:40 + 8 * i], "little") for i in range(6)]
        if arch == "i386":
            args = [a & 0xFFFFFFFF for a in args]
        return arch, nr, args, int.from_bytes(raw[80:84], "little")

    def _getregs(self) -> None:
        ptrace(12, self.pid, 0, ctypes.c_void_p(ctypes.addressof(self.regs)))  # GETREGS

    def _setregs(self) -> None:
        ptrace(13, self.pid, 0, ctypes.c_void_p(ctypes.addressof(self.regs)))  # SETREGS

    def _set(self, name: str, value: int) -> None:
        self.regs[self.slot[name]] = value & (2**64 - 1)

    def _skip(self, arch: str, result: int) -> None:
        """The call is not made; it returns `result` (Documentation/admin-guide/seccomp:
        a tracer skips a system call by changing its number to -1)."""
        self._getregs()
        self._set("orig_rax", -1)
        self._set("rax", result if arch == "x86_64" else result & 0xFFFFFFFF)
        self._setregs()

    def _apply(self, call: Call) -> None:
        if not call.paths and not call.values:
            return
        assert self.scratch is not None or not call.paths
        self._getregs()
        regs = ARG_REGS[call.arch]
        for n, (index, host) in enumerate(sorted(call.paths.items())):
            at = (self.scratch or 0) + n * SLOT
            self.write(at, host + b"\0")
            self._set(regs[index], at)
        for index, value in call.values.items():
            self._set(regs[index], value)
        self._setregs()

    # -------------------------------------------------------------- the scratch page
    def _scratch_ok(self) -> bool:
        """The scratch mapping is still the private anonymous one mapped here (the tracee
        could have replaced it, e.g. by a shared mapping another process writes)."""
        if self.scratch is None:
            return False
        with open(f"/proc/{self.pid}/maps", "rb") as f:
            for line in f:
                fields = line.split()
                lo, _, hi = fields[0].partition(b"-")
                if int(lo, 16) <= self.scratch < int(hi, 16):
                    return (self.scratch + SCRATCH_SIZE <= int(hi, 16)
                            and fields[1].endswith(b"p") and fields[4] == b"0"
                            and len(fields) == 5)
        return False

    def _map_scratch(self, arch: str) -> None:
        """Turn the stopped call into mmap, run it to its syscall-exit stop, then make the
        tracee make the original call again (see the module's docstring)."""
        self._getregs()
        saved = (ctypes.c_ulong * len(USER_REGS))(*self.regs)
        regs = ARG_REGS[arch]
        flags = MAP_PRIVATE | MAP_ANONYMOUS | (MAP_32BIT if arch == "x86_64" else 0)
        for reg, value in zip(regs, (0, SCRATCH_SIZE, PROT_READ, flags, -1, 0), strict=True):
            self._set(reg, value if arch == "x86_64" else value & 0xFFFFFFFF)
        self._set("orig_rax", self.numbers[arch][MMAP_CALL[arch]])
        self._setregs()
        ptrace(PTRACE_SYSCALL, self.pid, 0, 0)
        _, status = os.waitpid(self.pid, WALL)
        if not os.WIFSTOPPED(status):
            raise OSError(_errno.ESRCH, "the tracee ended while mapping its scratch page")
        self._getregs()
        width = 64 if arch == "x86_64" else 32  # (a failure is -4095..-1 in that width)
        got = self.regs[self.slot["rax"]] & ((1 << width) - 1)
        if got >= (1 << width) - 4095:
            raise OSError(_errno.ENOMEM, "mapping the confinement's scratch page failed")
        self.scratch = got
        saved[self.slot["rip"]] -= SYSCALL_INSN_LENGTH
        saved[self.slot["rax"]] = saved[self.slot["orig_rax"]]
        ctypes.memmove(self.regs, saved, ctypes.sizeof(saved))
        self._setregs()

    def on_exec(self) -> None:
        """A new image: the old address space (and its scratch mapping) is gone."""
        self.scratch = None
        self.close()

    def close(self) -> None:
        if self._mem is not None:
            os.close(self._mem)
            self._mem = None

    # -------------------------------------------------------------- tracee access
    def _mem_fd(self) -> int:
        if self._mem is None:  # (a /proc/PID/mem descriptor stays with the mm it opened)
            self._mem = os.open(f"/proc/{self.pid}/mem", os.O_RDWR | os.O_CLOEXEC)
        return self._mem

    def read(self, addr: int, size: int) -> bytes:
        try:
            return os.pread(self._mem_fd(), size, addr)
        except OSError:
            return b""

    def write(self, addr: int, data: bytes) -> None:
        # /proc/PID/mem writes with FOLL_FORCE: the read-only scratch page takes them
        os.pwrite(self._mem_fd(), data, addr)

    def string(self, addr: int) -> bytes:
        """The NUL-terminated string at `addr` (EFAULT if unreadable, ENAMETOOLONG past
        PATH_MAX, as getname() fails)."""
        out = b""
        while len(out) < SLOT:
            at = addr + len(out)
            chunk = self.read(at, SLOT - (at % SLOT) if at % SLOT else SLOT)
            if not chunk:
                raise Refused("EFAULT")
            nul = chunk.find(b"\0")
            if nul >= 0:
                return out + chunk[:nul]
            out += chunk
        raise Refused("ENAMETOOLONG")

    def fd_host_path(self, fd: int) -> bytes | None:
        """The host path of a descriptor of the tracee (None: not a file system object,
        e.g. a pipe); EBADF if it has none."""
        try:
            text = os.readlink(f"/proc/{self.pid}/fd/{fd}".encode())
        except OSError:
            raise Refused("EBADF") from None
        return text if text.startswith(b"/") else None

    def is_socket(self, fd: int) -> bool:
        try:
            return stat.S_ISSOCK(os.stat(f"/proc/{self.pid}/fd/{fd}").st_mode)
        except OSError:
            return False

    def guest_dir(self, dirfd: int) -> bytes:
        """The guest path of a directory descriptor, or of the current directory."""
        if dirfd == AT_FDCWD:
            try:
                host = os.readlink(f"/proc/{self.pid}/cwd".encode())
            except OSError:
                raise Refused("ENOENT") from None
        else:
            got = self.fd_host_path(dirfd)
            if got is None:
                raise Refused("ENOTDIR")
            host = got
        try:
            return os.fsencode(self.sandbox.to_guest(os.fsdecode(host)))
        except ValueError:
            raise SandboxError("EACCES", f"emutrace: sandbox: directory {os.fsdecode(host)!r} "
                               f"is outside the sandbox root", denied=True) from None

    def guest_path(self, addr: int) -> bytes:
        """The path argument at `addr`; /proc/self and /proc/thread-self are the tracee's
        (the sandbox would read them as the tracer's own)."""
        path = self.string(addr)
        for alias, real in ((b"/proc/self", b"/proc/%d" % self.pid),
                            (b"/proc/thread-self", b"/proc/%d/task/%d" % (self.pid, self.pid))):
            if path == alias or path.startswith(alias + b"/"):
                return real + path[len(alias):]
        return path

    def resolve(self, call: Call, index: int, dirfd: int = AT_FDCWD, **kw: bool) -> bytes:
        """Check path argument `index` (relative to `dirfd`) and pass its host path."""
        path = self.guest_path(call.args[index])
        base = None if path.startswith(b"/") else self.guest_dir(dirfd)
        host = os.fsencode(self.sandbox.resolve(path, base=base, **kw))
        call.paths[index] = host
        return host

    def check_fd_write(self, fd: int) -> None:
        """fchmod and the like on a descriptor: its object must be writable (emulation:
        Sandbox.is_writable on the descriptor's host path)."""
        host = self.fd_host_path(fd)
        if host is not None and not self.sandbox.is_writable(host):
            try:
                guest = self.sandbox.to_guest(os.fsdecode(host))
            except ValueError:
                guest = os.fsdecode(host)
            raise SandboxError("EACCES", f"emutrace: sandbox: write to {guest} denied "
                               f"(not under an --allow-write directory)", denied=True)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the checks, by family
Check = Callable[[Confinement, Call], None]


def _at(c: Confinement, call: Call, dirfd_i: int | None, path_i: int, empty_ok: bool,
        **kw: bool) -> None:
    """A path argument, maybe relative to a directory descriptor argument; an empty path
    with AT_EMPTY_PATH (`empty_ok`) or a NULL one (utimensat) means the descriptor itself:
    a write must then be allowed on its object."""
    dirfd = _int32(call.args[dirfd_i]) if dirfd_i is not None else AT_FDCWD
    if empty_ok and (call.args[path_i] == 0 or c.string(call.args[path_i]) == b""):
        if kw.get("write"):
            c.check_fd_write(dirfd)
        return
    c.resolve(call, path_i, dirfd, **kw)


def _open(c: Confinement, call: Call, dirfd_i: int | None, path_i: int, flags: int,
          mode_i: int) -> None:
    """open(2) as emulation checks it (machine/linux/sys_fs.py _openat)."""
    writes = bool(flags & O_ACCMODE or flags & (O_CREAT | O_TRUNC | O_APPEND | O_TMPFILE_BIT))
    excl = flags & O_CREAT and flags & O_EXCL
    _at(c, call, dirfd_i, path_i, False, write=writes, create=bool(flags & O_CREAT),
        follow_final=not (flags & O_NOFOLLOW or excl))
    if flags & (O_CREAT | O_TMPFILE_BIT):
        call.values[mode_i] = call.args[mode_i] & GUEST_MODE_BITS


def _flags_follow(flags: int) -> bool:
    return not flags & AT_SYMLINK_NOFOLLOW


def _path(index: int, **kw: bool) -> Check:
    return lambda c, call: _at(c, call, None, index, False, **kw)


def _path_at(dirfd_i: int, path_i: int, flags_i: int | None = None, empty: bool = False,
             follow: bool = True, **kw: bool) -> Check:
    """A *at call; with `empty`, AT_EMPTY_PATH (or, for calls without flags, a NULL path)
    names the descriptor itself."""
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        empty_ok = empty and (flags_i is None or bool(flags & AT_EMPTY_PATH))
        _at(c, call, dirfd_i, path_i, empty_ok, follow_final=follow and _flags_follow(flags),
            **kw)
    return check


def _mode(index: int, inner: Check) -> Check:
    def check(c: Confinement, call: Call) -> None:
        inner(c, call)
        call.values[index] = call.args[index] & GUEST_MODE_BITS
    return check


def _access(dirfd_i: int | None, path_i: int, mode_i: int, flags_i: int | None) -> Check:
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        _at(c, call, dirfd_i, path_i, bool(flags & AT_EMPTY_PATH),
            write=bool(call.args[mode_i] & os.W_OK), follow_final=_flags_follow(flags))
    return check


def _mknod(dirfd_i: int | None, path_i: int, mode_i: int) -> Check:
    def check(c: Confinement, call: Call) -> None:
        kind = stat.S_IFMT(call.args[mode_i])
        if kind in (stat.S_IFCHR, stat.S_IFBLK):
            raise Refused("EPERM", "emutrace: sandbox: device nodes are not created "
                                   "(mknod): returning EPERM")
        _at(c, call, dirfd_i, path_i, False, write=True, create=True, follow_final=False)
        call.values[mode_i] = kind | (call.args[mode_i] & GUEST_MODE_BITS)
    return check


def _two(old: tuple[int | None, int], new: tuple[int | None, int], link: bool = False,
         flags_i: int | None = None) -> Check:
    """rename (both paths written, neither followed) and link (the old path is written
    too, or a hard link would make a read-only file writable: sandbox.py)."""
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        follow_old = link and bool(flags & AT_SYMLINK_FOLLOW)
        _at(c, call, old[0], old[1], link and bool(flags & AT_EMPTY_PATH), write=True,
            follow_final=follow_old)
        _at(c, call, new[0], new[1], False, write=True, create=link, follow_final=False)
    return check


def _fd_write(index: int = 0) -> Check:
    return lambda c, call: c.check_fd_write(_int32(call.args[index]))


def _fchdir(c: Confinement, call: Call) -> None:
    c.guest_dir(_int32(call.args[0]))  # the new current directory must be under the root


def _getcwd(c: Confinement, call: Call) -> None:
    """The guest's directory (with a root other than `/` the kernel's answer would be the
    host path): written into the guest's buffer, the call skipped."""
    if c.sandbox.root.as_posix() == "/":
        return
    cwd = c.guest_dir(AT_FDCWD) + b"\0"
    if len(cwd) > call.args[1]:
        raise Refused("ERANGE")
    c.write(call.args[0], cwd)
    call.result = len(cwd)


def _execve(dirfd_i: int | None, path_i: int, flags_i: int | None) -> Check:
    """The program must be under the root; with a root other than `/`, one whose
    interpreter the kernel would take from the host (`#!`, PT_INTERP) is refused."""
    def check(c: Confinement, call: Call) -> None:
        flags = call.args[flags_i] if flags_i is not None else 0
        dirfd = _int32(call.args[dirfd_i]) if dirfd_i is not None else AT_FDCWD
        if flags & AT_EMPTY_PATH and c.string(call.args[path_i]) == b"":
            found = c.fd_host_path(dirfd)
            if found is None:
                raise Refused("EACCES")
            c.guest_dir(dirfd)  # (fexecve) the file must be under the root, or refused
            host = found
        else:
            host = c.resolve(call, path_i, dirfd, follow_final=_flags_follow(flags))
        if c.sandbox.root.as_posix() != "/" and _host_interpreter(host):
            raise Refused("EACCES", f"emutrace: sandbox: exec of {os.fsdecode(host)} denied "
                                    f"(natively its interpreter would be the host's)")
    return check


def _host_interpreter(host: bytes) -> bool:
    try:
        with open(host, "rb") as f:
            head = f.read(64)
            if head.startswith(b"#!"):
                return True
            if head[:4] != b"\x7fELF" or len(head) < 52:
                return False
            # ELF64 or ELF32 header (little-endian: the x86 programs that run natively)
            phoff, phentsize, phnum = (_le(head, 32, 8), _le(head, 54, 2), _le(head, 56, 2)) \
                if head[4] == 2 else (_le(head, 28, 4), _le(head, 42, 2), _le(head, 44, 2))
            for i in range(min(phnum, 256)):
                f.seek(phoff + i * phentsize)
                if int.from_bytes(f.read(4), "little") == PT_INTERP:
                    return True
    except OSError:
        return False
    return False


def _le(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at:at + size], "little")


def _socket(c: Confinement, call: Call) -> None:
    """emutrace gives a guest no sockets (machine/linux/sys_socket.py): EACCES, with a
    warning for any family but AF_UNIX (glibc's nscd probe)."""
    _refuse_socket(c, _int32(call.args[0]))


def _refuse_socket(c: Confinement, family: int) -> None:
    if family != AF_UNIX:
        raise Refused("EACCES", f"emutrace: sandbox: socket of address family {family} "
                                f"denied (no network): returning EACCES")
    raise Refused("EACCES")


def _socket_fd(c: Confinement, call: Call) -> None:
    """A socket call on a descriptor: runs (the host says ENOTSOCK or EBADF) unless the
    descriptor is an inherited socket, which emulation does not serve either."""
    if c.is_socket(_int32(call.args[0])):
        raise Refused("ENOSYS", "emutrace: socket calls on an inherited socket are not "
                                "supported: returning ENOSYS")


def _socketcall(c: Confinement, call: Call) -> None:
    """i386 socketcall(call, args): the arguments are copied into the scratch page so that
    the kernel reads what was checked."""
    which = _int32(call.args[0])
    block = next((got for n in range(6, 0, -1) if len(got := c.read(call.args[1], 4 * n))
                  == 4 * n), b"")  # (up to 6 arguments, as many as are readable)
    if not block:
        raise Refused("EFAULT")
    first = _int32(int.from_bytes(block[:4], "little"))
    if which in SOCKET_CALLS:
        _refuse_socket(c, first)
    if c.is_socket(first):
        raise Refused("ENOSYS", "emutrace: socket calls on an inherited socket are not "
                                "supported: returning ENOSYS")
    call.paths[1] = block.ljust(SLOT - 1, b"\0")[:SLOT - 1]  # (written with a NUL after)


def _clone(c: Confinement, call: Call) -> None:
    flags = call.args[0]
    if flags & (CLONE_VM | CLONE_FILES) and not flags & CLONE_VFORK:
        raise Refused("EPERM", "emutrace: native: a thread (clone sharing memory or "
                               "descriptors) refused: the sandbox's checks would race it; "
                               "returning EPERM (run under emulation, or --unconfined)")


def _openat(c: Confinement, call: Call) -> None:
    _open(c, call, 0, 1, call.args[2], 3)


def _inotify(c: Confinement, call: Call) -> None:
    _at(c, call, None, 1, False, follow_final=not call.args[2] & IN_DONT_FOLLOW)


CHECKS: dict[str, Check] = {
    "open": lambda c, call: _open(c, call, None, 0, call.args[1], 2),
    "openat": _openat,
    "creat": lambda c, call: _open(c, call, None, 0, O_CREAT | O_TRUNC | 1, 1),
    **{n: _path(0) for n in ("stat", "oldstat", "stat64", "statfs", "statfs64", "getxattr",
                             "listxattr", "chdir")},
    **{n: _path(0, follow_final=False) for n in ("lstat", "oldlstat", "lstat64", "readlink",
                                                  "lgetxattr", "llistxattr")},
    "newfstatat": _path_at(0, 1, 3, empty=True),
    "fstatat64": _path_at(0, 1, 3, empty=True),
    "statx": _path_at(0, 1, 2, empty=True),
    "readlinkat": _path_at(0, 1, follow=False),
    "access": _access(None, 0, 1, None),
    "faccessat": _access(0, 1, 2, None),
    "faccessat2": _access(0, 1, 2, 3),
    "execve": _execve(None, 0, None),
    "execveat": _execve(0, 1, 4),
    "mkdir": _mode(1, _path(0, write=True, create=True, follow_final=False)),
    "mkdirat": _mode(2, _path_at(0, 1, write=True, create=True, follow=False)),
    "mknod": _mknod(None, 0, 1),
    "mknodat": _mknod(0, 1, 2),
    **{n: _path(0, write=True, follow_final=False) for n in ("unlink", "rmdir")},
    "unlinkat": _path_at(0, 1, write=True, follow=False),
    "rename": _two((None, 0), (None, 1)),
    "renameat": _two((0, 1), (2, 3)),
    "renameat2": _two((0, 1), (2, 3)),
    "link": _two((None, 0), (None, 1), link=True),
    "linkat": _two((0, 1), (2, 3), link=True, flags_i=4),
    "symlink": _path(1, write=True, create=True, follow_final=False),
    "symlinkat": _path_at(1, 2, write=True, create=True, follow=False),
    "chmod": _mode(1, _path(0, write=True, metadata=True)),
    "fchmodat": _mode(2, _path_at(0, 1, write=True, metadata=True)),
    "fchmod": _mode(1, _fd_write()),
    **{n: _path(0, write=True, metadata=True) for n in ("chown", "chown32", "utime", "utimes",
                                                         "setxattr", "removexattr")},
    **{n: _path(0, write=True, metadata=True, follow_final=False)
       for n in ("lchown", "lchown32", "lsetxattr", "lremovexattr")},
    "fchownat": _path_at(0, 1, 4, empty=True, write=True, metadata=True),
    **{n: _fd_write() for n in ("fchown", "fchown32", "fsetxattr", "fremovexattr")},
    **{n: _path(0, write=True) for n in ("truncate", "truncate64")},
    "futimesat": _path_at(0, 1, empty=True, write=True, metadata=True),
    **{n: _path_at(0, 1, 3, empty=True, write=True, metadata=True)
       for n in ("utimensat", "utimensat_time64")},
    "inotify_add_watch": _inotify,
    "fchdir": _fchdir,
    "getcwd": _getcwd,
    **{n: _socket for n in ("socket", "socketpair")},
    **{n: _socket_fd for n in ("bind", "connect", "listen", "accept", "accept4", "sendto",
                               "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
                               "getsockname", "getpeername", "shutdown", "setsockopt",
                               "getsockopt", "send", "recv")},
    "socketcall": _socketcall,
    "clone": _clone,
}


def run_exec(confinement: Confinement) -> tuple[bool, int]:
    """After the tracee's execve: the new image (which the backend does not know) runs to
    its end still confined; children it forks are let go (their checked calls fail with
    ENOSYS).  (True, exit status) or (False, the signal that ended it)."""
    pid = confinement.pid
    confinement.on_exec()
    pending = 0
    while True:
        ptrace(PTRACE_CONT, pid, 0, pending)
        pending = 0
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status):
            return True, os.WEXITSTATUS(status)
        if os.WIFSIGNALED(status):
            return False, os.WTERMSIG(status)
        event = status >> 16
        if os.WSTOPSIG(status) != signal.SIGTRAP or not event:
            pending = os.WSTOPSIG(status)  # the guest's own signal
        elif event == PTRACE_EVENT_SECCOMP:
            confinement.on_seccomp()
        elif event in (PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK):
            child = ctypes.c_ulong()
            ptrace(PTRACE_GETEVENTMSG, pid, 0, ctypes.c_void_p(ctypes.addressof(child)))
            os.waitpid(int(child.value), WALL)  # its first stop, then it goes untraced
            ptrace(PTRACE_DETACH, int(child.value), 0, 0)
        elif event == PTRACE_EVENT_EXEC:
            confinement.on_exec()
