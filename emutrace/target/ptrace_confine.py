"""Confinement of a native run: the tracer's side of the seccomp filter
(target/seccomp_filter.py).  At each PTRACE_EVENT_SECCOMP stop the call is checked with the
emulation's `Sandbox` rules (emutrace/sandbox.py) and then either

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

from emutrace.isa.abi import load_abi
from emutrace.sandbox import Sandbox, SandboxError
from emutrace.target.confine_checks import AT_FDCWD, CHECKS, Call, Refused
from emutrace.target.confine_processes import PROCESS_CHECKS, refused_errno
from emutrace.target.ptrace import (
    PTRACE_CONT,
    PTRACE_EVENT_EXEC,
    PTRACE_EVENT_FORK,
    PTRACE_EVENT_SECCOMP,
    PTRACE_EVENT_VFORK,
    USER_REGS,
    WALL,
    event_message,
    ptrace,
)
from emutrace.target.ptrace_children import Children
from emutrace.target.seccomp_filter import REFUSED, Action, verdict

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


class Confinement:
    """The sandbox of one traced process (and of what it execs)."""

    def __init__(self, sandbox: Sandbox, pid: int, warn: Callable[[str], None] | None = None,
                 family: Confinement | None = None) -> None:
        """`family`: the confinement of the run's first process, whose forked children
        this one's process is one of (they share the warnings and the children)."""
        self.sandbox = sandbox
        self.pid = pid
        self.warn = warn or _stderr
        self.warned: set[str] = family.warned if family is not None else set()
        self.children: Children = family.children if family is not None else Children(self)
        self.scratch: int | None = None
        self.names = {arch: {n: name for name, n in load_abi(arch).syscalls.items()}
                      for arch in ARG_REGS}
        self.numbers = {arch: dict(load_abi(arch).syscalls) for arch in ARG_REGS}
        self.regs = (ctypes.c_ulong * len(USER_REGS))()
        self.slot = {name: i for i, name in enumerate(USER_REGS)}
        self.stops = 0  # checked calls (bench: what confinement costs)
        self._mem: int | None = None

    def confine_child(self, pid: int) -> Confinement:
        """The confinement of a child this run's processes forked: the same sandbox and
        warnings, in this (the first process's) family."""
        return Confinement(self.sandbox, pid, self.warn, family=self)

    def warn_once(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            self.warn(message)

    # -------------------------------------------------------------- the stop
    def on_seccomp(self) -> None:
        """At a PTRACE_EVENT_SECCOMP stop of `pid`: check the call, then let it run on host
        paths, or skip it."""
        self.stops += 1
        arch, nr, args, _data = self._syscall_info()
        action = verdict(arch, nr, args)  # ours, not the stop's data (seccomp_filter.py)
        if action is Action.ALLOW:
            return  # stopped by a filter of the guest's own: runs as our filter lets it
        name = self.names[arch].get(nr, f"syscall {nr}")
        call = Call(arch, name, args)
        result = None
        try:
            if action is Action.REFUSE:
                errno_name, why = REFUSED.get(name, ("EPERM", "not confinable natively"))
                if refused_errno(self, name, args, errno_name) == "ESRCH":
                    raise Refused("ESRCH")  # no such process for the guest: no warning
                raise Refused(errno_name, f"emutrace: native: {name} refused ({why}): "
                                          f"returning {errno_name}")
            check = CHECKS.get(name) or PROCESS_CHECKS.get(name)
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
        if call.becomes is not None:  # (the kernel checks the new call with the filter
            # again: a TRACE verdict then lets it run, kernel/seccomp.c recheck_after_trace)
            self._set("orig_rax", self.numbers[call.arch][call.becomes])
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
        if len(host) >= SLOT:  # (root + guest path): longer than the kernel takes
            raise Refused("ENAMETOOLONG")
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


def run_exec(confinement: Confinement) -> tuple[bool, int]:
    """After the tracee's execve: the new image (which the backend does not know) runs to
    its end still confined, and so do the children it forks (target/ptrace_children.py).
    (True, exit status) or (False, the signal that ended it)."""
    pid = confinement.pid
    confinement.on_exec()
    pending = 0
    while True:
        ptrace(PTRACE_CONT, pid, 0, pending)
        pending = 0
        status = confinement.children.wait_for(pid)
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
            child = event_message(pid)
            confinement.children.first_stop(child)
            confinement.children.adopt(child, confinement.scratch)
        elif event == PTRACE_EVENT_EXEC:
            confinement.on_exec()
