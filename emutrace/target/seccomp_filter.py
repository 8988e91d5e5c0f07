"""The seccomp filter that confines a native run: which system calls the
host kernel runs unchecked, which stop for the tracer's sandbox check, which are refused.

Every system call of the x86_64 and the i386 table (a 64-bit program may also enter the
i386 table by `int $0x80`) is sorted into one `Action` (`policy`):

* `TRACE` — it names a path or changes an object behind a descriptor (`CONFINED`): it
  stops the tracee (SECCOMP_RET_TRACE, the tracer has set PTRACE_O_TRACESECCOMP) and
  target/ptrace_confine.py checks it with the emulation's `Sandbox` rules.  A process
  without a tracer (a forked child, which runs untraced) gets ENOSYS from these calls
  instead (seccomp(2): "If there is no tracer present, the system call is not executed
  and returns a failure status with errno set to ENOSYS").
* `REFUSE` — what cannot be confined natively (`REFUSED`, each with its reason): it
  stops too, and the tracer skips it with EPERM (or ENOSYS) and one warning line.
* `UNAVAILABLE` — clone3, whose flags are in memory where the tracer's check and the
  kernel's read could differ: ENOSYS straight from the filter, as on a kernel before 5.3;
  glibc falls back to clone, which is checked.
* `ALLOW` — every other call this ABI table knows: it acts on memory, on the process or
  on descriptors the process already holds (whose access mode the kernel enforces) —
  except the `ioctl` requests in `IOCTL_CHECKED`, which change a file through a
  descriptor the kernel lets a read-only opener (or the owner, or root) change, or push
  input into the terminal: the filter compares the request (argument 1) and stops for
  those (`ARG_RULES`).
* a number the table does not know (a call newer than the headers the tables were
  generated from, linux-libc-dev 6.1: e.g. fchmodat2, setxattrat, file_setattr) fails
  with ENOSYS, as on an older kernel: a newer call naming a path is never let through.
* an x32 call (x86_64 audit arch, bit 30 of the number) or another audit arch: the process
  is killed (SECCOMP_RET_KILL_PROCESS).

The BPF program (classic BPF, <linux/filter.h>, over `struct seccomp_data`,
<linux/seccomp.h>) checks the arch, then walks the sorted runs of numbers with one action:
`jgt last_of_run, next_run` / `ret action`, two instructions a run."""

from __future__ import annotations

import ctypes
import functools
import struct
from dataclasses import dataclass
from enum import Enum

from emutrace.isa.abi import load_abi

# <linux/audit.h>
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
X32_SYSCALL_BIT = 0x40000000  # <asm/unistd.h>
# <linux/seccomp.h>
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_TRACE = 0x7FF00000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_MODE_FILTER = 2
PR_SET_NO_NEW_PRIVS = 38  # <linux/prctl.h>
PR_SET_SECCOMP = 22
ENOSYS = 38
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
NR_OFFSET, ARCH_OFFSET, ARGS_OFFSET = 0, 4, 16
# classic BPF opcodes (<linux/bpf_common.h>)
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGT_K = 0x25
BPF_JGE_K = 0x35
BPF_JA = 0x05
BPF_RET_K = 0x06
TRACE_DATA_CHECK, TRACE_DATA_REFUSE = 1, 2  # SECCOMP_RET_DATA: what the tracer does

ARCHES = {"x86_64": AUDIT_ARCH_X86_64, "i386": AUDIT_ARCH_I386}


class Action(Enum):
    ALLOW = SECCOMP_RET_ALLOW
    TRACE = SECCOMP_RET_TRACE | TRACE_DATA_CHECK
    REFUSE = SECCOMP_RET_TRACE | TRACE_DATA_REFUSE
    UNAVAILABLE = SECCOMP_RET_ERRNO | ENOSYS


# Calls checked by the tracer (ptrace_confine.CHECKS has the rule for each): paths, the
# current directory, descriptors whose object they change, sockets, processes.
CONFINED = frozenset({
    # paths
    "open", "openat", "creat", "stat", "lstat", "oldstat", "oldlstat", "stat64", "lstat64",
    "newfstatat", "fstatat64", "statx", "access", "faccessat", "faccessat2", "readlink",
    "readlinkat", "execve", "execveat", "chdir", "mkdir", "mkdirat", "mknod", "mknodat",
    "unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat",
    "symlink", "symlinkat", "chmod", "fchmodat", "chown", "lchown", "chown32", "lchown32",
    "fchownat", "truncate", "truncate64", "utime", "utimes", "futimesat", "utimensat",
    "utimensat_time64", "statfs", "statfs64", "setxattr", "lsetxattr", "getxattr",
    "lgetxattr", "listxattr", "llistxattr", "removexattr", "lremovexattr",
    "inotify_add_watch",
    # the directory the guest sees, and descriptors whose object they change
    "getcwd", "fchdir", "fchmod", "fchown", "fchown32", "fsetxattr", "fremovexattr",
    # sockets: emulation gives a guest none (machine/linux/sys_socket.py)
    "socket", "socketpair", "socketcall", "bind", "connect", "listen", "accept",
    "accept4", "sendto", "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
    "getsockname", "getpeername", "shutdown", "setsockopt", "getsockopt", "send", "recv",
    # a process sharing the tracee's memory would race the checks (thread: refused)
    "clone",
    # a filter of the guest's own with a listener (SECCOMP_RET_USER_NOTIF outranks
    # SECCOMP_RET_TRACE, and its supervisor may let the call continue unchecked)
    "seccomp",
    # made as openat2 with RESOLVE_NO_SYMLINKS by the tracer, and checked when the guest
    # makes it itself
    "openat2",
    # calls on another process: the guest's own only (target/confine_processes.py)
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open",
    "pidfd_send_signal", "prlimit64", "sched_setaffinity", "sched_setscheduler",
    "sched_setparam", "sched_setattr", "migrate_pages", "move_pages", "setpriority",
    "ioprio_set",
})

# Calls that cannot be confined natively: name → (errno, why).  ARCHITECTURE.md lists them.
REFUSED: dict[str, tuple[str, str]] = {
    **{n: ("ENOSYS", "its operations run in kernel workers the filter does not see")
       for n in ("io_uring_setup", "io_uring_enter", "io_uring_register")},
    **{n: ("EPERM", "a file handle bypasses the path lookup")
       for n in ("name_to_handle_at", "open_by_handle_at")},
    **{n: ("EPERM", "it reaches another process's memory or descriptors")
       for n in ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
                 "process_madvise")},
    **{n: ("EPERM", "it changes the file system's shape or the process's view of it")
       for n in ("mount", "umount", "umount2", "pivot_root", "chroot", "move_mount",
                 "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
                 "setns", "unshare", "swapon", "swapoff", "quotactl", "quotactl_fd",
                 "acct", "uselib")},
    **{n: ("EPERM", "its argument names files or processes out of the filter's sight")
       for n in ("bpf", "perf_event_open", "fanotify_init", "fanotify_mark")},
    "userfaultfd": ("EPERM", "a fault handler could stall the tracer's reads of the "
                             "tracee's memory"),
    **{n: ("EPERM", "it changes the host kernel")
       for n in ("kexec_load", "kexec_file_load", "init_module", "finit_module",
                 "delete_module", "reboot", "iopl", "ioperm", "vhangup")},
}
UNAVAILABLE = frozenset({"clone3"})

# ioctl requests that stop for the tracer (<linux/fs.h>, <asm-generic/ioctls.h>; _IOW with
# a long is 8 bytes wide for x86_64 and 4 for i386): attributes of the file behind the
# descriptor (chattr's immutable/append-only flags, the inode version, the project and
# extended flags, the file system's label) and terminal input injection
FS_IOC_SETFLAGS = {"x86_64": 0x40086602, "i386": 0x40046602}
FS_IOC_SETVERSION = {"x86_64": 0x40087602, "i386": 0x40047602}
FS_IOC_FSSETXATTR, FS_IOC_SETFSLABEL = 0x401C5820, 0x41009432
TIOCSTI, TIOCLINUX = 0x5412, 0x541C


def ioctl_checked(arch: str) -> frozenset[int]:
    return frozenset({FS_IOC_SETFLAGS[arch], FS_IOC_SETVERSION[arch], FS_IOC_FSSETXATTR,
                      FS_IOC_SETFSLABEL, TIOCSTI, TIOCLINUX})


def arg_rules(arch: str) -> dict[int, tuple[int, frozenset[int]]]:
    """Number → (argument index, values): `ALLOW` calls that stop (`TRACE`) when the low 32
    bits of that argument are one of the values."""
    return {load_abi(arch).syscalls["ioctl"]: (1, ioctl_checked(arch))}

assert not CONFINED & set(REFUSED) and not (CONFINED | set(REFUSED)) & UNAVAILABLE


def policy(arch: str) -> dict[int, Action]:
    """Number → action for every call of `arch`'s table ("x86_64" or "i386")."""
    out = {}
    for name, number in load_abi(arch).syscalls.items():
        if number >= X32_SYSCALL_BIT:
            continue
        out[number] = Action.TRACE if name in CONFINED else \
            Action.REFUSE if name in REFUSED else \
            Action.UNAVAILABLE if name in UNAVAILABLE else Action.ALLOW
    return out


@functools.cache
def _cached_policy(arch: str) -> dict[int, Action]:
    return policy(arch)


def verdict(arch: str, nr: int, args: list[int]) -> Action:
    """What this filter returns for a call, as the BPF program computes it: the tracer
    acts on this, never on a stop's SECCOMP_RET_DATA (a filter the guest adds that also
    returns SECCOMP_RET_TRACE is the one whose data the kernel reports: filters run newest
    first and the first of the highest precedence wins, seccomp(2))."""
    action = _cached_policy(arch).get(nr, Action.UNAVAILABLE)
    rule = arg_rules(arch).get(nr)
    if action is Action.ALLOW and rule is not None and args[rule[0]] & 0xFFFFFFFF in rule[1]:
        return Action.TRACE
    return action


@dataclass(frozen=True)
class Insn:
    code: int
    jt: int
    jf: int
    k: int

    def pack(self) -> bytes:
        return struct.pack("=HBBI", self.code, self.jt, self.jf, self.k & 0xFFFFFFFF)


def _ret(value: int) -> Insn:
    return Insn(BPF_RET_K, 0, 0, value)


def _runs(actions: dict[int, Action], special: frozenset[int] = frozenset()
          ) -> list[tuple[int, int]]:
    """Sorted (last number, return value) runs covering 0..max; gaps return ENOSYS; a
    number in `special` is a run of its own (value -1 - number)."""
    runs: list[tuple[int, int]] = []
    for number in range(max(actions) + 1):
        value = -1 - number if number in special else \
            actions[number].value if number in actions else SECCOMP_RET_ERRNO | ENOSYS
        if runs and runs[-1][1] == value and value >= 0:
            runs[-1] = (number, value)
        else:
            runs.append((number, value))
    return runs


def _argument_block(index: int, values: frozenset[int]) -> list[Insn]:
    """ld args[index] (low 32 bits: little-endian); one of `values` → TRACE, else ALLOW."""
    out = [Insn(BPF_LD_W_ABS, 0, 0, ARGS_OFFSET + 8 * index)]
    ordered = sorted(values)
    for i, value in enumerate(ordered):
        out.append(Insn(BPF_JEQ_K, len(ordered) - i, 0, value))
    return out + [_ret(Action.ALLOW.value), _ret(Action.TRACE.value)]


def _table(actions: dict[int, Action], rules: dict[int, tuple[int, frozenset[int]]], *,
           x32_bit: bool) -> list[Insn]:
    out = [Insn(BPF_LD_W_ABS, 0, 0, NR_OFFSET)]
    if x32_bit:  # an x32 call: the x86_64 audit arch with bit 30 set in the number
        out += [Insn(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), _ret(SECCOMP_RET_KILL_PROCESS)]
    for last, value in _runs(actions, frozenset(rules)):
        block = _argument_block(*rules[last]) if value < 0 else [_ret(value)]
        out += [Insn(BPF_JGT_K, len(block), 0, last), *block]
    out.append(_ret(SECCOMP_RET_ERRNO | ENOSYS))  # above every known number
    return out


def program() -> list[Insn]:
    """The whole filter: the arch check, then the i386 and the x86_64 tables."""
    x86_64 = _table(policy("x86_64"), arg_rules("x86_64"), x32_bit=True)
    i386 = _table(policy("i386"), arg_rules("i386"), x32_bit=False)
    head = [
        Insn(BPF_LD_W_ABS, 0, 0, ARCH_OFFSET),
        Insn(BPF_JEQ_K, 0, 1, AUDIT_ARCH_I386),
        Insn(BPF_JA, 0, 0, 2 + len(x86_64)),  # → the i386 table, past the x86_64 one
        Insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),  # x86_64: into its table, next
        _ret(SECCOMP_RET_KILL_PROCESS),  # another audit arch
    ]
    return head + x86_64 + i386


class SockFprog(ctypes.Structure):  # struct sock_fprog, <linux/filter.h>
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]


@functools.cache
def packed_program() -> bytes:
    return b"".join(insn.pack() for insn in program())


def install(packed: bytes) -> str | None:
    """In the child before execve: no new privileges (a set-user-ID program does not gain
    any, and an unprivileged process may install a filter), then the filter.  None, or
    the reason it failed (one line)."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"PR_SET_NO_NEW_PRIVS: errno {ctypes.get_errno()}"
    buf = ctypes.create_string_buffer(packed, len(packed))
    prog = SockFprog(len(packed) // 8, ctypes.addressof(buf))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        return f"installing the seccomp filter: errno {ctypes.get_errno()}"
    return None
