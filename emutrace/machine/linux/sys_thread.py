"""Threads and futexes: the thread a clone or clone3 with CLONE_THREAD makes (the calls are
sys_process.py's, which tells a thread from a process), gettid, set_tid_address,
sched_yield, exit of one thread, and futex(2) in full (wait, wake, requeue, cmp_requeue,
wake_op, the bitset variants; private and shared alike, since one process's threads share
one memory; timeouts on the scheduler's clock).  The scheduler
is threads.py; the PI futexes (priority inheritance) are not served: ENOSYS."""

from __future__ import annotations

import time
from collections.abc import Callable

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import GuestExit, LinuxKernel
from emutrace.machine.linux.sys_proc import CLOCKS, _sleep_ns
from emutrace.machine.linux.table import syscall
from emutrace.machine.linux.threads import MAX_THREADS, NEVER, GuestThread, Wait

K = LinuxKernel

# <linux/futex.h>
FUTEX_WAIT, FUTEX_WAKE, FUTEX_REQUEUE, FUTEX_CMP_REQUEUE, FUTEX_WAKE_OP = 0, 1, 3, 4, 5
FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET = 9, 10
FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME = 128, 256
FUTEX_BITSET_MATCH_ANY = 0xFFFFFFFF
FUTEX_OP_OPARG_SHIFT = 8  # in a wake_op's op field: the operand is 1 << oparg


# ---------------------------------------------------------------- threads
def clone_thread(k: K, flags: int, stack: int, ptid: int, ctid: int, tls: int) -> int:
    """clone with CLONE_VM|CLONE_THREAD: a new thread of this process (kernel/fork.c
    copy_process): the caller's registers, 0 as the call's result, `stack` as its stack
    pointer, `tls` as its thread pointer (CLONE_SETTLS); the tid stored at `ptid`
    (CLONE_PARENT_SETTID) and `ctid` (CLONE_CHILD_SETTID), `ctid` cleared and woken at
    its exit (CLONE_CHILD_CLEARTID)."""
    c, cpu, isa = k.abi.constants, k.cpu, k.isa
    if not flags & c["CLONE_SIGHAND"] or not flags & c["CLONE_VM"]:
        raise GuestError("EINVAL")  # CLONE_THREAD needs both (kernel/fork.c)
    if len(k.threads.threads) >= MAX_THREADS:
        raise GuestError("EAGAIN")
    regs = isa.registers
    # the new thread's context: the caller's registers as they are inside the system-call
    # hook, with its stack and thread pointer written now (i386's user_desc lies on the
    # caller's stack and is gone later), then the caller's own context back
    caller = cpu.context_save()
    if stack:
        cpu.reg_write(regs.sp, stack)
    if flags & c["CLONE_SETTLS"]:
        if isa.clone_tls is not None:
            isa.clone_tls(cpu, tls)
        elif regs.tls is not None:
            cpu.reg_write(regs.tls, tls)
    context = cpu.context_save()
    cpu.context_restore(caller)
    # where Unicorn moves the PC past the trap only after the hook (x86_64 `syscall`),
    # the new thread starts that far on
    pc_after = k.conv.pc_after_hook

    def first_run() -> None:
        cpu.reg_write(regs.pc, cpu.pc + pc_after)

    start: list[Callable[[], None]] = [first_run] if pc_after else []
    thread = k.threads.create(context, start)
    tid_bytes = thread.tid.to_bytes(4, k.endian)
    if flags & c["CLONE_PARENT_SETTID"] and ptid:
        k.write(ptid, tid_bytes)
    if flags & c["CLONE_CHILD_SETTID"] and ctid:
        k.write(ctid, tid_bytes)
    if flags & c["CLONE_CHILD_CLEARTID"]:
        thread.clear_child_tid = ctid
    return thread.tid


@syscall("gettid")
def sys_gettid(k: K, a: tuple[int, ...]) -> int:
    return k.threads.tid


@syscall("set_tid_address")
def sys_set_tid_address(k: K, a: tuple[int, ...]) -> int:
    k.threads.current.clear_child_tid = a[0]
    return k.threads.tid


@syscall("set_robust_list")
def sys_set_robust_list(k: K, a: tuple[int, ...]) -> int:
    """Accepted and kept; the list is not walked at the thread's exit (a robust mutex
    held by a thread that exits is not marked FUTEX_OWNER_DIED)."""
    k.threads.current.robust_list = a[0]
    return 0


@syscall("sched_yield")
def sys_sched_yield(k: K, a: tuple[int, ...]) -> int:
    """Another runnable thread gets the CPU; this one runs again at its turn."""
    if k.threads.others_runnable():
        k.threads.block(Wait("yield"))
    return 0


@syscall("exit")
def sys_exit_thread(k: K, a: tuple[int, ...]) -> int:
    """exit ends the calling thread; the process ends with its last thread (exit_group
    ends them all: sys_proc)."""
    if k.threads.exit_current():
        return 0
    raise GuestExit(a[0] & 0xFF)


# ---------------------------------------------------------------- futex
def _word(k: K, addr: int) -> int:
    if addr % 4:
        raise GuestError("EINVAL")
    return int.from_bytes(k.read(addr, 4), k.endian)


def _deadline(k: K, layout: str, addr: int, absolute: bool, realtime: bool) -> int:
    """A futex wait's deadline on the scheduler clock; NEVER without a timeout.  An
    absolute timeout (the bitset wait) is made relative with the host's clock at the
    call: the one place where the host's time enters the schedule."""
    if not addr:
        return NEVER
    ns = _sleep_ns(k, layout, addr)
    if absolute:
        ns -= time.clock_gettime_ns(CLOCKS["CLOCK_REALTIME" if realtime else "CLOCK_MONOTONIC"])
    return k.threads.clock + max(ns, 0)


def _wait(k: K, a: tuple[int, ...], layout: str, bitset: int, absolute: bool) -> int:
    if not bitset:
        raise GuestError("EINVAL")
    if _word(k, a[0]) != a[2] & 0xFFFFFFFF:
        raise GuestError("EAGAIN")
    deadline = _deadline(k, layout, a[3], absolute, bool(a[1] & FUTEX_CLOCK_REALTIME))
    timed_out = -k.errno("ETIMEDOUT")
    if not k.threads.active:
        # one thread: nobody can wake it.  With a timeout it sleeps that long; without,
        # it fails EAGAIN as if the word had changed (the caller re-reads it; Linux would
        # wait forever: glibc's unlock of a lock taken before threads existed expects this)
        if deadline == NEVER:
            raise GuestError("EAGAIN")
        return timed_out if k.sleep((deadline - k.threads.clock) / 1e9) else \
            -k.errno("EINTR")
    k.threads.block(Wait("futex", a[0], bitset, deadline, timed_out))
    return 0


def _wake(k: K, addr: int, count: int, bitset: int = FUTEX_BITSET_MATCH_ANY) -> int:
    """futex_wake (kernel/futex/waitwake.c): it stops after the count-th wake, so a count
    of 0 or less still wakes one."""
    if not bitset:
        raise GuestError("EINVAL")
    return k.threads.wake(addr, max(count, 1), bitset)


def _requeue(k: K, a: tuple[int, ...], compare: bool) -> int:
    nr_wake, nr_requeue = k.int32(a[2]), k.int32(a[3])
    if nr_wake < 0 or nr_requeue < 0:
        raise GuestError("EINVAL")
    if compare and _word(k, a[0]) != a[5] & 0xFFFFFFFF:
        raise GuestError("EAGAIN")
    done = k.threads.wake(a[0], nr_wake)
    moved: list[GuestThread] = k.threads.waiters(a[0])[:nr_requeue]
    for thread in moved:
        assert thread.wait is not None
        thread.wait.futex = a[4]
    return done + len(moved)


def _sign12(v: int) -> int:
    return v - 0x1000 if v & 0x800 else v


WAKE_OPS: dict[int, Callable[[int, int], int]] = {  # FUTEX_OP_SET, ADD, OR, ANDN, XOR
    0: lambda old, arg: arg, 1: lambda old, arg: old + arg, 2: lambda old, arg: old | arg,
    3: lambda old, arg: old & ~arg, 4: lambda old, arg: old ^ arg}
WAKE_CMPS: dict[int, Callable[[int, int], bool]] = {  # FUTEX_OP_CMP_EQ, NE, LT, LE, GT, GE
    0: lambda x, y: x == y, 1: lambda x, y: x != y, 2: lambda x, y: x < y,
    3: lambda x, y: x <= y, 4: lambda x, y: x > y, 5: lambda x, y: x >= y}


def _wake_op(k: K, a: tuple[int, ...]) -> int:
    """FUTEX_WAKE_OP: *uaddr2 = op(*uaddr2, oparg); wake on uaddr; and when
    cmp(old *uaddr2, cmparg) holds, wake on uaddr2 too (futex_atomic_op_inuser)."""
    encoded = a[5] & 0xFFFFFFFF
    op, cmp = encoded >> 28 & 0xF, encoded >> 24 & 0xF
    oparg, cmparg = _sign12(encoded >> 12 & 0xFFF), _sign12(encoded & 0xFFF)
    if op & FUTEX_OP_OPARG_SHIFT:
        op &= 7
        if not 0 <= oparg <= 31:
            raise GuestError("EINVAL")  # kernel/futex/waitwake.c: a shift out of range
        oparg = 1 << oparg
    if op not in WAKE_OPS or cmp not in WAKE_CMPS:
        raise GuestError("ENOSYS")
    old = _word(k, a[4])
    k.write(a[4], (WAKE_OPS[op](old, oparg) & 0xFFFFFFFF).to_bytes(4, k.endian))
    woken = _wake(k, a[0], k.int32(a[2]))
    old_signed = old - (1 << 32) if old >> 31 else old
    if WAKE_CMPS[cmp](old_signed, cmparg):
        woken += _wake(k, a[4], k.int32(a[3]))
    return woken


def _futex(k: K, a: tuple[int, ...], layout: str) -> int:
    op = a[1] & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
    if a[1] & FUTEX_CLOCK_REALTIME and op not in (FUTEX_WAIT_BITSET, FUTEX_WAIT):
        raise GuestError("ENOSYS")
    if op == FUTEX_WAIT:
        return _wait(k, a, layout, FUTEX_BITSET_MATCH_ANY, absolute=False)
    if op == FUTEX_WAIT_BITSET:
        return _wait(k, a, layout, a[5] & 0xFFFFFFFF, absolute=True)
    if op == FUTEX_WAKE:
        _word(k, a[0])
        return _wake(k, a[0], k.int32(a[2]))
    if op == FUTEX_WAKE_BITSET:
        _word(k, a[0])
        return _wake(k, a[0], k.int32(a[2]), a[5] & 0xFFFFFFFF)
    if op in (FUTEX_REQUEUE, FUTEX_CMP_REQUEUE):
        return _requeue(k, a, compare=op == FUTEX_CMP_REQUEUE)
    if op == FUTEX_WAKE_OP:
        return _wake_op(k, a)
    raise GuestError("ENOSYS")  # FUTEX_FD (gone since 2.6.26) and the PI operations


@syscall("futex")
def sys_futex(k: K, a: tuple[int, ...]) -> int:
    return _futex(k, a, "timespec")


@syscall("futex_time64")
def sys_futex_time64(k: K, a: tuple[int, ...]) -> int:
    return _futex(k, a, "kernel_timespec")

