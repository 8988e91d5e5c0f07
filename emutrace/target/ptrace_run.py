"""The native run loop: a traced host process driven to its end, the target protocol's hooks
called at the stops it takes (the ptrace counterpart of target/unicorn_run.py).

Unicorn pushes hooks from inside `emu_start`; ptrace pulls: the loop resumes the tracee
and waits for the next stop (wait4(2)), then calls what the backend installed:

* an `int3` (SIGTRAP with si_code SI_KERNEL: the kernel's do_int3 forces the signal,
  arch/x86/kernel/traps.c) goes to the backend's `on_trap(3)`, with RIP one past the
  0xCC as Unicorn reports it; a breakpoint that is not the backend's is the guest's own
  SIGTRAP and is delivered to it;
* a code hook on one address is an int3 of the target's own (target/ptrace.py): when it
  traps, RIP goes back to the address, the hooks run, and the original instruction is
  single-stepped with its byte put back for that one step (uprobes' way);
* while a code hook over a range (or everywhere: `step`) is installed, or a hook asked for
  the next block entry (`want_blocks`), the tracee runs by PTRACE_SINGLESTEP (SIGTRAP,
  si_code TRAP_TRACE) and the hooks are called before each instruction; otherwise it runs
  by PTRACE_CONT at full speed.  A trap handler that asks for blocks gets the block
  entry where it resumes the tracee and the one after the next instruction (a Unicorn
  block hook fires at both: an interrupt ends the translated block).
* a debug register's execute breakpoint (si_code TRAP_HWBKPT; a fault, RIP at the
  instruction) calls that slot's hook; the instruction then runs (EFLAGS.RF);
* while a branch hook is installed (btf) the tracee runs by PTRACE_SINGLEBLOCK, and each
  trap calls it with where the tracee was resumed and where it stopped;
* while a system-call hook is installed (a dynamic program's module watch:
  target/native_modules.py), the tracee runs by PTRACE_SYSCALL instead of PTRACE_CONT and
  the hooks are called at each system call's exit (PTRACE_GET_SYSCALL_INFO tells exit from
  entry); a step or block stop with orig_rax not -1 is a system call's exit too;
* a fork or vfork (PTRACE_EVENT_*): the child is let go untraced with the program's own
  code bytes; an exec: the tracee is let go and waited for (the backend knows only the old
  image);
* any other signal stop is the guest's: it is passed on when the tracee resumes; when the
  signal has a handler and a backend is told of handlers (`hooks.signals`), by
  PTRACE_SINGLESTEP, whose stop at the handler's first instruction (si_code SIGTRAP)
  reports the handler's frame (target/ptrace_signals.py).

With the C engine (`target.c_loop`, native/ploop.c) each PTRACE_CONT and its wait are C's:
C finishes, without returning here, the int3 traps at sites of its table (the int3
backend's lazy fast path) and hands back the first stop it does not finish, which this
loop then handles as its own.  For `step` alone, C single-steps on over the instructions
whose hook would only count them (the backend's `quiet` addresses) and hands back the first
other stop as the result of one step.  For `btf` alone, C block-steps on over the stops
whose walk from the resume address crosses no taken branch (with BTF degraded, every
instruction that is no branch) and hands back the first other one.  For `hwbp`, C finishes
the debug-register hits whose whole decision it holds (backends/hwbp_ptrace.py).

SIGINT, SIGTERM and SIGHUP to emutrace kill the tracee and end the run as "interrupted"
(its trace is kept, as under emulation); `--timeout` kills it from a timer.

The engine handle passed to hooks is None and the size 0 (the backends decode
instructions themselves).  Natively there is no instruction clock: block hooks are not
delivered at every block, so a backend's time counts only what it saw."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable

from emutrace.target.ptrace import (
    PTRACE_CONT,
    PTRACE_DETACH,
    PTRACE_EVENT_EXEC,
    PTRACE_EVENT_FORK,
    PTRACE_EVENT_SECCOMP,
    PTRACE_EVENT_VFORK,
    PTRACE_EVENT_VFORK_DONE,
    PTRACE_SINGLEBLOCK,
    PTRACE_SINGLESTEP,
    PTRACE_SYSCALL,
    PtraceError,
    PtraceTarget,
    event_message,
    kill,
    ptrace,
)
from emutrace.target.ptrace_confine import Confinement, run_exec
from emutrace.target.ptrace_signals import SIGNAL_DELIVERED, HandlerWatch
from emutrace.target.pulled import StopTurns
from emutrace.target.unicorn_run import Stop

PTRACE_GETSIGINFO = 0x4202  # <linux/ptrace.h>
SI_KERNEL = 0x80  # <asm-generic/siginfo.h>: int3 (force_sig)
# a single-step's trap: TRAP_TRACE (the debug exception, DR6.BS), or TRAP_BRKPT when the
# step ended in the kernel's syscall exit (user_single_step_report)
STEP_CODES = frozenset({1, 2})
TRAP_HWBKPT = 4  # a debug register's breakpoint (DR6.Bn)
SIGINFO_SIZE = 128
SI_CODE_OFFSET = 8  # siginfo_t: si_signo, si_errno, si_code (ints)
BREAKPOINT_TRAP = 3  # x86 #BP, the vector Unicorn reports for int3
SYSCALL_STOP = signal.SIGTRAP | 0x80  # PTRACE_O_TRACESYSGOOD
PTRACE_GET_SYSCALL_INFO = 0x420E  # <linux/ptrace.h>, Linux 5.3
SYSCALL_INFO_SIZE = 88  # sizeof(struct ptrace_syscall_info)
SYSCALL_INFO_EXIT = 2  # struct ptrace_syscall_info.op (its first byte)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class NativeTrapHooks:
    """TrapHooks for the native target: the backend's breakpoint handler, and who is told
    of the guest's signal handlers (a trap-aware backend: target/ptrace_signals.py)."""

    def __init__(self) -> None:
        self.on_trap: Callable[[int], bool] | None = None
        self.signals: HandlerWatch | None = None


# signals an instruction raises itself (si_code > 0 then: SEGV_*, BUS_*, ILL_*, FPE_*)
FAULT_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE})

def _si_code(pid: int) -> int:
    info = ctypes.create_string_buffer(SIGINFO_SIZE)
    ptrace(PTRACE_GETSIGINFO, pid, 0, ctypes.c_void_p(ctypes.addressof(info)))
    return int.from_bytes(info.raw[SI_CODE_OFFSET:SI_CODE_OFFSET + 4], "little", signed=True)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def run(target: PtraceTarget, hooks: NativeTrapHooks, timeout: float = 0.0,
        confinement: Confinement | None = None) -> Stop:
    """Run the stopped tracee to its end; the tracee is killed and reaped on every path
    out of here that is not its own exit or death.  With a `confinement` its checked
    system calls stop it (PTRACE_EVENT_SECCOMP) and are checked there."""
    pid = target.pid
    timed_out = threading.Event()
    timer = None

    def end_guest() -> None:
        """SIGKILL to the tracee and the children it left running."""
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if confinement is not None:
            confinement.children.kill()
    if timeout > 0:
        def expire() -> None:
            timed_out.set()
            end_guest()
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
    interrupted: list[str] = []  # Ctrl-C, SIGTERM, SIGHUP: end the run, keep the trace

    def on_stop_signal(sig: int, _frame: object) -> None:
        interrupted.append(signal.Signals(sig).name)
        end_guest()  # waitpid returns; the loop sees `interrupted`
    old = {}
    if threading.current_thread() is threading.main_thread():
        old = {sig: signal.signal(sig, on_stop_signal) for sig in STOP_SIGNALS}
    try:
        return _loop(target, hooks, timed_out, interrupted, confinement)
    except Exception:
        if interrupted:  # the tracee was killed under a hook's ptrace request or read
            return Stop("interrupted", signal=interrupted[0], pc=target.last_pc)
        raise
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if timer is not None:
            timer.cancel()
        kill(pid)  # nothing if it has ended and been reaped


def _loop(target: PtraceTarget, hooks: NativeTrapHooks, timed_out: threading.Event,
          interrupted: list[str], confinement: Confinement | None) -> Stop:
    pid = target.pid
    pending_signal = 0  # the guest's own signal, delivered when it resumes
    held_signal = 0  # one that stopped a step a hook wanted: delivered after that step
    # (never a fault the stepped instruction raised itself, si_code > 0: it would fault again
    # at every try; sigaction(2), SEGV_MAPERR and friends)
    turns = StopTurns()
    passed_trap = ""  # the last SIGTRAP passed on as the guest's: said if it kills the guest
    pc = target.pc
    while True:
        if turns.fresh:
            pc = turns.hooks_at_stop(target)
        if held_signal and not target.blocks_wanted:
            pending_signal, held_signal = held_signal, 0
        if interrupted:
            return Stop("interrupted", signal=interrupted[0], pc=pc)
        if target.stop_requested:
            return Stop("interrupted", pc=pc)
        stepping = bool(target.range_hooks) or target.blocks_wanted
        turns.resuming(target)
        lifted = target.lift_point(pc)  # a hooked instruction runs as itself: step it
        # a signal passed on to a handler: a step stops at the handler's first instruction
        to_handler = bool(pending_signal) and hooks.signals is not None and \
            hooks.signals.handled(pending_signal)
        request = PTRACE_SINGLESTEP if stepping or lifted or to_handler else \
            PTRACE_SINGLEBLOCK if target.branch_hooks else \
            PTRACE_SYSCALL if target.syscall_hooks else PTRACE_CONT
        target.flush()
        try:
            loop = target.c_loop
            if confinement is not None and confinement.children.live or to_handler:
                loop = None  # C waits for this pid only: a child at a check would wait too
                # (and the handler's entry is a stop C does not know)
            if (loop is not None and request == PTRACE_SINGLEBLOCK and loop.blocks_quietly
                    and not (target.point_hooks or target.syscall_hooks or target.block_hooks)
                    and len(target.branch_hooks) == 1):
                # `btf` alone: C block-steps on over the stops whose walk crosses no taken
                # branch (its hook would only count the instructions)
                status, c_pc = loop.block(pid, pending_signal, pc)
                if c_pc:
                    pc = target.last_pc = c_pc
            elif loop is not None and request in (PTRACE_CONT, PTRACE_SYSCALL,
                                                   PTRACE_SINGLEBLOCK):
                # C resumes and waits, finishing the traps it can (native/ploop.c); a
                # system-call stop or a block step's trap comes back to the hooks here
                status, c_pc = loop.resume(pid, pending_signal, request)
                if c_pc:
                    pc = target.last_pc = c_pc
            elif (loop is not None and request == PTRACE_SINGLESTEP and loop.steps_quietly
                  and not (lifted or turns.blocks_due or target.branch_hooks or target.point_hooks
                           or target.syscall_hooks)
                  and len(target.range_hooks) == 1):
                # (not while system calls are watched: a dynamic program's modules are
                # learnt at each call's exit, which C's steps would pass over)
                # `step` alone: C steps over the instructions its hook only counts
                status, c_pc = loop.step(pid, pending_signal)
                if c_pc:
                    pc = target.last_pc = c_pc
            else:
                ptrace(request, pid, 0, pending_signal)
                status = -1
        except OSError as e:
            raise PtraceError(f"--target native: resuming pid {pid}: {e.strerror}") from None
        pending_signal = 0
        if status == -1 and confinement is not None:  # (its children's stops served too)
            status = confinement.children.wait_for(pid)
        elif status == -1:
            _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status):
            if confinement is not None:  # its children run on to their own ends
                confinement.children.outlive()
                if interrupted:
                    return Stop("interrupted", signal=interrupted[0], pc=pc)
                if timed_out.is_set():
                    return Stop("timeout", pc=pc)
            return Stop("exit", status=os.WEXITSTATUS(status), pc=pc)
        if interrupted:
            return Stop("interrupted", signal=interrupted[0], pc=pc)
        if os.WIFSIGNALED(status):
            if timed_out.is_set():
                return Stop("timeout", pc=pc)
            killed_by = os.WTERMSIG(status)
            return Stop("signal", signal=_signal_name(killed_by), pc=pc,
                        detail=passed_trap if killed_by == signal.SIGTRAP else "")
        if lifted:
            target.settle_point(pc)
        sig = os.WSTOPSIG(status)
        event = status >> 16
        if sig == signal.SIGTRAP and event:
            stop = _event(target, event, confinement)
            if stop is not None:
                return stop
            continue  # resumed as it was: the system call completes
        if sig == SYSCALL_STOP:  # PTRACE_SYSCALL's stop at a system call's entry or exit
            if _syscall_op(pid) == SYSCALL_INFO_EXIT:
                _syscall_ended(target)
            continue
        if sig != signal.SIGTRAP:
            if turns.blocks_due and not (sig in FAULT_SIGNALS and _si_code(pid) > 0):
                # the signal stopped the step a hook wanted before its instruction ran (a
                # transfer whose target the hook learns from the next block): that step
                # first, the signal at the next resume (as a system call's return or a
                # block's start would deliver it under emulation)
                held_signal = sig
                target.blocks_wanted = True
                continue
            pending_signal = sig  # the guest's (its handler, or its default action)
            continue
        code = _si_code(pid)
        if to_handler and code == SIGNAL_DELIVERED:  # the handler's frame is set up
            assert hooks.signals is not None
            hooks.signals.entered()
            turns.fresh = True  # its first instruction comes next
            continue
        if code == SI_KERNEL:  # an int3 ran
            at = target.pc - 1
            # the instruction under a point that was just stepped is itself an int3 (the
            # backend's breakpoint written over an idle site hook, or the guest's own): its
            # trap is that int3's, not the point's again (which would lift and step it
            # forever), as Unicorn runs a code hook and then the int3 under it
            under_point = lifted and at == pc
            if at in target.points and not under_point:  # a code hook's: hooks run first
                target.reg_write(target.isa.registers.pc, at)
                turns.fresh = True
            elif hooks.on_trap is not None and hooks.on_trap(BREAKPOINT_TRAP):
                turns.trapped(target)
            else:
                pending_signal = signal.SIGTRAP  # the guest's own int3
                passed_trap = f"its own int3 at {at:#x}"
            continue
        if code == TRAP_HWBKPT:  # a debug register matched: before the instruction
            for fn, data in target.hw_hooks_at(target.pc):
                fn(None, target.pc, 0, data)
            continue
        if request in (PTRACE_SINGLESTEP, PTRACE_SINGLEBLOCK) and code in STEP_CODES:
            turns.fresh = True  # one instruction, or up to a taken branch, done
            if target.syscall_hooks and target.after_syscall():
                _syscall_ended(target)  # the step ended at a system call's exit
            for branch_hook in list(target.branch_hooks.values()):
                branch_hook(pc, target.pc, code)
        else:
            pending_signal = signal.SIGTRAP  # sent to itself (raise, kill)
            passed_trap = f"a SIGTRAP with si_code {code} at {target.pc:#x}, taken as its " \
                f"own (resumed by ptrace request {request})"


def _syscall_op(pid: int) -> int:
    info = ctypes.create_string_buffer(SYSCALL_INFO_SIZE)
    ptrace(PTRACE_GET_SYSCALL_INFO, pid, SYSCALL_INFO_SIZE,
           ctypes.c_void_p(ctypes.addressof(info)))
    return info.raw[0]


def _syscall_ended(target: PtraceTarget) -> None:
    for hook in list(target.syscall_hooks):
        hook()


def _event(target: PtraceTarget, event: int, confinement: Confinement | None) -> Stop | None:
    """A fork, vfork or exec of the tracee (PTRACE_O_TRACE*), or a system call to check
    (target/ptrace_confine.py).  A forked child runs untraced (`release_child`); an exec
    replaces the image the backend knows: the tracee is let go (no breakpoint survives an
    exec; DR7 cleared) and run to its end untraced, or, confined, traced for its checked
    calls only."""
    pid = target.pid
    if event == PTRACE_EVENT_SECCOMP and confinement is not None:
        target.flush()  # (no register cache across the check's own requests)
        confinement.on_seccomp()
    elif event in (PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK):
        child, shares = event_message(pid), event == PTRACE_EVENT_VFORK
        if confinement is None:
            target.release_child(child, shares_memory=shares)
        else:  # still confined: traced for its checked calls (target/ptrace_children.py)
            family = confinement
            stopped = child in family.children.early
            family.children.early.discard(child)
            target.release_child(child, shares, stopped=stopped,
                                 follow=lambda c: family.children.adopt(c, family.scratch))
    elif event == PTRACE_EVENT_VFORK_DONE:
        target.settle_all()  # the vfork child exec'd or exited: the patches go back
    elif event == PTRACE_EVENT_EXEC:
        target.exec_untraced = True
        target.set_debugreg(7, 0)
        if confinement is not None:
            exited, value = run_exec(confinement)
            if exited:
                return Stop("exit", status=value, pc=target.last_pc)
            return Stop("signal", signal=_signal_name(value), pc=target.last_pc)
        ptrace(PTRACE_DETACH, pid, 0, 0)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status):
            return Stop("exit", status=os.WEXITSTATUS(status), pc=target.last_pc)
        return Stop("signal", signal=_signal_name(os.WTERMSIG(status)), pc=target.last_pc)
    return None
