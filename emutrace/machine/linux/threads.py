"""Guest threads on one emulated CPU, under a deterministic scheduler.

A guest process is one Unicorn instance (one memory); its threads take turns on that CPU.
A thread that is not running is a saved Unicorn context (registers only: memory is
shared, as CLONE_VM shares it).  The scheduler switches threads only between two
`emu_start` calls of the run loop (target/unicorn_run.py), never inside a hook:

* at a system call that blocks (futex wait, nanosleep, sched_yield while another thread
  can run, a read of an empty pipe or terminal, poll/select or wait4/waitid with nothing
  ready): the handler records what the thread waits for and stops the CPU; a call that
  waits for the host (WouldBlock) is made again when it is ready or timed out;
* when a thread has run QUANTUM guest instructions since it got the CPU (emu_start's own
  instruction count, used only while the process has more than one thread, and not on
  MIPS: capability `thread_preemption`).

The next thread is the first runnable one after the current in thread-id order (round
robin), so a rerun makes the same switches at the same instructions: runs are
deterministic whatever the host's load.  Nothing is preempted while a single thread runs,
so a program without threads runs exactly as before.

Time: the scheduler keeps its own clock (nanoseconds), which moves by one nanosecond per
guest instruction of every counted stretch that runs out (a quantum, or a stretch that ends
where a CPU-time interval timer expires: cpu_timers.py), and jumps to the next deadline when
every thread waits: a timed futex wait or a nanosleep ends by that clock (the host sleeps
the jump, so that a sleep still takes about as long as asked).  Threads waiting for the
host are waited for there, all in one poll(2) (their descriptors, children's pidfds).
When every thread waits for another with no deadline, nothing can ever wake any of them:
the run ends (Deadlock).

Thread ids: the main thread's is the process id; the n-th thread created gets pid + n
(Linux gives the next free pid; a guest only compares them)."""

from __future__ import annotations

import select
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from emutrace.isa.base import Cap
from emutrace.machine.linux.cpu_timers import CpuTimers

if TYPE_CHECKING:
    from emutrace.machine.linux.kernel import LinuxKernel

QUANTUM = 20_000  # guest instructions a thread runs before the next runnable one gets the CPU
NEVER = -1
# threads a process may have at once: a saved context is up to 80 KB (ppc64le), so this
# bounds them to ~80 MB; one more is EAGAIN, as clone(2) answers at RLIMIT_NPROC
MAX_THREADS = 1024
HOST_STEP_MS = 100  # longest host wait before the run's stop request is looked at again
PROBE_MS = 20  # how often a host wait that has no descriptor (a probe only) is asked again


class WouldBlock(Exception):
    """A system call would wait on the host while another thread could run (raised by
    the kernel's wait_readable, poll/select, wait4/waitid): the thread waits instead, and
    the call is made again when what it waits for is ready, or once more when its timeout
    has passed (the call then sees `Scheduler.timed_out` and does not wait).

    fds: host descriptor -> poll(2) events that end the wait; probe: another readiness
    test (a child's state change), asked whenever the scheduler looks for a thread to
    run; timeout_ns: the call's own timeout (None: none), on the scheduler's clock;
    resume: what to do then instead of making the whole call again (the rest of a write
    that was partly made)."""

    def __init__(self, fds: dict[int, int], probe: Callable[[], bool] | None = None,
                 timeout_ns: int | None = None,
                 resume: Callable[[], int] | None = None) -> None:
        super().__init__(fds)
        self.fds = fds
        self.probe = probe
        self.timeout_ns = timeout_ns
        self.resume = resume


class Deadlock(Exception):
    """Every thread waits and none can be woken: raised out of the run loop."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass
class Wait:
    """What a blocked thread waits for."""

    what: str  # "futex", "sleep", "yield", "host" (a descriptor or a child)
    futex: int | None = None  # the futex word's address
    bitset: int = 0xFFFFFFFF
    deadline: int = NEVER  # on the scheduler clock (ns); NEVER: no timeout
    timeout_result: int = 0  # the system call's result when the deadline passes
    pc: int = 0  # where the thread blocked (the deadlock message)
    seq: int = 0  # when it began to wait: futex waiters are woken first come, first served
    # "host": host descriptor -> poll events, and another readiness test (WouldBlock)
    fds: dict[int, int] = field(default_factory=dict)
    probe: Callable[[], bool] | None = None
    retry: Callable[[], int] | None = None  # "host": the call, made again once ready


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
    expired: bool = False  # that call is made again because its timeout passed


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
        self.preempts = kernel.isa.capability(Cap.THREAD_PREEMPTION).works
        self.switches = 0
        self._seq = 0
        self.budget: int | None = None  # --max-insns left, counted in whole quanta
        # ITIMER_VIRTUAL and ITIMER_PROF: they end stretches where they expire
        self.cpu_timers = CpuTimers()
        self.block_counter: int | None = None  # the block hook counting CPU time (MIPS)
        self.expired: list[str] = []  # timer signals the block hook saw expire
        self.timed_stretch = False  # the stretch running was counted (quantum or timer)
        self.ran = 0  # instructions of the current thread's quantum run so far
        self.timed_out = False  # set while a "host" wait's call is made after its timeout
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
        self.cpu_timers.disarm_all()  # the child does not inherit timers (fork(2))

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
            self.k.cpu.stop()
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
        self.k.cpu.stop()

    def block(self, wait: Wait) -> None:
        """The current thread waits (its system call's result is set when it is woken)."""
        wait.pc = self.k.cpu.pc
        self._seq += 1
        wait.seq = self._seq
        self.current.wait = wait
        self.request_switch()

    def block_on_host(self, event: WouldBlock, retry: Callable[[], int]) -> int:
        """The current thread waits for a host event (a read of an empty pipe, a poll, a
        wait for a child); `retry` makes its call then.  The placeholder result is 0."""
        deadline = NEVER if event.timeout_ns is None else self.clock + max(0, event.timeout_ns)
        self.block(Wait("host", deadline=deadline, fds=event.fds, probe=event.probe,
                        retry=retry))
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
        """emu_start's instruction count for the next stretch: what is left of the
        thread's quantum, or until the next CPU-time timer expires, or of --max-insns,
        whichever is least (no quantum nor timer where the ISA's capability table says the
        count cannot end a stretch cleanly: MIPS)."""
        quantum = QUANTUM - self.ran if self.active and self.preempts else 0
        due = self.cpu_timers.next_due() if self.preempts else None
        self.timed_stretch = bool(quantum or due)
        if not self.timed_stretch:
            return max_insns
        if max_insns and self.budget is None:
            self.budget = max_insns
        return min(n for n in (quantum, due, self.budget) if n)

    def count_cpu_time(self) -> None:
        """A CPU-time timer was armed (cpu_timers.py).  The stretch running now ends, so
        that the next is counted up to the timer's expiry; where the instruction count
        cannot end a stretch (MIPS: capability thread_preemption), a block hook counts
        instead: each block's instructions as it is entered (MIPS instructions are all
        `insn_align` = 4 bytes), and when a timer expires the CPU stops after that block
        and its signal is delivered there (resume)."""
        cpu = self.k.cpu
        if self.preempts:
            self.requantum = True
            cpu.stop()
            return
        if self.block_counter is not None:
            return
        assert self.k.isa.classifiers is not None
        size = self.k.isa.classifiers.insn_align

        def on_block(_uc: Any, _addr: int, block_size: int, _data: Any) -> None:
            if self.expired or not self.cpu_timers.running():
                return
            self.expired = self.cpu_timers.tick(block_size // size)
            if self.expired:
                self.requantum = True
                cpu.stop()
        self.block_counter = cpu.hook_block(on_block)

    def _deliver_expired(self) -> None:
        """Signals of timers the block hook saw expire, delivered outside the hook."""
        fired, self.expired = self.expired, []
        if fired and self.cpu_timers.on_expiry is not None:
            self.cpu_timers.on_expiry(fired)

    def switching(self) -> bool:
        return self.switch_pending or self.requantum

    def resume(self, pc: int, sentinel: int, count: int) -> int | None:
        """After emu_start returned without an exception: the address to start the next
        stretch at (another thread's, or this one's), or None when the run ends here."""
        if self.requantum and not self.switch_pending:
            self.requantum = False  # the same thread goes on, now under the quantum
            self._deliver_expired()  # (a handler's entry is now the PC)
            cpu = self.k.cpu
            return self.k.isa.mode_address(cpu.pc, cpu.in_alt_mode())
        self.requantum = False
        expired = count > 0 and pc != sentinel and not self.switch_pending
        if not self.switch_pending and not (expired and self.timed_stretch):
            return None  # single thread: the budget ran out, or the program left its code
        if expired:
            self.clock += count
            if self.budget is not None:
                self.budget -= count
                if self.budget <= 0:
                    return None
            self.ran = self.ran + count if self.active else 0
            self.cpu_timers.advance(count)  # a timer's signal is delivered here
            if not self.active or self.ran < QUANTUM:  # the same thread goes on
                cpu = self.k.cpu
                return self.k.isa.mode_address(cpu.pc, cpu.in_alt_mode())
        self.switch_pending = False
        self.ran = 0
        entry = self._switch()
        if self.expired:  # delivered to the thread that runs now (signals are process-wide)
            self._deliver_expired()
            cpu = self.k.cpu
            entry = self.k.isa.mode_address(cpu.pc, cpu.in_alt_mode())
        return entry

    def _switch(self) -> int:
        cpu = self.k.cpu
        me = self.current
        if not me.exited:
            me.context = cpu.context_save()
        while True:
            nxt = self._pick(me)
            if nxt is not me or me.exited:
                self.switches += 1
                cpu.context_restore(nxt.context)
                nxt.context = None
            self.current = nxt
            for apply in nxt.start:
                apply()
            nxt.start = []
            if nxt.retry is None:
                break
            retry, nxt.retry = nxt.retry, None
            self.timed_out, nxt.expired = nxt.expired, False
            try:
                nxt.result = retry()  # it is ready (or timed out): the call is made now
            finally:
                self.timed_out = False
            if nxt.wait is None:
                break
            # not ready after all (another reader took the data): it waits again
            self.switch_pending = False
            nxt.context, nxt.result, me = cpu.context_save(), None, nxt
        if nxt.result is not None:
            self.k.set_result(nxt.result)
            nxt.result = None
        for listener in self.on_switch:
            listener(nxt.tid)
        return self.k.isa.mode_address(cpu.pc, cpu.in_alt_mode())

    def _pick(self, me: GuestThread) -> GuestThread:
        while True:
            order = sorted(self.threads)
            start = order.index(me.tid) + 1 if me.tid in self.threads else \
                next((i for i, t in enumerate(order) if t > me.tid), 0)
            for tid in order[start:] + order[:start]:
                thread = self.threads[tid]
                wait = thread.wait
                if wait is None:
                    return thread
                if wait.what == "yield":  # its turn came round again
                    thread.wait, thread.result = None, 0
                    return thread
                if wait.what == "host" and self._host_ready(wait, 0):
                    thread.retry, thread.wait = wait.retry, None
                    return thread
                if wait.deadline != NEVER and wait.deadline <= self.clock:
                    self._time_out(thread)  # the clock passed it while others ran
                    return thread
            self._advance_clock()

    @staticmethod
    def _host_ready(wait: Wait, timeout_ms: int) -> bool:
        """Is a "host" wait over: a descriptor ready (readable, hung up or in error: the
        call says which) or its probe true?  Waits up to timeout_ms on the descriptors."""
        if wait.probe is not None and wait.probe():
            return True
        return bool(wait.fds) and Scheduler._poll(wait.fds, timeout_ms)

    @staticmethod
    def _poll(fds: dict[int, int], timeout_ms: int) -> bool:
        poller = select.poll()
        for fd, events in fds.items():
            poller.register(fd, events)
        return bool(poller.poll(timeout_ms))

    @staticmethod
    def _time_out(thread: GuestThread) -> None:
        """Its wait's deadline has passed: the call ends with its timeout result (a
        "host" wait: the call is made once more, and does not wait)."""
        wait = thread.wait
        assert wait is not None
        if wait.what == "host":
            thread.retry, thread.expired = wait.retry, True
        else:
            thread.result = wait.timeout_result
        thread.wait = None

    def _advance_clock(self) -> None:
        """Every thread waits: jump to the earliest deadline and end those waits.  Threads
        waiting for the host (a pipe, a terminal, a child process) are waited for there:
        one poll(2) of all their descriptors (a child's pidfd among them), in steps of at
        most HOST_STEP_MS (a stop of the run ends their calls with EINTR); a step that
        ends with nothing ready moves the clock by the step, not by the host's time."""
        timed = [t for t in self.threads.values()
                 if t.wait is not None and t.wait.deadline != NEVER]
        hosted = [t.wait for t in self.threads.values()
                  if t.wait is not None and t.wait.what == "host"]
        if hosted:
            deadline = min((t.wait.deadline for t in timed if t.wait), default=NEVER)
            # a wait only a probe can end (a stopped child) is asked again every PROBE_MS
            cap = PROBE_MS if any(w.probe and not w.fds for w in hosted) else HOST_STEP_MS
            step = cap if deadline == NEVER else min(cap, (deadline - self.clock)
                                                     // 1_000_000)
            if step <= 0:  # the deadline is less than a millisecond away
                step = 0
            fds: dict[int, int] = {}
            for w in hosted:
                for fd, events in w.fds.items():
                    fds[fd] = fds.get(fd, 0) | events
            if any(w.probe is not None and w.probe() for w in hosted):
                return
            if fds:
                if self._poll(fds, step):
                    return
            elif step:
                self.k.sleep(step / 1000)
            if self.k.cpu.stop_requested.is_set():
                for t in self.threads.values():
                    if t.wait is not None and t.wait.what == "host":
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
                self._time_out(t)
