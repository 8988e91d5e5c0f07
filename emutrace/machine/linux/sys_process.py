"""Processes: fork/vfork/clone/clone3, wait4/waitpid, kill between guest processes, execve.

One guest process is one host process.  `fork` (and `vfork`, and `clone` without CLONE_VM,
or with CLONE_VM|CLONE_VFORK as posix_spawn uses it) is a host `fork()` of the emulator
process, taken inside the system-call hook: the child is an exact copy — Unicorn's CPU and
memory, the descriptor table, the shadow stack, the trace so far — and goes on emulating
with 0 as the call's result, while the parent gets the child's pid.  Pids, process groups,
sessions and exit statuses are then the host kernel's own, as the guest expects; `wait4`
is the host's.  The price: a CLONE_VM|CLONE_VFORK child does not share its memory with the
parent (a posix_spawn whose exec fails exits 127 without reporting its errno).  Threads
(CLONE_VM|CLONE_THREAD) are sys_thread.py's; CLONE_VM alone is not served (ENOSYS).

`execve` builds the new image (any ISA emutrace runs, a `#!` script through its
interpreter, both looked up inside the sandbox) before the old one is dropped, so every
failure is the guest's errno; then the run of the old image ends and the new one starts in
the same host process (same pid), with the descriptors not marked close-on-exec."""

from __future__ import annotations

import os
import posixpath
import resource
import signal as host_signal
import stat
import sys

from emutrace.errors import EXIT_INTERNAL, EXIT_IOERR, EmutraceError
from emutrace.isa.base import GuestError
from emutrace.machine.linux.child_wait import (
    child_event,
    forget_children,
    reaped,
    wait4_changes,
    wait4_target,
)
from emutrace.machine.linux.kernel import GuestExec, LinuxKernel
from emutrace.machine.linux.sys_fs import PROC_SELF_EXE
from emutrace.machine.linux.sys_proc import _signal_self
from emutrace.machine.linux.sys_sigdeliver import action_changed, reset_for_exec
from emutrace.machine.linux.sys_thread import clone_thread
from emutrace.machine.linux.sys_usage import put_rusage
from emutrace.machine.linux.table import syscall
from emutrace.target.unicorn_run import STOP_SIGNALS, WAKE

K = LinuxKernel
CSIGNAL = 0xFF  # the exit signal in clone's flags (include/uapi/linux/sched.h)
CLONE_ARGS_SIZE_VER0 = 64  # struct clone_args up to `tls` (include/uapi/linux/sched.h)
BINPRM_BUF_SIZE = 256  # bytes of a file execve looks at for "#!" (include/linux/binfmts.h)
MAX_INTERPRETERS = 4  # fs/exec.c: a fifth nested interpreter is ELOOP
MAX_ARG_STRLEN = 32 * 4096  # one argv/envp string with its NUL (include/uapi/linux/binfmts.h)
ARG_MAX = 32 * 4096  # the least room for arguments (include/uapi/linux/limits.h)
STK_LIM = 8 << 20  # the default stack limit (include/uapi/linux/resource.h _STK_LIM)


# ---------------------------------------------------------------- fork
def fork_process(k: K, flags: int, stack: int, ptid: int, ctid: int) -> int:
    c = k.abi.constants
    if flags & c["CLONE_VM"] and not flags & c["CLONE_VFORK"]:
        # a process sharing the caller's memory without being its thread: not served
        k.warn_once("clone_vm", "emutrace: clone with CLONE_VM but neither CLONE_THREAD "
                    "nor CLONE_VFORK is not supported: returning ENOSYS")
        raise GuestError("ENOSYS")
    if flags & (c["CLONE_THREAD"] | c["CLONE_SIGHAND"]):
        raise GuestError("EINVAL")  # without CLONE_VM, as kernel/fork.c copy_process
    if not k.host_fork:
        k.warn_once("fork", "emutrace: a process cannot fork in an embedded run (only the "
                    "`emutrace` command runs guest processes): returning EAGAIN")
        raise GuestError("EAGAIN")  # fork(2): "a system-imposed limit ... was encountered"
    pid = os.fork()
    if pid:
        k.children.add(pid)
        if flags & c["CLONE_PARENT_SETTID"] and ptid:
            k.write(ptid, pid.to_bytes(4, k.endian))
        return pid
    _become_child(k)
    me = os.getpid()
    k.threads.forked(me)
    if flags & c["CLONE_CHILD_SETTID"] and ctid:
        k.write(ctid, me.to_bytes(4, k.endian))
    if flags & c["CLONE_PARENT_SETTID"] and ptid:  # the child's copy of the memory too
        k.write(ptid, me.to_bytes(4, k.endian))
    if stack:
        k.cpu.reg_write(k.isa.registers.sp, stack)
    try:
        for listener in k.fork_listeners:
            listener(me)
    except Exception as e:  # noqa: BLE001 - the child must not run on as its parent
        # (its trace cannot be set up: a file it cannot open, ...): it ends here, with
        # one line, before the guest child runs a single instruction
        sys.stderr.write(f"emutrace: forked child {me}: {e}\n")
        sys.stderr.flush()
        os._exit(EXIT_IOERR if isinstance(e, OSError) else EXIT_INTERNAL)
    return 0


def _become_child(k: K) -> None:
    """The host child: its parent is a guest process; the stop signals take their default
    action (Ctrl-C ends a child as it ends a native one: the watcher thread that turned
    them into a clean stop exists only in the first process), and signals the guest ignores
    are ignored by the host process too.  A dump of the emulator is of no use: no core."""
    k.guest_parent = os.getppid()
    forget_children(k)
    for stop in STOP_SIGNALS:
        host_signal.signal(stop, host_signal.SIG_DFL)
    host_signal.pthread_sigmask(host_signal.SIG_UNBLOCK, {*STOP_SIGNALS, WAKE})
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for sig in {*k.sig_ignored, *k.sig_actions}:
        action_changed(k, sig)


@syscall("clone")
def sys_clone(k: K, a: tuple[int, ...]) -> int:
    named = dict(zip(k.conv.clone_args, a, strict=False))
    if named["flags"] & k.const("CLONE_THREAD"):
        return clone_thread(k, named["flags"], named["stack"], named["ptid"], named["ctid"],
                            named["tls"])
    return fork_process(k, named["flags"], named["stack"], named["ptid"], named["ctid"])


@syscall("clone3")
def sys_clone3(k: K, a: tuple[int, ...]) -> int:
    """clone3(struct clone_args *, size): the same as clone; the stack is given as base
    and size (the kernel starts the stack pointer at their sum: the stack grows down on
    every ISA emutrace runs)."""
    size = a[1]
    if size < CLONE_ARGS_SIZE_VER0 or size > 4096:
        raise GuestError("EINVAL")
    blob = k.read(a[0], CLONE_ARGS_SIZE_VER0)
    (flags, _pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls) = (
        int.from_bytes(blob[i:i + 8], k.endian) for i in range(0, 64, 8))
    if (stack == 0) != (stack_size == 0) or exit_signal > 64:
        raise GuestError("EINVAL")
    top = stack + stack_size if stack else 0
    c = k.abi.constants
    if flags & c["CLONE_THREAD"]:
        return clone_thread(k, flags, top, parent_tid, child_tid, tls)
    return fork_process(k, flags | exit_signal, top, parent_tid, child_tid)


@syscall("fork")
def sys_fork(k: K, a: tuple[int, ...]) -> int:
    return fork_process(k, k.const("SIGCHLD"), 0, 0, 0)


@syscall("vfork")
def sys_vfork(k: K, a: tuple[int, ...]) -> int:
    flags = k.const("CLONE_VM") | k.const("CLONE_VFORK") | k.const("SIGCHLD")
    return fork_process(k, flags, 0, 0, 0)


# ---------------------------------------------------------------- wait
def guest_status(k: K, status: int) -> int:
    """A host wait status in the guest's encoding (the layout is the same on every Linux
    ISA, the signal numbers are not: MIPS numbers SIGUSR1..SIGCHLD differently)."""
    def number(host: int) -> int:
        return k.abi.constants.get(host_signal.Signals(host).name, host)

    if os.WIFEXITED(status):
        return (os.WEXITSTATUS(status) & 0xFF) << 8
    if os.WIFSIGNALED(status):
        return number(os.WTERMSIG(status)) | (0x80 if os.WCOREDUMP(status) else 0)
    if os.WIFSTOPPED(status):
        return (number(os.WSTOPSIG(status)) << 8) | 0x7F
    return status  # WIFCONTINUED: 0xffff


def _wait4(k: K, pid: int, status_addr: int, options: int, rusage_addr: int) -> int:
    c = k.abi.constants
    known = c.get("WNOHANG", 1) | c.get("WUNTRACED", 2) | c.get("WCONTINUED", 8) \
        | c.get("__WALL", 0x40000000) | c.get("__WCLONE", 0x80000000) \
        | c.get("__WNOTHREAD", 0x20000000)
    if options & ~known:
        raise GuestError("EINVAL")
    host_options = (os.WNOHANG if options & c.get("WNOHANG", 1) else 0) \
        | (os.WUNTRACED if options & c.get("WUNTRACED", 2) else 0) \
        | (os.WCONTINUED if options & c.get("WCONTINUED", 8) else 0)
    done, status, use = _host_wait(k, pid, host_options)
    if done == 0:
        return 0
    if os.WIFEXITED(status) or os.WIFSIGNALED(status):  # a stopped child is still ours
        reaped(k, done)
    if status_addr:
        k.write(status_addr, guest_status(k, status).to_bytes(4, k.endian))
    if rusage_addr:
        put_rusage(k, rusage_addr, use)
    return done


def _waited(k: K, pid: int) -> list[int]:
    """The guest children wait4(pid) may report: this one (pid > 0), those of a process
    group (0: the caller's, -pgid), or all (-1).  Never another child of the emutrace
    process (a helper a program embedding emutrace started): ECHILD when none."""
    if pid > 0:
        found = [pid] if pid in k.children else []
    else:
        group = None if pid == -1 else (os.getpgrp() if pid == 0 else -pid)
        found = [p for p in sorted(k.children) if group is None or _group_of(p) == group]
    if not found:
        raise GuestError("ECHILD")
    return found


def _poll_children(k: K, pid: int, options: int) -> tuple[int, int, resource.struct_rusage]:
    """One WNOHANG wait4 over the guest children wait4(pid) means."""
    found = (0, 0, resource.getrusage(resource.RUSAGE_CHILDREN))
    for child in _waited(k, pid):
        found = os.wait4(child, options | os.WNOHANG)
        if found[0]:
            break
    return found


def _host_wait(k: K, pid: int, options: int) -> tuple[int, int, resource.struct_rusage]:
    """The host's wait4 on the guest's children, polled so that a stop request (Ctrl-C,
    --timeout) is seen; with other threads, only this one waits (child_wait.py)."""
    if options & os.WNOHANG:
        return _poll_children(k, pid, options)
    if k.threads.active:
        found = _poll_children(k, pid, options)
        if found[0]:
            return found
        raise child_event(k, *wait4_target(pid), wait4_changes(options))
    pause = 0.0005
    while True:
        done, status, use = _poll_children(k, pid, options)
        if done:
            return done, status, use
        if k.cpu.stop_requested.wait(pause):
            raise GuestError("EINTR")
        pause = min(pause * 2, 0.02)


# include/uapi/asm-generic/siginfo.h: SIGCHLD si_codes (every ISA)
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3
SIGINFO_SIZE = 128


def _child_info(k: K, result: os.waitid_result | None) -> bytes:
    """The siginfo_t waitid fills: si_signo SIGCHLD, si_code CLD_*, then the _sigchld
    member (si_pid, si_uid, si_status) in the union after three ints, word-aligned.  No
    child ready (WNOHANG): all zero, si_pid 0 (waitid(2))."""
    info = bytearray(SIGINFO_SIZE)
    if result is None:
        return bytes(info)
    status = result.si_status
    if result.si_code in (CLD_KILLED, CLD_DUMPED) or result.si_code > CLD_DUMPED:
        status = k.abi.constants.get(host_signal.Signals(status).name, status)
    union = 16 if k.word == 8 else 12
    info[0:4] = k.const("SIGCHLD").to_bytes(4, k.endian)
    code = k.isa.siginfo_code_offset
    info[code:code + 4] = result.si_code.to_bytes(4, k.endian)
    for i, value in enumerate((result.si_pid, result.si_uid, status)):
        info[union + 4 * i:union + 4 * i + 4] = (value & 0xFFFFFFFF).to_bytes(4, k.endian)
    return bytes(info)


@syscall("waitid")
def sys_waitid(k: K, a: tuple[int, ...]) -> int:
    """The host's waitid (the option and id-type values are the same on every ISA),
    polled like wait4; the rusage argument is zeroed (Python's waitid does not return
    one)."""
    idtype, ident, options = k.int32(a[0]), k.int32(a[1]), k.int32(a[3])
    c = k.abi.constants
    kinds = {c["P_ALL"]: os.P_ALL, c["P_PID"]: os.P_PID, c["P_PGID"]: os.P_PGID}
    if idtype not in kinds:
        raise GuestError("EINVAL")
    known = os.WNOHANG | os.WEXITED | os.WSTOPPED | os.WCONTINUED | os.WNOWAIT
    if options & ~known or not options & (os.WEXITED | os.WSTOPPED | os.WCONTINUED):
        raise GuestError("EINVAL")
    # (as wait4's: the id type names guest children only, each asked by its pid)
    as_wait4 = {os.P_ALL: -1, os.P_PID: ident, os.P_PGID: -ident}[kinds[idtype]]

    def poll() -> os.waitid_result | None:
        for child in _waited(k, as_wait4):
            found = os.waitid(os.P_PID, child, options | os.WNOHANG)
            if found is not None:
                return found
        return None

    result = poll()
    if result is None and not options & os.WNOHANG and k.threads.active:
        raise child_event(k, kinds[idtype], ident, options)  # only this thread waits
    pause = 0.0005
    while result is None and not options & os.WNOHANG:
        if k.cpu.stop_requested.wait(pause):
            raise GuestError("EINTR")
        pause = min(pause * 2, 0.02)
        result = poll()
    if result is not None and not options & os.WNOWAIT and result.si_code in (
            CLD_EXITED, CLD_KILLED, CLD_DUMPED):
        reaped(k, result.si_pid)
    if a[2]:
        k.write(a[2], _child_info(k, result))
    if a[4]:
        k.write(a[4], bytes(k.abi.structs["rusage"].size))
    return 0


@syscall("wait4")
def sys_wait4(k: K, a: tuple[int, ...]) -> int:
    return _wait4(k, k.int32(a[0]), a[1], k.int32(a[2]), a[3])


@syscall("waitpid")
def sys_waitpid(k: K, a: tuple[int, ...]) -> int:
    return _wait4(k, k.int32(a[0]), a[1], k.int32(a[2]), 0)


# ---------------------------------------------------------------- kill
def _is_guest(k: K, pid: int) -> bool:
    return pid in k.children or pid == k.guest_parent


def _host_number(k: K, sig: int) -> int:
    name = k.signal_name(sig)
    host = getattr(host_signal, name or "", None)
    if host is None:
        raise GuestError("EINVAL")
    return int(host)


def _kill(k: K, pid: int, sig: int) -> int:
    """Signals go to guest processes only: this one, its children, its guest parent (a
    guest must not signal the host's other processes, emutrace may run as root).  A group
    (0, -pgid) or everybody (-1) means those of them that are in it; everybody spares the
    caller, and is ESRCH when nobody else is there (kernel/signal.c kill_something_info)."""
    if not 0 <= sig <= 64:
        raise GuestError("EINVAL")
    me = os.getpid()
    if pid == me:
        return _signal_self(k, sig)
    if pid > 0:
        if not _is_guest(k, pid):
            # the host's other processes are not there for the guest (its /proc lists
            # none of them), as outside a sandbox's PID namespace: ESRCH
            raise GuestError("ESRCH")
        if sig:
            os.kill(pid, _host_number(k, sig))
        else:
            os.kill(pid, 0)
        return 0
    group = None if pid == -1 else (os.getpgrp() if pid == 0 else -pid)
    targets = [p for p in sorted({*k.children, *([k.guest_parent] if k.guest_parent else [])})
               if group is None or _group_of(p) == group]
    for p in targets:
        os.kill(p, _host_number(k, sig) if sig else 0)
    if group is None:
        if not targets:
            raise GuestError("ESRCH")
        return 0
    if group == os.getpgrp():
        return _signal_self(k, sig)
    if not targets:
        raise GuestError("ESRCH")
    return 0


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@syscall("kill")
def sys_kill(k: K, a: tuple[int, ...]) -> int:
    return _kill(k, k.int32(a[0]), k.int32(a[1]))


PTRACE_TRACEME = 0  # <linux/ptrace.h>


@syscall("ptrace")
def sys_ptrace(k: K, a: tuple[int, ...]) -> int:
    """Not served: no guest traces another.  A pid that is not one of the guest's
    processes is not there for it (ESRCH, as the native target's PID namespace answers);
    PTRACE_TRACEME and the guest's own processes get EPERM (ptrace(2): the process may
    not be traced)."""
    if a[0] != PTRACE_TRACEME and not _is_guest(k, k.int32(a[1])):
        raise GuestError("ESRCH")
    raise GuestError("EPERM")


@syscall("tkill")
def sys_tkill(k: K, a: tuple[int, ...]) -> int:
    tid = k.int32(a[0])
    if tid <= 0:
        raise GuestError("EINVAL")
    if tid in k.threads.threads:  # one of this process's threads (see tgkill)
        tid = os.getpid()
    return _kill(k, tid, k.int32(a[1]))


@syscall("tgkill")
def sys_tgkill(k: K, a: tuple[int, ...]) -> int:
    tgid, tid = k.int32(a[0]), k.int32(a[1])
    if tgid <= 0 or tid <= 0:
        raise GuestError("EINVAL")
    if tgid == os.getpid() and tid in k.threads.threads:
        # a signal to one of this process's threads: delivered to the process (signals
        # are process-wide here: sys_sigdeliver keeps one mask and one pending set)
        return _kill(k, tgid, k.int32(a[2]))
    if tgid != tid:  # another process: its main thread only
        raise GuestError("ESRCH")
    return _kill(k, tid, k.int32(a[2]))


# ---------------------------------------------------------------- execve
class ArgSpace:
    """What execve may copy to the new stack (fs/exec.c bprm_stack_limits and
    copy_strings): every string shorter than MAX_ARG_STRLEN, and the pointers of argv and
    envp plus all their strings (the file name's too) within a quarter of the stack limit,
    at most 3/4 of _STK_LIM and at least ARG_MAX; beyond either, E2BIG."""

    def __init__(self, word: int) -> None:
        soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
        quarter = STK_LIM if soft == resource.RLIM_INFINITY else soft // 4
        self.left = max(min(STK_LIM // 4 * 3, quarter), ARG_MAX)
        self.word = word

    def take(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise GuestError("E2BIG")

    def string(self, k: K, addr: int) -> bytes:
        text = k.string(addr, MAX_ARG_STRLEN, too_long="E2BIG")
        self.take(len(text) + 1)
        return text


def _strings(k: K, addr: int, space: ArgSpace) -> list[bytes]:
    """A NULL-terminated array of string pointers (argv, envp)."""
    pointers: list[int] = []
    while addr:
        (ptr,) = k.unpack_words(k.read(addr, k.word))
        if ptr == 0:
            break
        space.take(k.word)
        pointers.append(ptr)
        addr += k.word
    return [space.string(k, ptr) for ptr in pointers]


def _executable(k: K, guest: bytes) -> str:
    host = str(k.sandbox.resolve(guest))
    st = os.stat(host)  # ENOENT and friends as the guest's errno
    if not stat.S_ISREG(st.st_mode) or not os.access(host, os.X_OK):
        raise GuestError("EACCES")
    return host


def exe_link(k: K, host: str, guest: bytes) -> str:
    """What the new image's /proc/self/exe names: the file itself as the guest sees it,
    absolute with every symlink resolved (the kernel's d_path of the opened file,
    fs/proc/base.c proc_exe_link), whatever relative path execve was given.  Static glibc
    asserts it is absolute before main (_dl_get_origin)."""
    try:
        return k.sandbox.to_guest(host)  # host: the sandbox's resolved, canonical path
    except ValueError:  # a file the sandbox serves from elsewhere: its guest path, absolute
        path = os.fsdecode(guest)
        return posixpath.normpath(posixpath.join(k.sandbox.guest_cwd, path))


def _shebang(head: bytes) -> tuple[bytes, bytes | None] | None:
    """(interpreter, optional argument) of a "#!" line (fs/binfmt_script.c: the rest of
    the line after the interpreter's name is one argument, blanks trimmed)."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].strip(b" \t")
    if not line:
        raise GuestError("ENOEXEC")
    name, _, rest = line.replace(b"\t", b" ").partition(b" ")
    rest = rest.strip(b" ")
    return name, rest or None


@syscall("execve")
def sys_execve(k: K, a: tuple[int, ...]) -> int:
    path = k.string(a[0])
    space = ArgSpace(k.word)
    space.take(len(path) + 1)  # the file name is copied to the new stack first
    argv, envp = _strings(k, a[1], space), _strings(k, a[2], space)
    # /proc/self/exe is the guest's program, not emutrace (busybox runs its applets so)
    guest = os.fsencode(k.exe_guest_path) if path in PROC_SELF_EXE else path
    # AT_EXECFN: the path exactly as given (fs/exec.c copies bprm->filename to the new
    # stack and binfmt_elf points AT_EXECFN at it), relative or a script's own
    execfn = os.fsdecode(path)
    for _ in range(MAX_INTERPRETERS + 1):
        host = _executable(k, guest)
        with open(host, "rb") as f:
            head = f.read(BINPRM_BUF_SIZE)
        script = _shebang(head)
        if script is None:
            break
        interp, arg = script
        argv = [interp, *([arg] if arg else []), guest, *argv[1:]]
        guest = interp
    else:
        raise GuestError("ELOOP")
    if not head.startswith(b"\x7fELF"):
        raise GuestError("ENOEXEC")
    if k.exec_hook is None:
        raise GuestError("ENOSYS")
    try:
        image = k.exec_hook(host, argv, envp, exe_link(k, host, guest), execfn)
    except EmutraceError as e:  # an ELF of no ISA emutrace runs, a missing interpreter
        k.warn_once(f"exec:{host}", f"emutrace: execve {os.fsdecode(guest)}: {e}")
        raise GuestError("ENOEXEC") from None
    reset_for_exec(k)
    raise GuestExec(image)
