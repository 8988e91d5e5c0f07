"""Guest threads on one emulated CPU, under a deterministic scheduler.

A guest process is one Unicorn instance (one memory); its threads take turns on that CPU.
A thread that is not running is a saved Unicorn context (registers only: memory is
shared, as CLONE_VM shares it).  The scheduler switches threads only between two
`emu_start` calls of the run loop (target/unicorn_run.py), never inside a hook:

* at a system call that blocks (futex wait, nanosleep, sched_yield while another thread
  can run, a read of an empty pipe or terminal): the handler records what the thread waits
  for and stops the CPU;
* when a thread has run QUANTUM guest instructions since it got the CPU (emu_start's own
  instruction count, used only while the process has more than one thread, and not on
  MIPS: capability `thread_preemption`).

The next thread is the first runnable one after the current in thread-id order (round
robin), so a rerun makes the same switches at the same instructions: runs are
deterministic whatever the host's load.  Nothing is preempted while a single thread runs,
so a program without threads runs exactly as before.

Time: the scheduler keeps its own clock (nanoseconds), which moves by one nanosecond per
guest instruction of every quantum that runs out, and jumps to the next deadline when
every thread waits: a timed futex wait or a nanosleep ends by that clock (the host sleeps
the jump, so that a sleep still takes about as long as asked).  When every thread waits
with no deadline, nothing can ever wake any of them: the run ends (Deadlock).

Thread ids: the main thread's is the process id; the n-th thread created gets pid + n
(Linux gives the next free pid; a guest only compares them)."""

from __future__ import annotations

import select
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emutrace.machine.linux.kernel import LinuxKernel

QUANTUM = 20_000  # guest instructions a thread runs before the next runnable one gets the CPU
NEVER = -1
# threads a process may have at once: a saved context is up to 80 KB (ppc64le), so this
# bounds them to ~80 MB; one more is EAGAIN, as clone(2) answers at RLIMIT_NPROC
MAX_THREADS = 1024


class WouldBlock(Exception):
    """A system call would wait for host descriptor `fd` to be readable while another
    thread could run (raised by the kernel's wait_readable): the thread waits instead,
    and the call is made again when the descriptor is ready."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self.fd = fd


class Deadlock(Exception):
    """Every thread waits and none can be woken: raised out of the run loop."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass
class Wait:
    """What a blocked thread waits for."""

    what: str  # "futex", "sleep", "yield", "io"
    futex: int | None = None  # the futex word's address
    bitset: int = 0xFFFFFFFF
    deadline: int = NEVER  # on the scheduler clock (ns); NEVER: no timeout
    timeout_result: int = 0  # the system call's result when the deadline passes
    pc: int = 0  # where the thread blocked (the deadlock message)
    seq: int = 0  # when it began to wait: futex waiters are woken first come, first served
    fd: int = -1  # "io": the host descriptor it waits to read
    retry: Callable[[], int] | None = None  # "io": the call, made again once fd is ready


@dataclass
class GuestThread:
    tid: int
    context: Any = None  # the saved Unicorn context while another thread runs
    clear_child_tid: int = 0  # set_tid_address / CLONE_CHILD_CLEARTID
    robust_list: int = 0
    wait: Wait | None = None
    result: int | None = None  # its blocked system call's result, set when it runs again
    # register writes made when it first runs (a new thread: stack, thread pointer, pc)
    start: list[Callable[[], None]] = field(default_factory=list)
    exited: bool = False
    retry: Callable[[], int] | None = None  # its blocked call, to make when it runs again


class Scheduler:
    def __init__(self, kernel: LinuxKernel, tid: int) -> None:
        self.k = kernel
        self.threads: dict[int, GuestThread] = {tid: GuestThread(tid)}
        self.main_tid = tid
        self.current = self.threads[tid]
        self.created = 0
        self.clock = 0
        self.switch_pending = False
        self.requantum = False  # stopped to start counting quanta (see create)
        self.preempts = kernel.isa.capability("thread_preemption").works
        self.switches = 0
        self._seq = 0
        self.budget: int | None = None  # --max-insns left, counted in whole quanta
        # told the new current thread's tid at every switch (tracing keeps one shadow
        # stack per thread)
        self.on_switch: list[Callable[[int], None]] = []

    # ------------------------------------------------------------ state
    @property
    def active(self) -> bool:
        """More than one thread: quanta and switches are in force."""
        return len(self.threads) > 1

    @property
    def tid(self) -> int:
        return self.current.tid

    def others_runnable(self) -> bool:
        return any(t.wait is None for t in self.threads.values() if t is not self.current)

    def forked(self, pid: int) -> None:
        """In a host-forked child: only the calling thread goes on (fork(2)), as pid."""
        me = self.current
        me.tid = self.main_tid = pid
        self.threads = {pid: me}
        self.created = 0

    # ------------------------------------------------------------ thread life
    def create(self, context: Any, start: list[Callable[[], None]]) -> GuestThread:
        """A new runnable thread with this saved context, and `start` applied when it
        first runs."""
        self.created += 1
        tid = self.main_tid + self.created
        while tid in self.threads:
            tid += 1
        thread = GuestThread(tid, context, start=start, result=0)
        self.threads[tid] = thread
        # the stretch running now was started without a quantum (one thread then): stop
        # it, so that the caller goes on under the quantum from the next instruction
        if self.preempts and len(self.threads) == 2:
            self.requantum = True
            self.k.cpu.uc.emu_stop()
        return thread

    def exit_current(self) -> bool:
        """The current thread ends (exit, not exit_group): CLONE_CHILD_CLEARTID's word
        is cleared and one waiter woken (kernel/fork.c mm_release); False when it was the
        last thread (then the process ends)."""
        me = self.current
        if len(self.threads) == 1:
            return False
        if me.clear_child_tid:
            try:
                self.k.write(me.clear_child_tid, bytes(4))
                self.wake(me.clear_child_tid, 1)
            except Exception:  # noqa: BLE001 - an unmapped word is ignored, as the kernel
                pass
        me.exited = True
        del self.threads[me.tid]
        self.request_switch()
        return True

    # ------------------------------------------------------------ blocking and waking
    def request_switch(self) -> None:
        self.switch_pending = True
        self.k.cpu.uc.emu_stop()

    def block(self, wait: Wait) -> None:
        """The current thread waits (its system call's result is set when it is woken)."""
        wait.pc = self.k.cpu.pc
        self._seq += 1
        wait.seq = self._seq
        self.current.wait = wait
        self.request_switch()

    def block_on_fd(self, fd: int, retry: Callable[[], int]) -> int:
        """The current thread waits for host descriptor fd to be readable (a read of an
        empty pipe); `retry` makes its call then.  The placeholder result is 0."""
        self.block(Wait("io", fd=fd, retry=retry))
        return 0

    def wake(self, futex: int, count: int, bitset: int = 0xFFFFFFFF) -> int:
        """Wake up to `count` threads waiting on `futex` with a bitset sharing a bit, in
        the order they began to wait; the number woken."""
        woken = 0
        for thread in self.waiters(futex):
            if woken >= count:
                break
            assert thread.wait is not None
            if thread.wait.bitset & bitset:
                thread.wait, thread.result = None, 0
                woken += 1
        return woken

    def waiters(self, futex: int) -> list[GuestThread]:
        """Threads waiting on `futex`, in the order they began to wait."""
        found = [t for t in self.threads.values()
                 if t.wait is not None and t.wait.what == "futex" and t.wait.futex == futex]
        return sorted(found, key=lambda t: t.wait.seq if t.wait else 0)

    # ------------------------------------------------------------ the run loop's side
    def count(self, max_insns: int) -> int:
        """emu_start's instruction count for the next stretch (no quantum where the
        ISA's capability table says the count cannot end a stretch cleanly: MIPS)."""
        if not self.active or not self.preempts:
            return max_insns
        if max_insns and self.budget is None:
            self.budget = max_insns
        return QUANTUM if self.budget is None else min(QUANTUM, self.budget)

    def switching(self) -> bool:
        return self.switch_pending or self.requantum

    def resume(self, pc: int, sentinel: int, count: int) -> int | None:
        """After emu_start returned without an exception: the address to start the next
        stretch at (another thread's, or this one's), or None when the run ends here."""
        if self.requantum and not self.switch_pending:
            self.requantum = False  # the same thread goes on, now under the quantum
            return pc | (1 if self.k.cpu.in_alt_mode() else 0)
        self.requantum = False
        expired = count > 0 and pc != sentinel and not self.switch_pending
        if not self.switch_pending and not (expired and self.active):
            return None  # single thread: the budget ran out, or the program left its code
        if expired:
            self.clock += count
            if self.budget is not None:
                self.budget -= count
                if self.budget <= 0:
                    return None
        self.switch_pending = False
        return self._switch()

    def _switch(self) -> int:
        uc = self.k.cpu.uc
        me = self.current
        if not me.exited:
            me.context = uc.context_save()
        while True:
            nxt = self._pick(me)
            if nxt is not me or me.exited:
                self.switches += 1
                uc.context_restore(nxt.context)
                nxt.context = None
            self.current = nxt
            for apply in nxt.start:
                apply()
            nxt.start = []
            if nxt.retry is None:
                break
            retry, nxt.retry = nxt.retry, None
            nxt.result = retry()  # its descriptor is ready: the call is made now
            if nxt.wait is None:
                break
            # not ready after all (another reader took the data): it waits again
            self.switch_pending = False
            nxt.context, nxt.result, me = uc.context_save(), None, nxt
        if nxt.result is not None:
            self.k.set_result(nxt.result)
            nxt.result = None
        for listener in self.on_switch:
            listener(nxt.tid)
        cpu = self.k.cpu
        return cpu.pc | (1 if cpu.in_alt_mode() else 0)

    def _pick(self, me: GuestThread) -> GuestThread:
        while True:
            order = sorted(self.threads)
            start = order.index(me.tid) + 1 if me.tid in self.threads else \
                next((i for i, t in enumerate(order) if t > me.tid), 0)
            for tid in order[start:] + order[:start]:
                thread = self.threads[tid]
                if thread.wait is None:
                    return thread
                if thread.wait.what == "yield":  # its turn came round again
                    thread.wait, thread.result = None, 0
                    return thread
                if thread.wait.what == "io" and self._readable([thread.wait.fd], 0):
                    thread.retry, thread.wait = thread.wait.retry, None
                    return thread
            self._advance_clock()

    @staticmethod
    def _readable(fds: list[int], timeout_ms: int) -> bool:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(timeout_ms))  # readable, hung up or in error: read says

    def _advance_clock(self) -> None:
        """Every thread waits: jump to the earliest deadline and end those waits.  A
        thread waiting for input from outside (a pipe, a terminal) is waited for on the
        host, in short steps (a stop of the run ends its call with EINTR)."""
        timed = [t for t in self.threads.values()
                 if t.wait is not None and t.wait.deadline != NEVER]
        reading = [t for t in self.threads.values()
                   if t.wait is not None and t.wait.what == "io"]
        if reading:
            deadline = min((t.wait.deadline for t in timed if t.wait), default=NEVER)
            step = 100 if deadline == NEVER else min(100, (deadline - self.clock)
                                                     // 1_000_000)
            if step <= 0:  # the deadline is less than a millisecond away
                step = 0
            if self._readable([t.wait.fd for t in reading if t.wait], step):
                return
            if self.k.cpu.stop_requested.is_set():
                for t in reading:
                    t.wait, t.result = None, -self.k.errno("EINTR")
                return
            if deadline == NEVER:
                return
            if step:
                self.clock = min(deadline, self.clock + step * 1_000_000)
                if self.clock < deadline:
                    return
        if not timed:
            raise Deadlock(", ".join(
                f"thread {t.tid} in {t.wait.what} at {t.wait.pc:#x}"
                for t in self.threads.values() if t.wait is not None))
        deadline = min(t.wait.deadline for t in timed if t.wait is not None)
        if deadline > self.clock:
            self.k.sleep((deadline - self.clock) / 1e9)
            self.clock = deadline
        for t in timed:
            assert t.wait is not None
            if t.wait.deadline <= self.clock:
                t.result, t.wait = t.wait.timeout_result, None
