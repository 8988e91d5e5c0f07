"""The native target: an x86_64 or i386 program running on this host under ptrace(2).

`PtraceTarget` implements the target protocol (target/protocol.py) over one stopped tracee:
registers through PTRACE_GETREGS/SETREGS (fetched once per stop, written back before the
tracee resumes), memory through /proc/PID/mem, code patches through PTRACE_POKETEXT (the
kernel copies the text page on write and keeps the I-cache coherent: no cache to drop),
debug registers through PTRACE_POKEUSER.  Hooks are kept here and called by the native run
loop (target/ptrace_run.py) at the stops it takes.

`spawn` starts the child: fork, PTRACE_TRACEME, PR_SET_PDEATHSIG(SIGKILL) (the child dies
with us), ADDR_NO_RANDOMIZE (a reproducible layout, as under emulation), execve.  The
tracer also sets PTRACE_O_EXITKILL, so the child cannot outlive a tracer that is killed,
PTRACE_O_TRACESYSGOOD (system-call stops, when the loop resumes with PTRACE_SYSCALL for a
dynamic program's module watch, are SIGTRAP | 0x80), and asks for fork, vfork and exec
events (the run loop lets forked children go untraced and stops tracing at an exec:
target/ptrace_run.py).  A confined run's child also stops itself before execve so that the
tracer can ask for seccomp events, then installs the filter (`_spawn_confined`,
target/seccomp_filter.py); its children and exec'd images are then followed for their
checked calls (target/ptrace_confine.py, target/ptrace_children.py).

Register names: the ISA's short names (x86_64 rax…, i386 eax…; the 32-bit names are the low
halves of the 64-bit ones: a 64-bit tracer sees an i386 tracee through the same
`user_regs_struct`, <sys/user.h>), xmm0-15 and the x87 registers from the FXSAVE image of
PTRACE_GETFPREGS (`user_fpregs_struct`, Intel SDM vol. 1 §10.5.1).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from typing import Any, Protocol

from emutrace import stdio
from emutrace.errors import Unsupported
from emutrace.isa.base import Endian, Isa, RegValue
from emutrace.target import namespaces
from emutrace.target.namespaces import Layers
from emutrace.target.protocol import BlockHook, Capabilities, CodeHook, MemHook, MemoryFault
from emutrace.target.pulled import Lacking, WordMemory

# <linux/ptrace.h>, <asm/ptrace-abi.h> (x86)
PTRACE_TRACEME = 0
PTRACE_PEEKTEXT = 1
PTRACE_PEEKUSER = 3
PTRACE_POKETEXT = 4
PTRACE_POKEUSER = 6
PTRACE_CONT = 7
PTRACE_SINGLESTEP = 9
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_GETFPREGS = 14
PTRACE_SYSCALL = 24
PTRACE_SINGLEBLOCK = 33
PTRACE_SETOPTIONS = 0x4200
PTRACE_O_EXITKILL = 0x100000
PTRACE_O_TRACESYSGOOD = 0x1  # system-call stops report SIGTRAP | 0x80
PTRACE_O_TRACEFORK = 0x2
PTRACE_O_TRACEVFORK = 0x4
PTRACE_O_TRACEEXEC = 0x10
PTRACE_O_TRACEVFORKDONE = 0x20
PTRACE_O_TRACESECCOMP = 0x80
PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK, PTRACE_EVENT_EXEC, PTRACE_EVENT_VFORK_DONE = 1, 2, 4, 5
PTRACE_EVENT_SECCOMP = 7
PTRACE_GETEVENTMSG = 0x4201
PTRACE_DETACH = 17
WALL = 0x40000000  # __WALL: wait for any child, cloned or not
EFLAGS_TF = 0x100
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ADDR_NO_RANDOMIZE = 0x0040000  # <linux/personality.h>

# struct user_regs_struct (x86_64 <sys/user.h>), in order
USER_REGS = ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax",
             "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss",
             "fs_base", "gs_base", "ds", "es", "fs", "gs")
_INDEX = {name: i for i, name in enumerate(USER_REGS)}
# 32-bit names → the 64-bit slot whose low half they are (i386 tracees and x86_64 operands)
_LOW32 = {"eax": "rax", "ebx": "rbx", "ecx": "rcx", "edx": "rdx", "esi": "rsi",
          "edi": "rdi", "ebp": "rbp", "esp": "rsp", "eip": "rip",
          **{f"r{n}d": f"r{n}" for n in range(8, 16)}}
# offsetof(struct user, u_debugreg) on x86_64 (<sys/user.h>: regs 216, u_fpvalid + pad 8,
# i387 512, u_tsize/dsize/ssize 24, start_code/stack 16, signal 8, reserved + pad 8,
# u_ar0 8, u_fpstate 8, magic 8, u_comm 32)
DEBUGREG_OFFSET = 848
DEBUG_SLOTS = 4  # DR0-DR3
FXSAVE_SIZE = 512
INT3 = b"\xcc"  # Intel SDM vol. 2: INT3, the one-byte breakpoint
FX_SWD, FX_ST, FX_XMM = 2, 32, 160  # FXSAVE image: FSW, ST0-7 (16 bytes each), XMM0-15

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]
_libc.personality.argtypes = [ctypes.c_ulong]


class ResumeLoop(Protocol):
    """A run loop's resume-and-wait in C (native/ploop.py PtraceLoop)."""

    @property
    def steps_quietly(self) -> bool:
        """`step` told C which of its hooks C may take (`step` then goes through C)."""

    def resume(self, pid: int, sig: int, request: int) -> tuple[int, int]: ...

    def step(self, pid: int, sig: int) -> tuple[int, int]: ...

    @property
    def blocks_quietly(self) -> bool:
        """`btf` told C which instructions its walk runs on past (`btf` goes through C)."""

    def block(self, pid: int, sig: int, start: int) -> tuple[int, int]: ...

    def close(self) -> None: ...


class PtraceError(Unsupported):
    """A ptrace request failed (exit 69, one line with the reason)."""


def ptrace(request: int, pid: int, addr: int = 0, data: int | ctypes.c_void_p = 0) -> int:
    ctypes.set_errno(0)
    result = int(_libc.ptrace(request, pid, ctypes.c_void_p(addr),
                              data if isinstance(data, ctypes.c_void_p)
                              else ctypes.c_void_p(data)))
    if result == -1:
        err = ctypes.get_errno()
        if err:
            raise OSError(err, os.strerror(err))
    return result


def event_message(pid: int) -> int:
    """PTRACE_GETEVENTMSG: at a fork event, the new child's pid."""
    msg = ctypes.c_ulong()
    ptrace(PTRACE_GETEVENTMSG, pid, 0, ctypes.c_void_p(ctypes.addressof(msg)))
    return int(msg.value)


def ptrace_refusal() -> str | None:
    """Why ptrace cannot work here before trying (Yama's ptrace_scope 3: no attach at
    all, Documentation/admin-guide/LSM/Yama.rst), or None."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() == "3":
                return "kernel.yama.ptrace_scope is 3 (ptrace disabled on this host)"
    except OSError:
        pass
    return None


def spawn(path: str, argv: list[bytes], envp: list[bytes], seccomp: bytes | None = None,
          cwd: str | None = None, layers: Layers | None = None) -> int:
    """Fork a child that stops, traced by us, at its first instruction after execve.
    A failure in the child (PTRACE_TRACEME refused: we are traced ourselves, or a
    seccomp/LSM policy) comes back through a pipe as one line: PtraceError.

    With a `seccomp` filter (target/seccomp_filter.py, the confinement) the child starts
    in `cwd`, stops itself (SIGSTOP) so that the tracer can ask for PTRACE_O_TRACESECCOMP
    first, then installs the filter and makes its execve, which the tracer lets through
    unchecked (the program may lie outside the sandbox root, as under emulation).  With
    `layers` it first enters the kernel sandbox (target/namespaces.py): a PID namespace
    whose reaper `kill` ends with the child, then its mount, user, network, IPC and UTS
    namespaces, Landlock and no capabilities."""
    if seccomp is not None:
        return _spawn_confined(path, argv, envp, seccomp, cwd, layers)
    reason = ptrace_refusal()
    if reason is not None:
        raise PtraceError(f"--target native: {reason}")
    parent = os.getpid()
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: never returns into the tracer's code
        try:
            os.close(read_end)
            if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 \
                    or os.getppid() != parent:
                os._exit(127)
            _libc.personality(ADDR_NO_RANDOMIZE)
            ctypes.set_errno(0)
            if _libc.ptrace(PTRACE_TRACEME, 0, None, None) == -1:
                err = ctypes.get_errno()
                os.write(write_end, traceme_refusal(err).encode())
                os._exit(127)
            stdio.close_for_guest()  # closed when emutrace started: closed for it
            os.execve(path, argv, dict(_split_env(envp)))
        except OSError as e:
            os.write(write_end, f"execve {path}: {e.strerror}".encode())
        except BaseException:  # noqa: BLE001 - the child must never return
            pass
        os._exit(127)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        failure = pipe.read().decode(errors="replace")  # EOF at execve (close-on-exec)
    if failure:
        os.waitpid(pid, 0)
        raise PtraceError(f"--target native: {failure}")
    _, status = os.waitpid(pid, 0)
    if not os.WIFSTOPPED(status):
        raise PtraceError(f"--target native: the child ended before its first instruction "
                          f"(status {status:#x})")
    try:
        ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_EXITKILL | PTRACE_O_TRACESYSGOOD
               | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEVFORKDONE
               | PTRACE_O_TRACEEXEC)
    except OSError as e:
        kill(pid)
        raise PtraceError(f"--target native: PTRACE_SETOPTIONS: {e.strerror}") from None
    return pid


def _spawn_confined(path: str, argv: list[bytes], envp: list[bytes], seccomp: bytes,
                    cwd: str | None, layers: Layers | None) -> int:
    from emutrace.target.seccomp_filter import install  # (it imports nothing of ours)

    reason = ptrace_refusal()
    if reason is not None:
        raise PtraceError(f"--target native: {reason}")
    gaps = namespaces.refusal() if layers is not None else ""
    if gaps:
        raise PtraceError(f"--target native: {gaps} (--unconfined runs without)")
    pid_ns = namespaces.PidNamespace() if layers is not None else None
    parent = 0 if pid_ns is not None else os.getpid()  # (our pid is outside its namespace)
    path = os.path.abspath(path)  # (before the child's chdir)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork() if pid_ns is None else pid_ns.fork()
    except (OSError, namespaces.SandboxRefused) as e:
        os.close(read_end)
        os.close(write_end)
        raise PtraceError(f"--target native: the guest's PID namespace: {e}") from None
    if pid == 0:  # the child: never returns into the tracer's code
        try:
            os.close(read_end)
            if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 \
                    or os.getppid() != parent:
                os._exit(127)
            _libc.personality(ADDR_NO_RANDOMIZE)
            if cwd is not None:
                os.chdir(cwd)
            ctypes.set_errno(0)
            if _libc.ptrace(PTRACE_TRACEME, 0, None, None) == -1:
                err = ctypes.get_errno()
                os.write(write_end, traceme_refusal(err).encode())
                os._exit(127)
            os.kill(os.getpid(), signal.SIGSTOP)  # the tracer sets its options
            if layers is not None:
                try:
                    namespaces.enter(layers)
                except namespaces.SandboxRefused as e:
                    os.write(write_end, f"the kernel sandbox: {e} (--unconfined runs "
                                        f"without)".encode())
                    os._exit(127)
                if cwd is not None:
                    os.chdir(cwd)  # (through the writable directories' new mounts)
            failure = install(seccomp)
            if failure is not None:
                os.write(write_end, f"{failure} (the sandbox of a native run needs seccomp "
                                    f"filters; --unconfined runs without)".encode())
                os._exit(127)
            stdio.close_for_guest()  # closed when emutrace started: closed for it
            os.execve(path, argv, dict(_split_env(envp)))
        except OSError as e:
            os.write(write_end, f"execve {path}: {e.strerror}".encode())
        except BaseException:  # noqa: BLE001 - the child must never return
            pass
        os._exit(127)
    os.close(write_end)
    if pid_ns is not None:
        _pid_namespaces[pid] = pid_ns
    try:
        _start_confined(pid)
    except PtraceError:
        with os.fdopen(read_end, "rb") as pipe:
            failure = pipe.read().decode(errors="replace")
        kill(pid)
        if failure:
            raise PtraceError(f"--target native: {failure}") from None
        raise
    os.close(read_end)
    return pid


def _start_confined(pid: int) -> None:
    """The tracer's half of `_spawn_confined`: PTRACE_O_TRACESECCOMP at the child's
    SIGSTOP; its own calls up to execve let through; then the SIGTRAP after execve (no
    PTRACE_O_TRACEEXEC yet: that stop is in the kernel's return to user mode, as without
    confinement, where a PTRACE_EVENT_EXEC stop is still in the system call's exit and a
    single-step from it traps before the first instruction) and the run's options."""
    _, status = os.waitpid(pid, 0)
    if not os.WIFSTOPPED(status):
        raise PtraceError(f"--target native: the child ended before its execve "
                          f"(status {status:#x})")
    try:
        ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_EXITKILL | PTRACE_O_TRACESECCOMP)
    except OSError as e:
        raise PtraceError(f"--target native: PTRACE_SETOPTIONS: {e.strerror}") from None
    ptrace(PTRACE_CONT, pid, 0, 0)  # (the SIGSTOP is not delivered)
    while True:
        _, status = os.waitpid(pid, 0)
        if not os.WIFSTOPPED(status):
            raise PtraceError(f"--target native: the child ended before its first "
                              f"instruction (status {status:#x})")
        if os.WSTOPSIG(status) == signal.SIGTRAP and not status >> 16:
            break  # execve done: stopped before the program's first instruction
        # our own calls before execve (execve among them): not the guest's, not checked
        ptrace(PTRACE_CONT, pid, 0, 0)
    ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_EXITKILL | PTRACE_O_TRACESYSGOOD
           | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEVFORKDONE
           | PTRACE_O_TRACEEXEC | PTRACE_O_TRACESECCOMP)


def traceme_refusal(err: int) -> str:
    """Why PTRACE_TRACEME failed in the child, read from its /proc/self/status (proc(5)):
    already traced (a tracer that follows forks: `strace -f`, gdb; ptrace(2) EPERM), or
    a seccomp filter (Seccomp: 2) that denies ptrace."""
    status: dict[str, str] = {}
    try:
        with open("/proc/self/status") as f:
            status = dict(line.rstrip("\n").partition(":")[::2] for line in f)
    except OSError:
        pass
    reason = f"PTRACE_TRACEME: {os.strerror(err)}"
    tracer = status.get("TracerPid", "0").strip()
    if tracer != "0":
        return f"{reason} (the child is already traced by pid {tracer}: emutrace runs " \
               f"under a tracer that follows forks)"
    if status.get("Seccomp", "0").strip() == "2":
        return f"{reason} (a seccomp filter of this process denies ptrace)"
    return reason


def _split_env(envp: list[bytes]) -> list[tuple[bytes, bytes]]:
    out = []
    for entry in envp:
        name, _, value = entry.partition(b"=")
        out.append((name, value))
    return out


def kill(pid: int) -> None:
    """SIGKILL the tracee and reap it (every exit path of a native run ends here), and
    with its PID namespace's reaper every process left in that namespace."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    else:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    pid_ns = _pid_namespaces.pop(pid, None)
    if pid_ns is not None:
        pid_ns.end()


_pid_namespaces: dict[int, namespaces.PidNamespace] = {}  # a sandboxed tracee's, by its pid


class PtraceTarget(Lacking, WordMemory):
    """One stopped tracee behind the target protocol."""

    kind = "ptrace"
    translates_code = False
    watches_memory = False  # loads and stores run on the CPU, unseen
    capabilities = Capabilities(missing={
        "memory_watch": "loads and stores run on the CPU, unseen by a debugger",
        "invalid_instruction": "an undecodable instruction is the host kernel's SIGILL to "
                               "the tracee, delivered as the process's signal",
        "port_io": "a user process has no I/O ports",
        "context": "the tracee's threads are the host kernel's: it saves and switches them",
        "host_memory": "the tracee's memory is its own address space, mapped by its "
                       "system calls",
        "devices": "a user process has no device registers to model",
        "run": "the run loop is the target's own (target/ptrace_run.py)",
        "c_port": "the C engine is the target's own loop (PtraceTarget.c_loop)",
    })

    def __init__(self, isa: Isa, pid: int) -> None:
        self.isa = isa
        self.pid = pid
        self.word = isa.identity.word_size
        self.byteorder: Endian = isa.identity.endian
        self._mask = (1 << (8 * self.word)) - 1
        self._regs = (ctypes.c_ulong * len(USER_REGS))()
        self._have_regs = False
        self._dirty = False
        self._fpregs: bytes | None = None
        self._mem = os.open(f"/proc/{pid}/mem", os.O_RDWR | os.O_CLOEXEC)
        # hooks the run loop calls (target/ptrace_run.py): code hooks over a range (the
        # tracee is single-stepped while any exists) and at one address (an int3 of the
        # target's own: `points`), block hooks
        self.code_hooks: dict[int, tuple[CodeHook, int, int, Any]] = {}
        self.range_hooks: dict[int, tuple[CodeHook, int, int, Any]] = {}
        self.point_hooks: dict[int, dict[int, tuple[CodeHook, Any]]] = {}  # addr → handles
        self.points: dict[int, bytes] = {}  # addr → the byte its hook's int3 replaced
        self.block_hooks: dict[int, BlockHook] = {}
        # branch traps (PTRACE_SINGLEBLOCK): fn(resumed at, stopped at, si_code)
        self.branch_hooks: dict[int, Callable[[int, int, int], None]] = {}
        # hardware instruction breakpoints: DR slot → (handle, address, hook, data)
        self.hw_slots: dict[int, tuple[int, int, CodeHook, Any]] = {}
        # called after each system call the tracee completes (target/native_modules.py)
        self.syscall_hooks: list[Callable[[], None]] = []
        self._next_handle = 1
        self.blocks_wanted = False  # a hook asked for the next block entry (want_blocks)
        self.stop_requested = False
        self.last_pc = 0  # where the run loop last stopped (for an interrupted run's report)
        self.originals: dict[int, int] = {}  # address → the program's byte under a patch
        self._lifted: dict[int, int] | None = None  # patches lifted for a vfork child
        self.untraced_children: list[int] = []  # forked children let go (release_child)
        self.exec_untraced = False  # the tracee exec'd: its new image ran untraced
        self.c_loop: ResumeLoop | None = None  # PTRACE_CONT and its wait in C (ploop.c)

    @property
    def mem_fd(self) -> int:
        """/proc/PID/mem, open read-write (the C loop writes pushed return addresses)."""
        return self._mem

    def close(self) -> None:
        if self._mem >= 0:
            os.close(self._mem)
            self._mem = -1

    # ------------------------------------------------------------ registers
    def _fetch(self) -> None:
        if not self._have_regs:
            ptrace(PTRACE_GETREGS, self.pid, 0, ctypes.c_void_p(ctypes.addressof(self._regs)))
            self._have_regs = True

    def reg_read(self, name: str) -> int:
        self._fetch()
        slot = _INDEX.get(name)
        if slot is not None:
            return int(self._regs[slot]) & self._mask
        wide = _LOW32.get(name)
        if wide is not None:
            return int(self._regs[_INDEX[wide]]) & 0xFFFFFFFF
        if name == "fpsw":
            return int.from_bytes(self._fxsave()[FX_SWD:FX_SWD + 2], "little")
        raw = self.raw_reg(name)
        if isinstance(raw, int):
            return raw
        raise KeyError(f"native target: no register {name}")

    def reg_write(self, name: str, value: RegValue) -> None:
        assert isinstance(value, int)
        self._fetch()
        slot = _INDEX.get(name)
        if slot is None:
            wide = _LOW32.get(name)
            if wide is None:
                raise KeyError(f"native target: cannot write register {name}")
            slot = _INDEX[wide]
            value &= 0xFFFFFFFF
        self._regs[slot] = value & self._mask
        self._dirty = True

    def _fxsave(self) -> bytes:
        if self._fpregs is None:
            buf = ctypes.create_string_buffer(FXSAVE_SIZE)
            ptrace(PTRACE_GETFPREGS, self.pid, 0, ctypes.c_void_p(ctypes.addressof(buf)))
            self._fpregs = buf.raw
        return self._fpregs

    def raw_reg(self, name: str) -> Any:
        """xmmN as a 128-bit integer; x87 fpN (physical register N = ST((N - TOP) mod 8))
        as (significand, sign|exponent), as Unicorn gives them."""
        if name.startswith("xmm") and name[3:].isdigit():
            at = FX_XMM + 16 * int(name[3:])
            return int.from_bytes(self._fxsave()[at:at + 16], "little")
        if name.startswith("fp") and name[2:].isdigit():
            fx = self._fxsave()
            top = (int.from_bytes(fx[FX_SWD:FX_SWD + 2], "little") >> 11) & 7
            at = FX_ST + 16 * ((int(name[2:]) - top) % 8)  # FXSAVE stores ST(i), not FPi
            return (int.from_bytes(fx[at:at + 8], "little"),
                    int.from_bytes(fx[at + 8:at + 10], "little"))
        return self.reg_read(name)

    @property
    def pc(self) -> int:
        return self.reg_read(self.isa.registers.pc)

    def after_syscall(self) -> bool:
        """Stopped at a system call's exit: orig_rax holds its number (an exception's
        entry, a single-step trap's included, stores -1 there: arch/x86/entry)."""
        return self.reg_read("orig_rax") != self._mask

    def in_alt_mode(self) -> bool:
        return False  # x86 has no second instruction set

    def reg_id(self, name: str) -> int:
        return _INDEX.get(name, _INDEX.get(_LOW32.get(name, ""), -1))

    def flush(self) -> None:
        """Before the tracee runs: registers written back, cached state forgotten."""
        if self._dirty:
            ptrace(PTRACE_SETREGS, self.pid, 0, ctypes.c_void_p(ctypes.addressof(self._regs)))
            self._dirty = False
        self._have_regs = False
        self._fpregs = None

    # ------------------------------------------------------------ memory
    def mem_read(self, addr: int, size: int) -> bytes:
        try:
            data = os.pread(self._mem, size, addr)
        except OSError as e:
            raise MemoryFault(f"read of {size} bytes at {addr:#x}: {e.strerror}") from None
        if len(data) != size:
            raise MemoryFault(f"read of {size} bytes at {addr:#x}: unmapped")
        if self.points and any(addr <= p < addr + size for p in self.points):
            out = bytearray(data)  # the target's own hook breakpoints are not seen
            for p, original in self.points.items():
                if addr <= p < addr + size:
                    out[p - addr] = original[0]
            return bytes(out)
        return data

    def mem_write(self, addr: int, data: bytes) -> None:
        try:
            done = os.pwrite(self._mem, data, addr)
        except OSError as e:
            raise MemoryFault(f"write of {len(data)} bytes at {addr:#x}: {e.strerror}") \
                from None
        if done != len(data):
            raise MemoryFault(f"write of {len(data)} bytes at {addr:#x}: unmapped")

    def mem_map(self, addr: int, size: int, perms: int = 7) -> None:
        raise Unsupported("native target: the tracee maps its own memory")

    def memory_regions(self) -> list[tuple[int, int, int]]:
        """The tracee's mappings from /proc/PID/maps (proc(5)): (first, last, perms)."""
        bits = {"r": 1, "w": 2, "x": 4}  # Unicorn's UC_PROT_* values, as the protocol's
        regions = []
        with open(f"/proc/{self.pid}/maps") as maps:
            for line in maps:
                span, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in span.split("-"))
                regions.append((lo, hi - 1, sum(bits.get(c, 0) for c in perms[:3])))
        return regions

    # ------------------------------------------------------------ code
    def write_code(self, addr: int, data: bytes) -> None:
        """PTRACE_PEEKTEXT/POKETEXT word by word (8-byte aligned words never cross a page),
        the way debuggers insert int3 (0xCC, Intel SDM vol. 2 INT3).  A byte under one of
        the target's own hook breakpoints is kept as that breakpoint's original."""
        if self.points and any(addr <= p < addr + len(data) for p in self.points):
            buf = bytearray(data)
            for p in self.points:
                if addr <= p < addr + len(data):
                    self.points[p] = bytes(buf[p - addr:p - addr + 1])
                    buf[p - addr] = INT3[0]
            data = bytes(buf)
        self._poke(addr, data)

    def _poke(self, addr: int, data: bytes, pid: int = 0, track: bool = True) -> None:
        """Write code bytes into the tracee (or another stopped tracee `pid`); with `track`,
        the program's own byte under every changed address is kept in `originals` until
        it is written back (what a forked child gets restored)."""
        pid = pid or self.pid
        at = 0
        while at < len(data):
            word_addr = (addr + at) & ~7
            offset = addr + at - word_addr
            n = min(8 - offset, len(data) - at)
            word = bytearray((ptrace(PTRACE_PEEKTEXT, pid, word_addr) & (2**64 - 1))
                             .to_bytes(8, "little"))
            if track:
                for i in range(n):
                    b = addr + at + i
                    old = self.originals.setdefault(b, word[offset + i])
                    if data[at + i] == old:
                        del self.originals[b]
            word[offset:offset + n] = data[at:at + n]
            ptrace(PTRACE_POKETEXT, pid, word_addr, int.from_bytes(word, "little"))
            at += n

    def _runs(self, values: dict[int, int]) -> list[tuple[int, bytes]]:
        """Byte values by address → contiguous (address, bytes) runs."""
        runs: list[tuple[int, bytearray]] = []
        for a in sorted(values):
            if runs and runs[-1][0] + len(runs[-1][1]) == a:
                runs[-1][1].append(values[a])
            else:
                runs.append((a, bytearray([values[a]])))
        return [(a, bytes(b)) for a, b in runs]

    # ------------------------------------------------------------ forks and exec
    def release_child(self, child: int, shares_memory: bool,
                      follow: Callable[[int], None] | None = None,
                      stopped: bool = False) -> None:
        """A child the tracee forked (auto-attached, PTRACE_O_TRACEFORK/VFORK) is let go
        untraced: its copy of the code gets the program's own bytes back (after a vfork it
        shares the tracee's memory: every patch is lifted until PTRACE_EVENT_VFORK_DONE,
        `settle_all`), its trap flag is cleared, and it is detached.  Debug registers are
        not inherited by a child (Linux copies no ptrace breakpoints).  With `follow`, it
        is handed to that instead of detached (a confined run keeps checking its calls:
        target/ptrace_children.py); `stopped`: its first stop was already waited for."""
        if not stopped:
            os.waitpid(child, WALL)  # its first stop (SIGSTOP)
        if shares_memory:
            self.lift_all()
        else:
            for a, data in self._runs(self.originals):
                self._poke(a, data, pid=child, track=False)
        regs = (ctypes.c_ulong * len(USER_REGS))()
        ptrace(PTRACE_GETREGS, child, 0, ctypes.c_void_p(ctypes.addressof(regs)))
        regs[_INDEX["eflags"]] &= ~EFLAGS_TF
        ptrace(PTRACE_SETREGS, child, 0, ctypes.c_void_p(ctypes.addressof(regs)))
        if follow is not None:
            follow(child)
            return
        ptrace(PTRACE_DETACH, child, 0, 0)
        self.untraced_children.append(child)

    def lift_all(self) -> None:
        """Every patch out (the program's bytes back), remembered for `settle_all`."""
        if self._lifted is not None:
            return
        self._lifted = {a: self.mem_read_raw(a) for a in self.originals}
        for a, data in self._runs(self.originals):
            self._poke(a, data, track=False)

    def settle_all(self) -> None:
        if self._lifted is None:
            return
        for a, data in self._runs(self._lifted):
            self._poke(a, data, track=False)
        self._lifted = None

    def mem_read_raw(self, addr: int) -> int:
        return os.pread(self._mem, 1, addr)[0]

    def drop_code_cache(self, begin: int, end: int) -> bool:
        return False  # a real CPU: the kernel's text write is coherent (nothing dropped)

    # ------------------------------------------------------------ debug registers
    def set_debugreg(self, index: int, value: int) -> None:
        """DR0-DR3 (addresses), DR7 (enables), Intel SDM vol. 3 §18.2, via PTRACE_POKEUSER."""
        ptrace(PTRACE_POKEUSER, self.pid, DEBUGREG_OFFSET + 8 * index, value)

    def debugreg(self, index: int) -> int:
        return ptrace(PTRACE_PEEKUSER, self.pid, DEBUGREG_OFFSET + 8 * index) & (2**64 - 1)

    # ------------------------------------------------------------ hooks
    def _handle(self) -> int:
        handle = self._next_handle
        self._next_handle += 1
        return handle

    def hook_code(self, fn: CodeHook, begin: int = 1, end: int = 0, data: Any = None) -> int:
        """A hook on one address is an int3 of the target's own there (hidden from
        mem_read; the run loop calls the hook, then steps the original instruction, as
        uprobes do); a hook on a range or everywhere makes the run loop single-step."""
        handle = self._handle()
        self.code_hooks[handle] = (fn, begin, end, data)
        if begin == end:
            at = self.point_hooks.setdefault(begin, {})
            at[handle] = (fn, data)
            if begin not in self.points:
                self.points[begin] = self.mem_read(begin, 1)
                self._poke(begin, INT3)
        else:
            self.range_hooks[handle] = (fn, begin, end, data)
        return handle

    def hook_hw(self, fn: CodeHook, begin: int, end: int, data: Any = None) -> int:
        """One address: a free debug register DR0-DR3 as an execute breakpoint (DR7: Ln
        enabled, R/Wn = 00, LENn = 00; Intel SDM vol. 3 §18.2.4); the CPU faults before
        the instruction and the kernel sets EFLAGS.RF so that it runs on resuming.  A span:
        single-stepping across it (a range hook)."""
        if begin != end:
            return self.hook_code(fn, begin, end, data)
        free = [n for n in range(DEBUG_SLOTS) if n not in self.hw_slots]
        if not free:
            raise Unsupported(f"native target: the {DEBUG_SLOTS} debug registers are in use")
        slot = free[0]
        handle = self._handle()
        self.hw_slots[slot] = (handle, begin, fn, data)
        self.set_debugreg(slot, begin)
        self._write_dr7()
        return handle

    def hook_branch(self, fn: Callable[[int, int, int], None]) -> int:
        """fn(resumed at, stopped at, si_code) at each branch trap: the run loop resumes the
        tracee with PTRACE_SINGLEBLOCK while such a hook exists."""
        handle = self._handle()
        self.branch_hooks[handle] = fn
        return handle

    def _write_dr7(self) -> None:
        self.set_debugreg(7, sum(1 << (2 * n) for n in self.hw_slots))

    def hw_hooks_at(self, addr: int) -> list[tuple[CodeHook, Any]]:
        return [(fn, data) for _h, at, fn, data in self.hw_slots.values() if at == addr]

    def lift_point(self, addr: int) -> bool:
        """Before the instruction at a hooked address runs: its original byte back (the run
        loop single-steps it, then `settle_point`)."""
        original = self.points.get(addr)
        if original is None:
            return False
        self._poke(addr, original)
        return True

    def settle_point(self, addr: int) -> None:
        if addr in self.points:
            self._poke(addr, INT3)

    def hook_block(self, fn: BlockHook, begin: int = 1, end: int = 0) -> int:
        if begin <= end:
            raise Unsupported("native target: a block hook covers every block")
        handle = self._handle()
        self.block_hooks[handle] = fn
        return handle

    def hook_mem_read(self, fn: MemHook, begin: int, end: int) -> int:
        raise Unsupported("native target: loads cannot be watched")

    def hook_mem_write(self, fn: MemHook, begin: int, end: int) -> int:
        raise Unsupported("native target: stores cannot be watched")

    def hook_code_stores(self, fn: MemHook, begin: int, end: int) -> None:
        raise Unsupported("native target: stores cannot be watched")

    def hook_del(self, handle: int) -> None:
        slot = next((n for n, got in self.hw_slots.items() if got[0] == handle), None)
        if slot is not None:
            del self.hw_slots[slot]
            self._write_dr7()
            return
        hook = self.code_hooks.pop(handle, None)
        self.block_hooks.pop(handle, None)
        self.branch_hooks.pop(handle, None)
        self.range_hooks.pop(handle, None)
        if hook is not None and hook[1] == hook[2]:
            addr = hook[1]
            at = self.point_hooks.get(addr, {})
            at.pop(handle, None)
            if not at:
                del self.point_hooks[addr]
                self._poke(addr, self.points.pop(addr))

    def want_blocks(self) -> None:
        self.blocks_wanted = True

    # ------------------------------------------------------------ what it has not
    # (the services only an emulator gives: pulled.Lacking refuses them)
    lacking_label = "native target"

    @property
    def page_size(self) -> int:
        return os.sysconf("SC_PAGE_SIZE")

    def stop(self) -> None:
        self.stop_requested = True
