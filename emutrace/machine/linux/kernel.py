"""The generic Linux system-call layer: decode a trap with the ISA's convention, dispatch by
name through the ISA's generated number table, and encode the result the ISA's way.

Handlers live in ``sys_*.py`` modules and register by name in :mod:`.table`; ISA-private calls
(TLS set-up) come from the ISA description.  No ISA is named here.
"""

from __future__ import annotations

import copy
import dataclasses
import errno as host_errno
import os
import random
import resource
import select
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emutrace import stdio
from emutrace.isa.abi import Abi, StructLayout, load_abi
from emutrace.isa.base import Endian, GuestError, Isa, SyscallErrors
from emutrace.machine.linux.devfs import dev_tree, inherited_path
from emutrace.machine.linux.memory import AddressSpace, OutOfMemory
from emutrace.machine.linux.pipe_write import blocking_pipe, write_pipe
from emutrace.machine.linux.procfs import proc_tree
from emutrace.machine.linux.table import HANDLERS
from emutrace.machine.linux.threads import Scheduler, WouldBlock
from emutrace.sandbox import Sandbox, SandboxError
from emutrace.target import host_calls
from emutrace.target.host_calls import HostCallInterrupted
from emutrace.target.protocol import MemoryFault
from emutrace.target.unicorn_cpu import UnicornCpu
from emutrace.trace.events import SignalDelivery

PATH_MAX = 4096  # include/uapi/linux/limits.h, with the terminating NUL


def fd_limit(hard: bool = False) -> int:
    """The guest's RLIMIT_NOFILE: emutrace's own, less a reserve for emutrace's own files
    (traces, recordings, a forked child's spill file), so a guest that uses up its
    descriptors gets EMFILE as on Linux and emutrace still opens what it must."""
    soft, top = resource.getrlimit(resource.RLIMIT_NOFILE)
    value = top if hard else soft
    if value == resource.RLIM_INFINITY:
        return 1 << 20  # fs.nr_open's default
    return max(value - max(64, value // 16), 16)
# fs/read_write.c: one read or write moves at most INT_MAX rounded down to a page
MAX_RW_COUNT = 0x7FFFF000
# data moves between guest memory and host files in pieces of this size, so emutrace's own
# memory stays bounded whatever length the guest passes (a 2 GiB write is 2,048 pieces)
IO_CHUNK = 1 << 20


def rw_count(size: int) -> int:
    """A read/write length as the kernel clamps it (rw_verify_area)."""
    return min(size, MAX_RW_COUNT)


CR0_SO = 0x10000000  # summary-overflow bit of CR field 0 in the 32-bit CR image


class GuestExit(Exception):
    """The guest called exit/exit_group; raised out of the hook to end emulation."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class GuestKilled(Exception):
    """The guest got a signal whose action ends it (abort → tgkill(SIGABRT), SIGPIPE)."""

    def __init__(self, signal_name: str, host_signal: int) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.host_signal = host_signal


class GuestExec(Exception):
    """execve succeeded: `image` (built by the session's exec hook) replaces the program;
    raised out of the hook to end this image's emulation."""

    def __init__(self, image: object) -> None:
        super().__init__("execve")
        self.image = image


@dataclass
class FileDesc:
    host_fd: int
    guest_path: str
    cloexec: bool = False
    dir_entries: list[tuple[bytes, int, int]] | None = None  # getdents64 snapshot
    dir_pos: int = 0
    # an object of /dev or /proc (vfs.Node) that emutrace serves: its reads and writes
    # (a device), stat and directory listing come from it; host_fd is then a stand-in
    node: Any = None


@dataclass
class SyscallStats:
    count: int = 0
    by_name: dict[str, int] = field(default_factory=dict)


class LinuxKernel:
    def __init__(self, cpu: UnicornCpu, isa: Isa, abi: Abi, space: AddressSpace,
                 sandbox: Sandbox, exe_guest_path: str,
                 warn: Callable[[str], None], seed: int = 0) -> None:
        self.cpu = cpu
        self.isa = isa
        self.abi = abi
        self.space = space
        self.sandbox = sandbox
        self.exe_guest_path = exe_guest_path
        self.warn = warn
        self.conv = isa.syscalls
        self.word = isa.identity.word_size
        self.mask = (1 << (8 * self.word)) - 1
        self.ret_mask = self.mask  # the result register's width (wider on a compat entry)
        self.endian: Endian = isa.identity.endian
        self.rng = random.Random(seed)  # getrandom/AT_RANDOM: deterministic runs
        self.fds: dict[int, FileDesc] = {
            n: FileDesc(os.dup(n), inherited_path(sandbox.root, n))
            for n in stdio.STANDARD if n not in stdio.CLOSED  # closed at start: closed
        }
        self.stats = SyscallStats()
        self.sig_ignored: set[int] = set()  # signals whose disposition is SIG_IGN
        self.sig_mask = 0  # the blocked-signal mask the guest set
        # signal delivery (sys_sigdeliver.py): actions by guest signal number, signals
        # waiting to be delivered, the saved contexts of handlers running, the trampoline
        self.sig_actions: dict[int, Any] = {}
        self.sig_pending: set[int] = set()
        self.sig_frames: list[Any] = []
        self.sig_trampoline: int | None = None
        self.sig_suspend_mask: int | None = None  # rt_sigsuspend: the mask to restore
        self.sig_altstack: tuple[int, int] | None = None  # sigaltstack: (base, size)
        # a CPU fault (by signal name, fault address): the handler's entry to resume
        # emulation at, or None for the default action (set by sys_sigdeliver.py)
        self.fault_hook: Callable[[str, int | None], int | None] | None = None
        self.sigreturn_hook: Callable[[], bool] | None = None  # True: it was a sigreturn
        self.deliver_hook: Callable[[], None] | None = None  # after every system call
        # the call just made loaded every register from guest memory (ppc32's
        # swapcontext into a context, sys_ucontext.py): no result is written over them
        self.registers_loaded = False
        # a tracer told when such a call goes on elsewhere without a branch (the system
        # call's address, where control goes on): backends' context_loaded
        self.on_context_loaded: Callable[[int, int], None] | None = None
        # a tracer told of signal handlers (the backend's TrapAware methods): a handler is
        # entered (its address, where the interrupted code resumes and the handler's
        # stack), and a handler's return reached rt_sigreturn (at the trampoline)
        self.on_handler_entered: Callable[[int, SignalDelivery], None] | None = None
        self.on_handler_returned: Callable[[int], None] | None = None
        # processes (sys_process.py): one host process per guest process
        self.children: set[int] = set()  # host pids of the guest's children
        self.pidfds: dict[int, int] = {}  # child pid -> its pidfd, while waited for (child_wait.py)
        self.guest_parent: int | None = None  # the parent's pid when it is a guest too
        self.fork_listeners: list[Callable[[int], None]] = []  # run in the child, its pid
        # limits the guest set for itself that the Linux layer applies (setrlimit(2); kept
        # across execve): host resource number -> (soft, hard).  RLIMIT_FSIZE: write_fd
        self.rlimits: dict[int, tuple[int | None, int | None]] = {}
        # told of each system call made (`--syscalls`): its name, arguments and result
        # (None: it did not return — exit, an execve that runs — or blocked its thread)
        self.syscall_listeners: list[Callable[[str, tuple[int, ...], int | None], None]] = []
        # fork/vfork/clone fork the host process: only the CLI, whose child ends in
        # os._exit, allows it (RunConfig.host_fork); a run embedded in another program (a
        # test, the bench) must never return into that program in a second process
        self.host_fork = False
        # builds the image of an execve (set by the session): (host path, argv, envp,
        # /proc/self/exe's guest path, AT_EXECFN) -> the new image, or raises GuestError /
        # EmutraceError
        self.exec_hook: Callable[[str, list[bytes], list[bytes], str, str], object] | None \
            = None
        self._warned: set[str] = set()
        self.threads = Scheduler(self, os.getpid())  # the process's threads (threads.py)
        self._dispatch = self._build_dispatch()
        # told of every file mapping made executable (host path, address, file offset):
        # how a tracer learns the modules ld.so maps (discover.modules); None: nobody asks
        self.on_exec_map: Callable[[str, int, int], object] | None = None
        # what /proc/self tells (procfs.py): argv and envp and where their strings lie in
        # guest memory (set by the session), and the mappings' names: (start, end, file
        # offset, guest path or "") in mapping order
        self.proc_args: tuple[list[bytes], list[bytes]] = ([], [])
        self.arg_area: tuple[int, int, int, int] | None = None  # arg and env start, end
        self.comm: bytes | None = None  # prctl(PR_SET_NAME)'s name (None: the program's)
        self.auxv = b""  # the auxiliary vector the program started with (procfs.py)
        self.file_maps: list[tuple[int, int, int, str]] = []
        # the guest's /dev and /proc are emutrace's, whatever the root holds
        sandbox.mount(b"dev", dev_tree(self.random_bytes))
        sandbox.mount(b"proc", proc_tree(self))

    def _build_dispatch(self) -> dict[int, tuple[str, Callable[..., int]]]:
        table: dict[int, tuple[str, Callable[..., int]]] = {}
        for name, nr in self.abi.syscalls.items():
            private = self.isa.private_syscalls.get(name)
            if private is not None:
                table[nr] = (name, lambda k, a, _p=private: _p(k.cpu, a))
            elif name in HANDLERS and name in self.isa.packed_args:
                count, handler = self.isa.packed_args[name], HANDLERS[name]
                table[nr] = (name, lambda k, a, _n=count, _h=handler: _h(
                    k, tuple(k.unpack_words(k.read(a[0], _n * k.word)))))
            elif name in HANDLERS:
                table[nr] = (name, HANDLERS[name])
        return table

    # ------------------------------------------------------------ trap entry
    def on_syscall(self) -> None:
        cpu, conv = self.cpu, self.conv
        if self.sigreturn_hook is not None and self.sigreturn_hook():
            return  # a signal handler returned to the trampoline: its context is back
        if conv.imm_number is not None:
            off, size = conv.imm_number
            nr = int.from_bytes(cpu.mem_read(cpu.pc + off, size), self.endian)
            if nr == 0:
                nr = cpu.reg_read(conv.number)
        else:
            nr = cpu.reg_read(conv.number)
        args = [cpu.reg_read(r) for r in conv.args]
        if conv.stack_args:
            sp = cpu.reg_read(self.isa.registers.sp) + conv.stack_args_offset
            args += [cpu.read_word(sp + i * self.word) for i in range(conv.stack_args)]
        if conv.pc_advance:
            cpu.reg_write(self.isa.registers.pc, cpu.pc + conv.pc_advance)
        if self.syscall_listeners:
            self._set_result(self._told(nr, tuple(args)))
        else:
            self._set_result(self.call(nr, tuple(args)))
        if self.sig_pending and self.deliver_hook is not None:
            self.deliver_hook()

    def _told(self, nr: int, args: tuple[int, ...]) -> int:
        """`call`, and each of `syscall_listeners` told of it, after it."""
        name = self.abi.syscall_names.get(nr, f"#{nr}")
        try:
            result = self.call(nr, args)
        except BaseException:
            for listener in self.syscall_listeners:
                listener(name, args, None)
            raise
        for listener in self.syscall_listeners:
            listener(name, args, result)
        return result

    def call(self, nr: int, args: tuple[int, ...]) -> int:
        """Run syscall nr; returns the result, -errno (as a negative int) on failure."""
        self.stats.count += 1
        entry = self._dispatch.get(nr)
        if entry is None:
            name = self.abi.syscall_names.get(nr, f"#{nr}")
            self._warn_once(f"unknown:{nr}",
                            f"emutrace: unsupported syscall {name} (nr {nr}): returning ENOSYS")
            return -self.errno("ENOSYS")
        name, handler = entry
        self.stats.by_name[name] = self.stats.by_name.get(name, 0) + 1
        return self._run(handler, args)

    def _run(self, handler: Callable[..., int], args: tuple[int, ...]) -> int:
        host_calls.enter()  # a stop may interrupt a blocked host call: target/host_calls.py
        try:
            return int(handler(self, args))
        except HostCallInterrupted:
            return -self.errno("EINTR")  # the run ends where the stop was asked for
        except WouldBlock as e:  # another thread runs meanwhile; the call is made again
            resume = e.resume
            again = handler if resume is None else lambda _k, _a: resume()
            return self.threads.block_on_host(e, lambda: self._run(again, args))
        except GuestError as e:
            return -self.errno(e.errno_name)
        except SandboxError as e:
            if e.denied:  # a policy refusal, not an ordinary ENOENT: tell the user once
                self._warn_once(str(e), str(e))
            return -self.errno(e.errno_name)
        except OSError as e:
            if e.errno == host_errno.EPIPE:
                self.pipe_broken()
            code = host_errno.errorcode.get(e.errno or 0, "EIO")
            return -self.errno(code)
        except (OverflowError, ValueError):  # an argument no host call accepts, as Linux: EINVAL
            return -self.errno("EINVAL")
        except (MemoryError, OutOfMemory):
            return -self.errno("ENOMEM")
        except MemoryFault:
            # an ISA-private handler (isa/ imports no emulator, so it reads guest memory
            # through the CpuPort unchecked) given a bad pointer: EFAULT, as copy_from_user
            # gives (fuzz: i386 set_thread_area of an unmapped user_desc)
            return -self.errno("EFAULT")
        finally:
            host_calls.leave()

    def set_result(self, value: int) -> None:
        """Write a system call's result the ISA's way (a woken thread's blocked call)."""
        self._set_result(value)

    def _set_result(self, value: int) -> None:
        cpu, conv = self.cpu, self.conv
        if self.registers_loaded:
            self.registers_loaded = False
            return
        failed = -4095 <= value < 0
        if conv.errors is SyscallErrors.NEGATIVE or not failed:
            cpu.reg_write(conv.ret, value & self.ret_mask)
        else:
            cpu.reg_write(conv.ret, -value)
        if conv.errors is SyscallErrors.CR0_SO and conv.error_flag_reg:
            cr = cpu.reg_read(conv.error_flag_reg)
            cpu.reg_write(conv.error_flag_reg, cr | CR0_SO if failed else cr & ~CR0_SO)
        elif conv.errors is SyscallErrors.A3_FLAG and conv.error_flag_reg:
            cpu.reg_write(conv.error_flag_reg, 1 if failed else 0)

    def pipe_broken(self) -> None:
        """A write to a pipe nobody reads: Linux sends SIGPIPE, whose default action ends
        the process (emutrace itself ignores SIGPIPE and sees EPIPE); an ignored or blocked
        SIGPIPE leaves the guest the EPIPE (pipe(7))."""
        sig = self.abi.constants.get("SIGPIPE", 13)
        if sig in self.sig_ignored or self.sig_mask >> (sig - 1) & 1:
            return
        raise GuestKilled("SIGPIPE", 13)

    def signal_name(self, number: int) -> str | None:
        """The guest's signal `number` by name ("SIGCHLD"), or None."""
        return next((n for n, v in self.abi.constants.items()
                     if v == number and n.startswith("SIG") and not n.startswith("SIG_")
                     and n not in ("SIGRTMIN", "SIGRTMAX", "SIGSTKSZ")), None)

    def warn_once(self, key: str, message: str) -> None:
        """One warning line per key and run (handlers: an unsupported case met again)."""
        self._warn_once(key, message)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warn(message)

    def compat_entry(self, sibling: Isa) -> LinuxKernel:
        """The kernel behind the ISA's 32-bit compat trap (isa.compat_syscalls): the
        sibling's numbers, registers, constants and structs over this process's state (the
        same descriptors, memory, sandbox and signal dispositions: a shallow copy shares
        them).  The sibling's private calls (i386 set_thread_area edits a GDT this CPU
        does not use) are left out: ENOSYS."""
        compat = self.isa.compat_syscalls
        assert compat is not None
        view = copy.copy(self)
        view.isa, view.abi = sibling, load_abi(sibling.name)
        view.conv = dataclasses.replace(sibling.syscalls, ret=compat.ret)
        view.word = sibling.identity.word_size
        view.mask = (1 << (8 * view.word)) - 1
        view.ret_mask = self.mask  # the kernel stores a long: -errno sign-extended
        view._dispatch = {nr: entry for nr, entry in view._build_dispatch().items()
                          if entry[0] not in sibling.private_syscalls}
        return view

    # ------------------------------------------------------------ helpers for handlers
    def errno(self, name: str) -> int:
        return self.abi.errno.get(name) or self.abi.errno["EINVAL"]

    def const(self, name: str) -> int:
        return self.abi.constants[name]

    def signed(self, value: int) -> int:
        value &= self.mask
        return value - (1 << (8 * self.word)) if value >> (8 * self.word - 1) else value

    @staticmethod
    def int32(value: int) -> int:
        """A C `int` argument (fds, dirfds, flags): the low 32 bits, sign-extended."""
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value >> 31 else value

    def arg64(self, args: tuple[int, ...], i: int) -> tuple[int, int]:
        """A 64-bit argument at position i; returns (value, index of the next argument)."""
        if self.word == 8:
            return args[i], i + 1
        if self.conv.pair_aligned and i % 2:
            i += 1
        first, second = args[i], args[i + 1]
        hi, lo = (first, second) if self.endian == "big" else (second, first)
        value = (hi << 32) | lo
        return (value - (1 << 64) if value >> 63 else value), i + 2

    # The one checked way for handlers to reach guest memory: an address the guest has not
    # mapped is EFAULT, as Linux's copy_from_user/copy_to_user give, never a guest SIGSEGV.
    def string(self, addr: int, limit: int = PATH_MAX, too_long: str = "ENAMETOOLONG") -> bytes:
        """A NUL-terminated path or name; `limit` bytes (PATH_MAX: 4096, with the NUL) or
        more is `too_long` (ENAMETOOLONG: include/uapi/linux/limits.h)."""
        if addr == 0:
            raise GuestError("EFAULT")
        try:
            return self.cpu.read_cstring(addr, limit)
        except ValueError:
            raise GuestError(too_long) from None
        except MemoryFault:
            raise GuestError("EFAULT") from None

    def mapped_length(self, addr: int, size: int) -> int:
        """How many of the `size` bytes from `addr` on are mapped without a gap (checked
        before anything is allocated for them)."""
        end = addr
        for lo, hi in self.space.mapped(addr, addr + size):
            if lo != end:
                break
            end = hi
        return end - addr

    def read(self, addr: int, size: int) -> bytes:
        if not size:
            return b""
        size = rw_count(size)
        if self.mapped_length(addr, size) < size:
            raise GuestError("EFAULT")
        try:
            return self.cpu.mem_read(addr, size)
        except MemoryFault:
            raise GuestError("EFAULT") from None

    def write(self, addr: int, data: bytes) -> None:
        if data:
            try:
                self.cpu.mem_write(addr, data)
            except MemoryFault:
                raise GuestError("EFAULT") from None

    def to_host(self, host_fd: int, addr: int, size: int, offset: int | None = None) -> int:
        """write(2)/pwrite(2) of guest memory, IO_CHUNK at a time: the bytes written; a
        buffer that is unmapped from its start is EFAULT, one that ends early a short write
        (as Linux's copy_from_user gives)."""
        wanted = rw_count(size)
        size, done = self.mapped_length(addr, wanted), 0
        if wanted and not size:
            raise GuestError("EFAULT")
        if offset is None and self.threads.active and blocking_pipe(host_fd):
            # a full pipe blocks only this thread (pipe_write.py); at most IO_CHUNK at once
            return write_pipe(self, host_fd, bytes(self.cpu.mem_read(addr, min(size, IO_CHUNK))))
        while done < size:
            n = min(IO_CHUNK, size - done)
            data = self.cpu.mem_read(addr + done, n)
            wrote = (os.write(host_fd, data) if offset is None
                     else os.pwrite(host_fd, data, offset + done))
            done += wrote
            if wrote < n:
                break
        return done

    def from_host(self, host_fd: int, addr: int, size: int, offset: int | None = None) -> int:
        """read(2)/pread(2) into guest memory, IO_CHUNK at a time, never more than the
        mapped part of the buffer (nothing is taken from the file that the guest cannot
        receive); a short read ends it (a pipe, a terminal, the end of the file)."""
        wanted = rw_count(size)
        size = self.mapped_length(addr, wanted)
        if wanted and not size:
            raise GuestError("EFAULT")
        if offset is None and not self._regular(host_fd):
            # a pipe or terminal: one read (a second could block with data in hand), and
            # the wait for data ends with EINTR when the run is stopped
            self.wait_readable(host_fd)
            size = min(size, IO_CHUNK)
        done = 0
        while done < size:
            n = min(IO_CHUNK, size - done)
            data = (os.read(host_fd, n) if offset is None
                    else os.pread(host_fd, n, offset + done))
            self.write(addr + done, data)
            done += len(data)
            if len(data) < n:
                break
        return done

    def struct_bytes(self, name: str, values: dict[str, int]) -> bytes:
        layout: StructLayout = self.abi.structs[name]
        buf = bytearray(layout.size)
        for field_name, value in values.items():
            where = layout.fields.get(field_name)
            if where is None:
                continue
            off, size = where
            buf[off:off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, self.endian)
        return bytes(buf)

    def pack_words(self, *values: int) -> bytes:
        return b"".join(self.cpu.pack_word(v) for v in values)

    def fd(self, number: int) -> FileDesc:
        desc = self.fds.get(self.int32(number))
        if desc is None:
            raise GuestError("EBADF")
        return desc

    def new_fd(self, desc: FileDesc, lowest: int = 0) -> int:
        """The lowest free number from `lowest` on for `desc`; EMFILE at the guest's limit
        (`fd_limit`), the host descriptor closed."""
        n = lowest
        while n in self.fds:
            n += 1
        if n >= fd_limit():
            os.close(desc.host_fd)
            raise GuestError("EMFILE")
        self.fds[n] = desc
        return n

    def close_all(self) -> None:
        for desc in self.fds.values():
            try:
                os.close(desc.host_fd)
            except OSError:
                pass
        self.fds.clear()

    def random_bytes(self, n: int) -> bytes:
        if n > 256:  # getrandom of a large buffer: fast, still deterministic
            return self.rng.randbytes(n)
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    @staticmethod
    def _regular(host_fd: int) -> bool:
        try:
            return stat.S_ISREG(os.fstat(host_fd).st_mode)
        except OSError:
            return False

    def wait_readable(self, host_fd: int) -> None:
        """Before a read that could block (a pipe, a terminal, a socket): wait for data in
        short steps, so that a stop of the run (Ctrl-C, SIGTERM, --timeout) wakes the guest
        with EINTR, as the signal would on Linux, instead of leaving emutrace blocked in
        the host's read."""
        try:
            if not os.get_blocking(host_fd):
                return
        except OSError:
            return
        poller = select.poll()
        if self.threads.active:  # not ready: the thread waits, the others run (threads.py)
            poller.register(host_fd, select.POLLIN | select.POLLPRI)
            if not poller.poll(0):
                raise WouldBlock({host_fd: select.POLLIN | select.POLLPRI})
            return
        poller.register(host_fd, select.POLLIN | select.POLLPRI)
        while not self.cpu.stop_requested.is_set():
            if poller.poll(100):  # ms; readable, hung up or in error: the read says which
                return
        raise GuestError("EINTR")

    def sleep(self, seconds: float) -> bool:
        """Wait, ending early when the run is being stopped (Ctrl-C, --timeout); False
        then (the guest sees EINTR, as a signal interrupts a sleep on Linux)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.cpu.stop_requested.wait(min(left, 3600.0)):
                return False
        return True

    def unpack_words(self, data: bytes) -> list[int]:
        fmt = ("<" if self.endian == "little" else ">") + ("Q" if self.word == 8 else "I")
        return [v[0] for v in struct.iter_unpack(fmt, data)]
