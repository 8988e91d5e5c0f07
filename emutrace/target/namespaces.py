"""The kernel sandbox around a confined native guest: what the guest can
touch is bounded by the kernel, whatever system calls or seccomp filters of its own it
uses; the tracer's seccomp check (target/seccomp_filter.py, target/ptrace_confine.py) is
the second layer, which gives emulation's answers and warnings.

* **PID namespace** (`PidNamespace`): the tracer unshares CLONE_NEWPID for its own next
  children only (the calling thread's pid_for_children), forks a reaper that becomes pid 1
  of the new namespace, forks the guest (pid 2: a direct child, so PTRACE_TRACEME makes
  us its tracer; pid 1 would ignore its own default-action signals), then setns(2)es its
  pid_for_children back.  The guest reaches no host process by pid (kill, ptrace,
  process_vm_*: ESRCH) and its /proc is the namespace's own (`enter` mounts it); killing
  the reaper at the run's end ends every process in the namespace, CLONE_UNTRACED children
  included (pid_namespaces(7)).  Needs CAP_SYS_ADMIN.
* **Mount namespace** (`enter`, in the child): every mount made private, each writable
  directory bind-mounted onto itself, then every other mount remounted read-only
  (MS_BIND|MS_REMOUNT|MS_RDONLY, its nosuid/nodev/noexec kept): EROFS for any write
  outside the writable directories, by any route (a file handle, a descriptor, io_uring).
* **User, network, IPC and UTS namespaces** next: the guest's uid maps to ours, one id;
  the mount namespace, made before, belongs to the host's user namespace, so no capability
  the guest could hold in its own lets it mount or unmount anything there; no network
  interface but a down loopback, its own SysV IPC and hostname.
* **no_new_privs, Landlock** (target/landlock.py) for the read/write sets, **every
  capability dropped**: the bounding set emptied (an execve as uid 0 gains nothing), then
  the permitted, effective and inheritable sets cleared, ambient too."""

from __future__ import annotations

import ctypes
import os
import signal
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from emutrace.isa.native_sandbox import native_sandbox_reason
from emutrace.target import landlock

if TYPE_CHECKING:
    from emutrace.sandbox import Sandbox

# <linux/sched.h>
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# <linux/mount.h>
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
# the host's sysctls and magic SysRq key: read-only binds over the host's /proc
PROC_READ_ONLY = (b"/proc/sys", b"/proc/sysrq-trigger")
# per-mount flags a bind remount must repeat (mountinfo's field 6, proc(5))
_KEPT = {b"nosuid": MS_NOSUID, b"nodev": MS_NODEV, b"noexec": MS_NOEXEC,
         b"noatime": MS_NOATIME, b"nodiratime": MS_NODIRATIME, b"relatime": MS_RELATIME,
         b"strictatime": MS_STRICTATIME}
# <linux/prctl.h>, <linux/capability.h>
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_CAPSET = 126  # <asm/unistd_64.h>
WAIT_ALL = 0x40000000  # __WALL (<linux/wait.h>): traced children and clones too

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]
_libc.syscall.restype = ctypes.c_long


class SandboxRefused(Exception):
    """A layer of the kernel sandbox cannot be had here: one line naming it."""


@dataclass(frozen=True)
class Layers:
    """What the child's sandbox is made of: host paths, realpath'd (sandbox.Sandbox)."""

    root: str
    writable: tuple[str, ...]
    program: str  # the file execve runs (it may lie outside the root, as under emulation)
    extra_read: tuple[str, ...] = field(default=("/proc", "/dev"))


def sandbox_layers(sandbox: Sandbox, program: str) -> Layers:
    """The layers of a confined run: the sandbox's root and writable directories."""
    return Layers(str(sandbox.root), tuple(str(w) for w in sandbox.writable),
                  os.path.realpath(program))


def refusal() -> str:
    """Why a confined native run cannot have its kernel sandbox here ('' when it can): the
    capability's reason, then this kernel's answer to a Landlock ABI query."""
    reason = native_sandbox_reason()
    if not reason and landlock.abi_version() < 1:
        reason = "this host cannot sandbox a native guest: no Landlock (not enabled in " \
                 "this kernel)"
    return reason


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise SandboxRefused(f"{what}: {os.strerror(ctypes.get_errno())}")


# ------------------------------------------------------------------ the tracer's side
class PidNamespace:
    """`fork()` as os.fork, the child in a new PID namespace whose pid 1 is a reaper;
    `end()` kills the reaper, and with it every process left in the namespace."""

    def __init__(self) -> None:
        self.reaper = 0

    def fork(self) -> int:
        tracer = os.getpid()
        saved = os.open("/proc/thread-self/ns/pid_for_children", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
            reaper = os.fork()
            if reaper == 0:
                _reap_forever()
            self.reaper = reaper
            pid = os.fork()
            if pid == 0:
                os.close(saved)
                return 0
        except BaseException:
            self.end()
            raise
        finally:
            if os.getpid() == tracer:  # (not in the child, which returned 0)
                _check(_libc.setns(saved, CLONE_NEWPID), "setns back to our PID namespace")
                os.close(saved)
        return pid

    def end(self) -> None:
        """SIGKILL to pid 1 kills every process of the namespace; pid 1 is gone once each
        is reaped, and a process we trace is reaped by us (its tracer), not by pid 1
        (ptrace(2)): so we reap until pid 1 is reaped."""
        if self.reaper:
            try:
                os.kill(self.reaper, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while True:
                try:
                    if os.waitpid(-1, WAIT_ALL)[0] == self.reaper:
                        break
                except ChildProcessError:
                    break
            self.reaper = 0


def _reap_forever() -> None:
    """Pid 1 of the guest's namespace: reaps orphans until the tracer kills it (or dies:
    PR_SET_PDEATHSIG), never returns into the tracer's code."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)  # pid 1 drops default-action signals
        os.closerange(0, 1 << 20)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        while True:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            signal.sigwait({signal.SIGCHLD})
    except BaseException:  # noqa: BLE001 - the reaper must never return
        pass
    os._exit(0)


# ------------------------------------------------------------------ the child's side
def enter(layers: Layers) -> None:
    """In the child, before its seccomp filter and execve: the mount, user, network, IPC
    and UTS namespaces, no_new_privs, Landlock, no capabilities.  SandboxRefused names the
    layer that failed."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    # a proc of the guest's PID namespace over the host's: the guest's processes only
    # (pid_namespaces(7), "/proc and PID namespaces"), as a process in a sandbox sees
    _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
           "mounting the PID namespace's /proc")
    for w in layers.writable:
        path = os.fsencode(w)
        _check(_libc.mount(path, path, None, MS_BIND | MS_REC, None), f"bind-mounting {w}")
    for point, flags in _mounts():
        if point == b"/proc" or any(_beneath(point, os.fsencode(w)) for w in layers.writable):
            continue
        _read_only(point, flags)
    for point in PROC_READ_ONLY:  # /proc stays writable for our uid_map; Landlock then
        if not os.path.exists(point):
            continue
        _check(_libc.mount(point, point, None, MS_BIND, None), f"bind-mounting {point!r}")
        _read_only(point, MS_NOSUID | MS_NODEV | MS_NOEXEC)  # lets the guest only read it
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
           "unshare(user, net, ipc, uts namespaces)")
    _write("/proc/self/setgroups", "deny")  # user_namespaces(7): before an unprivileged gid_map
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    readable = [layers.root, *(p for p in layers.extra_read if not _under(p, layers.root))]
    files = {} if _under(layers.program, layers.root) else \
        {layers.program: landlock.READ_FILE | landlock.EXECUTE}
    files["/dev/null"] = landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE
    failure = landlock.restrict(readable, list(layers.writable), files)
    if failure is not None:
        raise SandboxRefused(failure)
    _drop_capabilities()


def _read_only(point: bytes, flags: int) -> None:
    if _libc.mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags, None) != 0 \
            and ctypes.get_errno() not in (2, 20):  # ENOENT, ENOTDIR: a mount shadowed
        raise SandboxRefused(f"remounting {os.fsdecode(point)} read-only: "
                             f"{os.strerror(ctypes.get_errno())}")


def _mounts() -> list[tuple[bytes, int]]:
    """Every mount point of this mount namespace, with the per-mount flags to keep."""
    out = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split()
            point = _unescape(fields[4])
            flags = sum(_KEPT.get(o, 0) for o in fields[5].split(b","))
            out.append((point, flags))
    return out


def _unescape(field: bytes) -> bytes:
    """mountinfo escapes space, tab, newline and backslash as \\ooo (octal)."""
    out, i = bytearray(), 0
    while i < len(field):
        if field[i] == 0x5C and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(int(field[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def _beneath(path: bytes, top: bytes) -> bool:
    return path == top or path.startswith(top.rstrip(b"/") + b"/")


def _under(path: str, top: str) -> bool:
    return _beneath(os.fsencode(path), os.fsencode(top))


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise SandboxRefused(f"writing {path}: {e.strerror}") from None


def _drop_capabilities() -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "PR_CAPBSET_DROP")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    # struct __user_cap_header_struct { version, pid }; two __user_cap_data_struct
    # { effective, permitted, inheritable } (64 capability bits), all zero
    header = ctypes.create_string_buffer(struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0), 8)
    data = ctypes.create_string_buffer(bytes(24), 24)
    _check(int(_libc.syscall(SYS_CAPSET, header, data)), "capset")
