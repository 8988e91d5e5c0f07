"""Signals delivered to guest handlers.

A signal becomes pending when the guest raises it (`kill`/`tgkill` to itself, `alarm`), when
its host process receives it (from another guest process, or SIGCHLD when a child ends:
a host handler queues the guest's number), and is delivered when a system call returns
(or ends `rt_sigsuspend`/`pause` early, EINTR), if the mask allows.  Its action is taken:
ignore, the default action (terminate, or ignore for SIGCHLD and the like), or the handler.

Running a handler is a call the layer makes for the guest: the CPU context is saved here
(the target's context_save), the stack pointer moves below the red zone (or to the
sigaltstack), a siginfo (si_signo, si_addr) and the ISA's ucontext (sys_sigframe.py: the
interrupted registers, mask and sigaltstack state) are written there, the handler gets
(signo, &siginfo, &ucontext) in the C ABI's argument registers or stack slots
(`isa.registers`), and returns to a trampoline page holding the ISA's system-call
instruction; that trap restores the saved context, then what the handler changed in the
ucontext, and the mask.  SIGALRM also arrives between blocks while the guest's timer runs
(_between_blocks).  A handler that leaves with siglongjmp leaves its saved context behind (at
most MAX_FRAMES are kept).

A tracer is told of both ends (LinuxKernel.on_handler_entered / on_handler_returned): the
handler's entry with where the interrupted code resumes and which stack addresses the
handler uses — below the interrupted SP, or the sigaltstack — so that a handler left by
siglongjmp is recognised when the stack pointer is back outside them (shadow-stack
policy 7); and the rt_sigreturn its return reaches."""

from __future__ import annotations

import os
import signal as host_signal
import weakref
from dataclasses import dataclass

from emutrace.isa.base import GuestError
from emutrace.isa.sigframe import sigframe
from emutrace.machine.linux.cpu_timers import CpuTimer, CpuTimers
from emutrace.machine.linux.kernel import GuestKilled, LinuxKernel
from emutrace.machine.linux.loader import UC_PROT_EXEC, UC_PROT_READ
from emutrace.machine.linux.sigsets import (
    SIG_DFL,
    SIG_IGN,
    SigAction,
    sigset_bytes,
    sigset_from,
    sigset_size,
)
from emutrace.machine.linux.sys_sigframe import Frame, restore_ucontext, write_ucontext
from emutrace.machine.linux.table import syscall
from emutrace.target.unicorn_run import STOP_SIGNALS
from emutrace.trace.events import SignalDelivery

K = LinuxKernel
SIGNAL_GAP = 512  # bytes left below the interrupted SP: above every ABI's red zone (288)
SIGINFO_SIZE = 128  # sizeof(siginfo_t) on every Linux ISA (include/uapi/asm-generic/siginfo.h)
UCONTEXT_SIZE = 1024  # a zeroed ucontext (handlers that only take three arguments)
CALLEE_AREA = 512  # room above the handler's SP for the save areas callees may use
MAX_FRAMES = 64
# signals whose default action is to ignore them (signal(7))
DEFAULT_IGNORED = frozenset({"SIGCHLD", "SIGCLD", "SIGURG", "SIGWINCH", "SIGCONT"})
# ... and to stop the process (signal(7)): stop_self
DEFAULT_STOP = frozenset({"SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU"})


def _bit(sig: int) -> int:
    return 1 << (sig - 1)


def _install(k: K) -> None:
    k.deliver_hook = lambda: deliver_pending(k)
    k.sigreturn_hook = lambda: _sigreturn(k)
    k.fault_hook = lambda name, addr: deliver_fault(k, name, addr)


def deliver_fault(k: K, name: str, addr: int | None) -> int | None:
    """A CPU fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP) with a guest handler and not
    blocked: the handler is set up (outside any hook) and its entry returned, for the
    session to resume emulation there; else None (the default action: the process ends)."""
    sig = k.abi.constants.get(name)
    if sig is None or k.sig_mask & _bit(sig):
        return None
    act = k.sig_actions.get(sig, SigAction())
    if act.handler in (SIG_DFL, SIG_IGN):
        return None
    if addr is not None:
        addr &= k.isa.fault_address_mask & k.mask
    _run_handler(k, sig, act, in_hook=False, fault_addr=addr)
    return act.handler


def queue(k: K, sig: int) -> None:
    """Make `sig` pending (delivered at the next system call's return)."""
    _install(k)
    k.sig_pending.add(sig)


def _host_number(k: K, sig: int) -> int | None:
    name = k.signal_name(sig)
    host = getattr(host_signal, name or "", None)
    return None if host is None else int(host)


def action_changed(k: K, sig: int) -> None:
    """The host process's disposition follows the guest's action: a guest handler gets a
    host handler that queues the signal; SIG_IGN and SIG_DFL are the host's own in a child
    process.  The first process keeps Ctrl-C (SIGINT, SIGTERM, SIGHUP) for emutrace."""
    host = _host_number(k, sig)
    if host is None or host in (host_signal.SIGKILL, host_signal.SIGSTOP,
                                host_signal.SIGPIPE):
        return
    if k.guest_parent is None and host in STOP_SIGNALS:
        return
    act = k.sig_actions.get(sig, SigAction())
    if act.handler not in (SIG_DFL, SIG_IGN):
        _install(k)
        host_signal.signal(host, lambda _s, _f: k.sig_pending.add(sig))
    elif k.guest_parent is not None or host in (host_signal.SIGCHLD, host_signal.SIGALRM):
        host_signal.signal(host, host_signal.SIG_IGN if act.handler == SIG_IGN
                           else host_signal.SIG_DFL)


def reset_for_exec(k: K) -> None:
    """execve: handlers become SIG_DFL (ignored signals stay ignored)."""
    for sig, act in list(k.sig_actions.items()):
        if act.handler not in (SIG_DFL, SIG_IGN):
            k.sig_actions[sig] = SigAction()
            action_changed(k, sig)


def _deliverable(k: K, mask: int) -> int | None:
    for sig in sorted(k.sig_pending):
        if mask & _bit(sig):
            continue
        act = k.sig_actions.get(sig, SigAction())
        if act.handler == SIG_IGN or (act.handler == SIG_DFL
                                      and k.signal_name(sig) in DEFAULT_IGNORED):
            k.sig_pending.discard(sig)  # discarded, as the kernel discards it
            continue
        return sig
    return None


def stop_self(k: K, name: str) -> bool:
    """The default action "stop" (signal(7)) of a signal the guest raised on itself: the
    host process, which is the guest process, stops itself with the same host signal, so
    its parent's wait4(WUNTRACED) sees it stopped and SIGCONT resumes it; the host kernel's
    own rules apply (SIGTSTP, SIGTTIN, SIGTTOU to an orphaned process group are discarded,
    kernel/signal.c).  False: not a stop signal."""
    if name not in DEFAULT_STOP:
        return False
    host = getattr(host_signal, name)
    if host != host_signal.SIGSTOP:
        host_signal.signal(host, host_signal.SIG_DFL)  # the guest's action is SIG_DFL
    os.kill(os.getpid(), host)
    return True


def deliver_pending(k: K) -> None:
    sig = _deliverable(k, k.sig_mask)
    if sig is None:
        return
    k.sig_pending.discard(sig)
    act = k.sig_actions.get(sig, SigAction())
    if act.handler == SIG_DFL:
        name = k.signal_name(sig) or "SIGKILL"
        if stop_self(k, name):
            deliver_pending(k)  # after SIGCONT: what else became pending
            return
        raise GuestKilled(name, _host_number(k, sig) or 9)
    _run_handler(k, sig, act)


def _trampoline(k: K) -> int:
    if k.sig_trampoline is None:
        where = k.space.find_free(4096)
        if where is None:
            raise GuestKilled("SIGSEGV", 11)
        k.space.map(where, 4096, UC_PROT_READ | UC_PROT_EXEC)
        k.cpu.mem_write(where, k.conv.instruction)
        k.sig_trampoline = where
    return k.sig_trampoline


def _on_altstack(k: K) -> bool:
    if k.sig_altstack is None:
        return False
    base, size = k.sig_altstack
    return base < k.cpu.reg_read(k.isa.registers.sp) <= base + size


def _run_handler(k: K, sig: int, act: SigAction, in_hook: bool = True,
                 fault_addr: int | None = None) -> None:
    cpu, regs, w = k.cpu, k.isa.registers, k.word
    restore = k.sig_suspend_mask if k.sig_suspend_mask is not None else k.sig_mask
    k.sig_suspend_mask = None
    watch = _WATCHES.get(k)
    if watch is not None and sig == k.const("SIGALRM"):
        watch.delivered = True
    bias = k.conv.pc_after_hook if in_hook else 0
    frame = Frame(cpu.context_save(), restore, pc_bias=bias)
    resume = cpu.pc + bias  # where the interrupted code goes on
    k.sig_frames.append(frame)
    del k.sig_frames[:-MAX_FRAMES]
    tramp = _trampoline(k)
    sf = sigframe(k.isa)
    c = k.abi.constants
    interrupted_sp = cpu.reg_read(regs.sp)
    if act.flags & c.get("SA_ONSTACK", 0) and k.sig_altstack is not None \
            and not _on_altstack(k):
        top = (k.sig_altstack[0] + k.sig_altstack[1]) & ~15  # sigaltstack(2)
        handler_stack = (k.sig_altstack[0], k.sig_altstack[0] + k.sig_altstack[1])
    else:
        top = (interrupted_sp - SIGNAL_GAP) & ~15
        handler_stack = (0, interrupted_sp)  # the stack grows down on every ISA we run
    info = top - SIGINFO_SIZE
    uc = (info - (sf.ucontext_size if sf is not None else UCONTEXT_SIZE)) & ~15
    siginfo = bytearray(sig.to_bytes(4, k.endian) + bytes(SIGINFO_SIZE - 4))
    if fault_addr is not None:  # si_addr: the union after three ints, word-aligned
        off = 16 if w == 8 else 12
        siginfo[off:off + w] = fault_addr.to_bytes(w, k.endian)
    k.write(info, bytes(siginfo))
    if sf is not None:
        frame.ucontext = uc
        frame.written = write_ucontext(k, sf, uc, resume, restore)
    else:
        k.write(uc, bytes(UCONTEXT_SIZE))
    base = (uc - CALLEE_AREA) & ~15
    args = (sig, info, uc)
    if regs.args:
        for reg, value in zip(regs.args, args, strict=False):
            cpu.reg_write(reg, value)
    else:  # i386 cdecl: the arguments in the stack slots above the return address
        k.write(base + regs.stack_args_offset - w, k.pack_words(*args))
    if regs.link is not None:
        cpu.reg_write(regs.link, tramp)
        sp = base
    else:  # x86: the call pushed the return address
        sp = base - w
        k.write(sp, k.pack_words(tramp))
    cpu.reg_write(regs.sp, sp)
    for reg in k.isa.call_target_regs:  # MIPS t9, ELFv2 r12: the callee's own address
        cpu.reg_write(reg, act.handler)
    cpu.reg_write(regs.pc, act.handler - (k.conv.pc_after_hook if in_hook else 0))
    k.sig_mask = restore | act.mask | (0 if act.flags & c.get("SA_NODEFER", 0) else _bit(sig))
    if act.flags & c.get("SA_RESETHAND", 0):
        k.sig_actions[sig] = SigAction()
        action_changed(k, sig)
    if k.on_handler_entered is not None:
        k.on_handler_entered(act.handler, SignalDelivery(k.isa.code_address(resume),
                                                         handler_stack))


def _sigreturn(k: K) -> bool:
    """The system-call trap at the trampoline: the handler returned."""
    if k.sig_trampoline is None or not k.sig_frames:
        return False
    conv = k.conv
    trap = k.cpu.pc - (conv.pc_in_hook if conv.pc_in_hook is not None
                       else len(conv.instruction))
    if trap != k.sig_trampoline:
        return False
    frame = k.sig_frames.pop()
    if k.on_handler_returned is not None:
        k.on_handler_returned(trap)
    k.cpu.context_restore(frame.context)
    sf = sigframe(k.isa)
    if sf is not None and frame.ucontext:
        restore_ucontext(k, sf, frame)
    else:
        k.sig_mask = frame.mask
    deliver_pending(k)
    return True


def _wait_for_signal(k: K, mask: int) -> None:
    pause = 0.0005
    while _deliverable(k, mask) is None:
        if k.cpu.stop_requested.wait(pause):
            return
        pause = min(pause * 2, 0.02)


@syscall("rt_sigsuspend")
def sys_rt_sigsuspend(k: K, a: tuple[int, ...]) -> int:
    if a[1] != sigset_size(k):
        raise GuestError("EINVAL")
    mask = sigset_from(k, k.read(a[0], a[1]))
    mask &= ~(_bit(k.const("SIGKILL")) | _bit(k.const("SIGSTOP")))
    _install(k)
    _wait_for_signal(k, mask)
    if _deliverable(k, mask) is not None:
        k.sig_suspend_mask = k.sig_mask  # what the handler's frame restores
        k.sig_mask = mask  # delivery, right after this call, sees the suspend mask
    raise GuestError("EINTR")


@syscall("pause")
def sys_pause(k: K, a: tuple[int, ...]) -> int:
    _install(k)
    _wait_for_signal(k, k.sig_mask)
    raise GuestError("EINTR")


@dataclass
class TimerWatch:
    hook: int  # the Unicorn block hook
    delivered: bool = False  # a SIGALRM was delivered since the timer was armed


# the block hook of each kernel whose guest timer runs (_timer_armed)
_WATCHES: weakref.WeakKeyDictionary[K, TimerWatch] = weakref.WeakKeyDictionary()


def _between_blocks(k: K) -> None:
    """A block hook, installed while the guest's real-time timer runs and SIGALRM has a
    handler: Python runs the host's SIGALRM handler here (it cannot while Unicorn runs
    translated code without hooks), and a signal that became deliverable is delivered at
    the start of this block, as the kernel delivers on any return to user mode.  The hook
    goes away once the timer has expired and its SIGALRM was delivered (not on the expiry
    alone: the host's Python-level handler may not have run yet then)."""
    if k.sig_pending:
        sig = _deliverable(k, k.sig_mask)
        if sig is not None:
            act = k.sig_actions.get(sig, SigAction())
            if act.handler not in (SIG_DFL, SIG_IGN):  # a default action waits for a syscall
                k.sig_pending.discard(sig)
                _run_handler(k, sig, act, in_hook=False)
    watch = _WATCHES.get(k)
    if watch is not None and watch.delivered and not k.sig_pending \
            and host_signal.getitimer(host_signal.ITIMER_REAL) == (0.0, 0.0):
        _unwatch(k)


def _unwatch(k: K) -> None:
    watch = _WATCHES.pop(k, None)
    if watch is not None:
        k.cpu.hook_del(watch.hook)


def _timer_armed(k: K, seconds: float) -> None:
    """The guest set its real-time timer: watch between blocks while it runs and SIGALRM is
    handled; a timer disarmed (0) needs no watch."""
    if not seconds:
        _unwatch(k)
        return
    act = k.sig_actions.get(k.const("SIGALRM"), SigAction())
    if act.handler in (SIG_DFL, SIG_IGN):
        return
    watch = _WATCHES.get(k)
    if watch is None:
        _WATCHES[k] = TimerWatch(k.cpu.hook_block(lambda _engine, _a, _s, _d:
                                                  _between_blocks(k)))
    else:
        watch.delivered = False


@syscall("alarm")
def sys_alarm(k: K, a: tuple[int, ...]) -> int:
    """The host's alarm timer; its SIGALRM is queued for the guest and delivered at a system
    call's return or, with a handler, at the start of the next block (_between_blocks)."""
    sig = k.const("SIGALRM")
    _install(k)
    host_signal.signal(host_signal.SIGALRM, lambda _s, _f: k.sig_pending.add(sig))
    left = host_signal.alarm(a[0] & 0xFFFFFFFF)
    _timer_armed(k, a[0] & 0xFFFFFFFF)
    return left


def _itimer_seconds(k: K, addr: int) -> tuple[float, float]:
    """(interval, value) of a struct itimerval (two struct timevals)."""
    lay, tv = k.abi.structs["itimerval"], k.abi.structs["timeval"]
    blob = k.read(addr, lay.size)
    out = []
    for name in ("it_interval", "it_value"):
        off = lay.fields[name][0]
        part = blob[off:off + tv.size]
        (s_off, s_size), (u_off, u_size) = tv.fields["tv_sec"], tv.fields["tv_usec"]
        sec = int.from_bytes(part[s_off:s_off + s_size], k.endian, signed=True)
        usec = int.from_bytes(part[u_off:u_off + u_size], k.endian, signed=True)
        if sec < 0 or not 0 <= usec < 1_000_000:
            raise GuestError("EINVAL")
        out.append(sec + usec / 1e6)
    return out[0], out[1]


def _put_itimer(k: K, addr: int, interval: float, value: float) -> None:
    lay = k.abi.structs["itimerval"]
    blob = bytearray(lay.size)
    for name, seconds in (("it_interval", interval), ("it_value", value)):
        usec = round(seconds * 1_000_000)
        off = lay.fields[name][0]
        part = k.struct_bytes("timeval", {"tv_sec": usec // 1_000_000,
                                          "tv_usec": usec % 1_000_000})
        blob[off:off + len(part)] = part
    k.write(addr, bytes(blob))


def _cpu_timer(k: K, which: int) -> CpuTimer | None:
    """ITIMER_VIRTUAL's or ITIMER_PROF's timer (cpu_timers.py: guest-instruction time),
    None for ITIMER_REAL; EINVAL for anything else (kernel/time/itimer.c)."""
    c = k.abi.constants
    if which == c.get("ITIMER_REAL", 0):
        return None
    for name, timer in k.threads.cpu_timers.timers.items():
        if which == c.get(name):
            return timer
    raise GuestError("EINVAL")


def _timer_expired(k: K, names: list[str]) -> None:
    """CPU-time timers expired at the end of a stretch (outside any hook): their signals
    become pending and one is delivered right here, before the next instruction."""
    for name in names:
        k.sig_pending.add(k.const(name))
    sig = _deliverable(k, k.sig_mask)
    if sig is None:
        return  # blocked: delivered when the mask allows, at a system call's return
    act = k.sig_actions.get(sig, SigAction())
    if act.handler == SIG_DFL:
        deliver_pending(k)  # the default action (SIGPROF, SIGVTALRM: terminate)
        return
    k.sig_pending.discard(sig)
    _run_handler(k, sig, act, in_hook=False)


def adopt_cpu_timers(k: K, timers: CpuTimers) -> None:
    """execve keeps the interval timers (execve(2)): the new image's process goes on with
    the old one's ITIMER_VIRTUAL and ITIMER_PROF, their signals now its own."""
    k.threads.cpu_timers = timers
    timers.on_expiry = lambda names: _timer_expired(k, names)
    if timers.running():
        _install(k)
        if not k.threads.preempts:
            k.threads.count_cpu_time()  # (its block hook; elsewhere the count is set)


def _set_cpu_timer(k: K, timer: CpuTimer, new: int, old: int) -> int:
    interval, value = _itimer_seconds(k, new) if new else (0.0, 0.0)
    before = (timer.interval, timer.value)
    _install(k)
    k.threads.cpu_timers.on_expiry = lambda names: _timer_expired(k, names)
    timer.value = round(value * 1e9)
    timer.interval = round(interval * 1e9) if timer.value else 0
    if timer.value:
        k.threads.count_cpu_time()
    if old:
        _put_itimer(k, old, before[0] / 1e9, _up_to_usec(before[1]))
    return 0


def _up_to_usec(ns: int) -> float:
    """Nanoseconds left as the seconds setitimer/getitimer report: whole microseconds,
    rounded up so that a running timer never shows 0 (it is disarmed only at 0)."""
    return -(-ns // 1000) / 1e6


@syscall("setitimer")
def sys_setitimer(k: K, a: tuple[int, ...]) -> int:
    """ITIMER_REAL: the host's timer, its SIGALRM queued for the guest (glibc's alarm() on
    the ISAs without an alarm call).  ITIMER_VIRTUAL and ITIMER_PROF: in guest-instruction
    time (cpu_timers.py)."""
    timer = _cpu_timer(k, k.int32(a[0]))
    if timer is not None:
        return _set_cpu_timer(k, timer, a[1], a[2])
    interval, value = _itimer_seconds(k, a[1]) if a[1] else (0.0, 0.0)
    sig = k.const("SIGALRM")
    _install(k)
    host_signal.signal(host_signal.SIGALRM, lambda _s, _f: k.sig_pending.add(sig))
    old_value, old_interval = host_signal.setitimer(host_signal.ITIMER_REAL, value, interval)
    _timer_armed(k, value)
    if a[2]:
        _put_itimer(k, a[2], old_interval, old_value)
    return 0


@syscall("getitimer")
def sys_getitimer(k: K, a: tuple[int, ...]) -> int:
    timer = _cpu_timer(k, k.int32(a[0]))
    if timer is not None:
        _put_itimer(k, a[1], timer.interval / 1e9, _up_to_usec(timer.value))
        return 0
    value, interval = host_signal.getitimer(host_signal.ITIMER_REAL)
    _put_itimer(k, a[1], interval, value)
    return 0


def interrupted(k: K) -> bool:
    """A blocking call's question: has a signal arrived that the guest will see?"""
    return bool(k.sig_pending) and _deliverable(k, k.sig_mask) is not None


SS_ONSTACK, SS_DISABLE = 1, 2  # include/uapi/linux/signal.h (every ISA)


@syscall("sigaltstack")
def sys_sigaltstack(k: K, a: tuple[int, ...]) -> int:
    lay = k.abi.structs["sigaltstack"]
    on = _on_altstack(k)
    new = None
    if a[0]:
        blob = k.read(a[0], lay.size)
        value = {name: int.from_bytes(blob[off:off + size], k.endian)
                 for name, (off, size) in lay.fields.items()}
        if on:
            raise GuestError("EPERM")
        if value["ss_flags"] & ~(SS_DISABLE | SS_ONSTACK):
            raise GuestError("EINVAL")
        if not value["ss_flags"] & SS_DISABLE:
            if value["ss_size"] < k.abi.constants.get("MINSIGSTKSZ", 2048):
                raise GuestError("ENOMEM")
            new = (value["ss_sp"], value["ss_size"])
    if a[1]:
        base, size = k.sig_altstack or (0, 0)
        flags = (SS_ONSTACK if on else 0) | (SS_DISABLE if k.sig_altstack is None else 0)
        k.write(a[1], k.struct_bytes("sigaltstack", {"ss_sp": base, "ss_size": size,
                                                     "ss_flags": flags}))
    if a[0]:
        k.sig_altstack = new
    return 0


@syscall("rt_sigpending")
def sys_rt_sigpending(k: K, a: tuple[int, ...]) -> int:
    pending = sum(_bit(s) for s in k.sig_pending) & k.sig_mask
    k.write(a[0], sigset_bytes(k, pending, sigset_size(k)))
    return 0
