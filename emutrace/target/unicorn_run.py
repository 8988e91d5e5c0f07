"""Running a loaded program on Unicorn: the hooks that connect the CPU to the Linux layer,
and the one `emu_start` call with its budget.  Every way a run can end becomes a
:class:`Stop`; nothing escapes as a raw Unicorn error."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import unicorn
from unicorn import unicorn_const as ucc

from emutrace.target import host_calls
from emutrace.target.unicorn_cpu import UnicornCpu

# Unicorn error → the signal Linux would deliver for that fault
FAULT_SIGNALS = {
    ucc.UC_ERR_READ_UNMAPPED: "SIGSEGV", ucc.UC_ERR_WRITE_UNMAPPED: "SIGSEGV",
    ucc.UC_ERR_FETCH_UNMAPPED: "SIGSEGV", ucc.UC_ERR_READ_PROT: "SIGSEGV",
    ucc.UC_ERR_WRITE_PROT: "SIGSEGV", ucc.UC_ERR_FETCH_PROT: "SIGSEGV",
    ucc.UC_ERR_READ_UNALIGNED: "SIGBUS", ucc.UC_ERR_WRITE_UNALIGNED: "SIGBUS",
    ucc.UC_ERR_FETCH_UNALIGNED: "SIGBUS", ucc.UC_ERR_INSN_INVALID: "SIGILL",
    ucc.UC_ERR_EXCEPTION: "SIGILL",
}
ACCESS_NAMES = {
    ucc.UC_MEM_READ_UNMAPPED: "read of unmapped", ucc.UC_MEM_WRITE_UNMAPPED: "write to unmapped",
    ucc.UC_MEM_FETCH_UNMAPPED: "fetch from unmapped", ucc.UC_MEM_READ_PROT: "read of protected",
    ucc.UC_MEM_WRITE_PROT: "write to protected", ucc.UC_MEM_FETCH_PROT: "fetch from protected",
}


NULL_REGION = 0x10000  # never mapped: the loader and mmap stay above it
MEMORY_FAULTS = {ucc.UC_ERR_READ_UNMAPPED, ucc.UC_ERR_WRITE_UNMAPPED, ucc.UC_ERR_FETCH_UNMAPPED,
                 ucc.UC_ERR_READ_PROT, ucc.UC_ERR_WRITE_PROT, ucc.UC_ERR_FETCH_PROT}


@dataclass
class Stop:
    """Why emulation ended: "exit", "signal", "timeout", "max_insns" or "interrupted"."""

    kind: str
    status: int = 0  # exit status for "exit"
    signal: str = ""  # e.g. "SIGSEGV" for "signal"
    pc: int = 0
    fault_addr: int | None = None
    detail: str = ""


class CpuException(Exception):
    """A CPU exception that is not a system call (raised from the INTR hook)."""

    def __init__(self, intno: int) -> None:
        super().__init__(intno)
        self.intno = intno


class HookSet:
    """Installs the syscall, exception and memory-fault hooks for one process."""

    def __init__(self, cpu: UnicornCpu, on_syscall: Callable[[], None],
                 on_compat_syscall: Callable[[], None] | None = None) -> None:
        self.cpu = cpu
        self.fault: tuple[str, int] | None = None
        # The first exception raised by a hook.  We keep it ourselves instead of relying on
        # the binding's re-raise, which loses it when emu_start also returns an error (seen
        # on MIPS: the CPU runs on briefly after emu_stop).
        self.pending: BaseException | None = None
        # a backend's breakpoint handler: gets the intno, returns True when it was its trap
        self.on_trap: Callable[[int], bool] | None = None
        # run after a system call the syscall instruction's own hook delivered (x86_64's
        # SYSCALL: UC_HOOK_INSN, which the native engine's INTR hook does not see)
        self.after_insn_syscall: Callable[[], None] | None = None
        conv = cpu.isa.syscalls
        uc = cpu.uc
        if conv.hook == "insn":
            const = getattr(unicorn.x86_const, conv.insn or "")
            def on_insn(_uc: unicorn.Uc, _d: object) -> None:
                self.guard(on_syscall)
                if self.after_insn_syscall is not None:
                    self.after_insn_syscall()
            uc.hook_add(ucc.UC_HOOK_INSN, on_insn, None, 1, 0, const)
            compat = cpu.isa.compat_syscalls

            def on_insn_intr(_uc: unicorn.Uc, intno: int, _d: object) -> None:
                if compat is not None and on_compat_syscall is not None \
                        and intno == compat.intno:
                    self.guard(on_compat_syscall)  # x86_64's int $0x80: the i386 entry
                else:
                    self._exception(_uc, intno, _d)
            self.on_intr = on_insn_intr
        else:
            def on_intr(_uc: unicorn.Uc, intno: int, _d: object) -> None:
                if intno == conv.intno:
                    self.guard(on_syscall)
                else:
                    self._exception(_uc, intno, _d)
            self.on_intr = on_intr
        # the one INTR hook (the native engine replaces it with its own, which passes what
        # it does not handle to on_intr)
        self.intr_hook = uc.hook_add(ucc.UC_HOOK_INTR, self.on_intr)
        # The faulting address is recorded for the NULL-pointer region only: a memory hook over
        # the whole address space slows every store on ppc, ppc64le and s390x about 2× in
        # Unicorn 2.1.4 (bench/results/hook_cost.md), one over a never-mapped range does not.
        uc.hook_add(ucc.UC_HOOK_MEM_INVALID, self._mem_invalid, None, 0, NULL_REGION - 1)

    def guard(self, fn: Callable[[], None]) -> None:
        """Run a hook body; an exception stops emulation and is kept for run()."""
        if self.pending is not None:
            self.cpu.uc.emu_stop()
            return
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised by run()
            self.pending = e
            self.cpu.uc.emu_stop()

    def _exception(self, _uc: unicorn.Uc, intno: int, _d: object) -> None:
        def handle() -> None:
            if self.on_trap is None or not self.on_trap(intno):
                raise CpuException(intno)

        self.guard(handle)

    def replay_fault(self) -> None:
        """Learn the address of a memory fault outside the NULL region: the faulting
        instruction had no effect (faults are precise), so run it once more with a memory
        hook over the whole address space — only now, when the hook's cost no longer
        matters — and let it fault again."""
        uc, pc = self.cpu.uc, self.cpu.pc
        sentinel = (1 << (8 * self.cpu.word)) - 16
        if pc >= sentinel:  # a jump to the top of the address space: nothing to replay
            return          # (and pc + 16 would pass its end: UC_ERR_ARG, fuzz-found)
        uc.hook_add(ucc.UC_HOOK_MEM_INVALID, self._mem_invalid)
        try:
            uc.ctl_remove_cache(pc, pc + 16)
            uc.emu_start(self.cpu.isa.mode_address(pc, self.cpu.in_alt_mode()), sentinel,
                         count=1)
        except unicorn.UcError:
            pass

    def _mem_invalid(self, _uc: unicorn.Uc, access: int, addr: int, size: int, value: int,
                     _d: object) -> bool:
        self.fault = (ACCESS_NAMES.get(access, "invalid access to"), addr)
        return False


def _holds(cpu: UnicornCpu, addr: int, data: bytes) -> bool:
    try:
        return cpu.mem_read(addr, len(data)) == data
    except unicorn.UcError:
        return False


WAKE = signal.SIGUSR2  # sent by the main thread to end the watcher promptly
# Host signals that stop emulation the way Ctrl-C does: the run ends as a Stop, the trace is
# written, and emutrace exits 128 + N as if killed by it (a shell's convention).
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@dataclass
class Watch:
    """What the watcher thread saw: a stop signal's name ("" for none), or the deadline."""

    interrupted: str = ""
    timed_out: bool = False


@contextmanager
def interruptible(cpu: UnicornCpu, timeout: float = 0.0) -> Iterator[Watch]:
    """Ctrl-C (and SIGTERM, SIGHUP) and --timeout stop emulation cleanly.  The stop signals
    are blocked in this thread and taken by a watcher thread with sigtimedwait, which calls
    emu_stop (a Python signal handler would not run while the main thread is inside
    emu_start); the same wait ends at the deadline.  Unicorn's own emu_start timeout is not
    used: its timer thread crashed strict-mode tracing with site hooks on MIPS (a guest
    SIGSEGV that varies run to run).  At the end the main thread wakes the watcher with
    WAKE, so leaving costs nothing."""
    state = Watch()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    done = threading.Event()
    deadline = time.monotonic() + timeout if timeout else None
    waited = {*STOP_SIGNALS, WAKE}
    main = threading.get_ident()

    def watch() -> None:
        while True:
            if cpu.stop_requested.is_set():  # asked: interrupt a blocked host call until done
                wait: float | None = host_calls.INTERRUPT_EVERY
            else:
                wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if wait is None:
                sig: int | None = signal.sigwait(waited)
            else:
                info = signal.sigtimedwait(waited, wait)
                sig = None if info is None else info.si_signo
            if done.is_set():
                return
            if sig in STOP_SIGNALS:
                assert sig is not None
                state.interrupted = signal.Signals(sig).name
                cpu.stop_requested.set()
                cpu.uc.emu_stop()
            elif sig is None and not cpu.stop_requested.is_set():  # the deadline passed
                state.timed_out = True
                cpu.stop_requested.set()
                cpu.uc.emu_stop()
            if cpu.stop_requested.is_set() and host_calls.inside():
                signal.pthread_kill(main, host_calls.INTERRUPT)  # see target/host_calls.py

    previous = host_calls.install()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield state
    finally:
        done.set()
        assert watcher.ident is not None
        if watcher.is_alive():
            signal.pthread_kill(watcher.ident, WAKE)
        watcher.join()
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        host_calls.restore(previous)


def _watched_stop(watch: Watch, pc: int) -> Stop:
    if watch.timed_out:
        return Stop("timeout", pc=pc)
    return Stop("interrupted", signal=watch.interrupted, pc=pc)


class Switcher(Protocol):
    """Takes turns of several guest threads on the CPU (machine/linux/threads.py)."""

    def count(self, max_insns: int) -> int:
        """emu_start's instruction count for the next stretch (0: unbounded)."""
        ...

    def switching(self) -> bool:
        """A thread switch was asked for (the CPU was stopped for it)."""
        ...

    def resume(self, pc: int, sentinel: int, count: int) -> int | None:
        """emu_start returned with no exception: where the next stretch starts (this or
        another thread), or None when the run ends."""
        ...


def run(cpu: UnicornCpu, hooks: HookSet, entry: int, *, max_insns: int = 0,
        timeout: float = 0.0, exits: tuple[type[BaseException], ...] = (),
        on_exit: Callable[[BaseException], Stop] | None = None,
        threads: Switcher | None = None) -> Stop:
    """emu_start from entry to a sentinel outside mapped memory; with `threads`, one
    emu_start per stretch that a thread runs.  Exceptions of the types in `exits` (guest
    exit, guest signal) raised by hooks, or by `threads`, are turned into a Stop by
    on_exit."""
    sentinel = (1 << (8 * cpu.word)) - 16
    with interruptible(cpu, timeout) as watch:
        try:
            while True:
                count = max_insns if threads is None else threads.count(max_insns)
                try:
                    cpu.uc.emu_start(entry, sentinel, count=count)
                except unicorn.UcError:
                    # MIPS: an emu_stop from the system-call hook ends emu_start with a
                    # bogus UC_ERR_READ_UNMAPPED after the CPU ran on to the end of the
                    # block; the thread's state is whole, the switch goes on
                    if hooks.pending is None and not (threads and threads.switching()):
                        raise
                if hooks.pending is not None:
                    raise hooks.pending
                if threads is None or watch.interrupted or watch.timed_out:
                    break
                resumed = threads.resume(cpu.pc, sentinel, count)
                if resumed is None:
                    break
                entry = resumed
        except exits as e:
            if watch.timed_out or watch.interrupted:
                # the guest ended after the stop was asked for: a sleep or read woken with
                # EINTR let it run on to its exit (under load the CPU got there before
                # emu_stop took effect: exit 3 instead of 130).  The stop is what happened,
                # as a signal's default action would have ended it there.
                return _watched_stop(watch, cpu.pc)
            assert on_exit is not None
            return on_exit(e)
        except CpuException as e:
            pc = cpu.pc
            trap = any(b.intno == e.intno and _holds(cpu, pc - b.pc_after, b.encoding)
                       for b in cpu.isa.breakpoints)
            sig = "SIGTRAP" if trap else cpu.isa.exception_signals.get(e.intno, "SIGILL")
            return Stop("signal", signal=sig, pc=pc,
                        detail=f"CPU exception {e.intno}")
        except unicorn.UcError as e:
            if watch.timed_out or watch.interrupted:
                # emu_stop from the watcher thread can land mid-hook and surface as a bogus
                # fault: the stop is what happened
                return _watched_stop(watch, cpu.pc)
            sig = FAULT_SIGNALS.get(e.errno, "SIGILL")
            if hooks.fault is None and e.errno in MEMORY_FAULTS:
                hooks.replay_fault()
            if hooks.fault is not None:
                what, addr = hooks.fault
                return Stop("signal", signal=sig, pc=cpu.pc, fault_addr=addr,
                            detail=f"{what} memory at {addr:#x}")
            return Stop("signal", signal=sig, pc=cpu.pc, detail=str(e))
    if watch.interrupted:
        return Stop("interrupted", signal=watch.interrupted, pc=cpu.pc)
    if watch.timed_out:
        return Stop("timeout", pc=cpu.pc)
    if max_insns:
        return Stop("max_insns", pc=cpu.pc)
    return Stop("signal", signal="SIGSEGV", pc=cpu.pc, detail="emulation left mapped code")
