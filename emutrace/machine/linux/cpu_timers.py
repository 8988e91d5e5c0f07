"""The CPU-time interval timers, ITIMER_PROF (SIGPROF) and ITIMER_VIRTUAL (SIGVTALRM), in
guest-instruction time.

Linux counts them in the process's CPU time (user and system time for ITIMER_PROF, user
time for ITIMER_VIRTUAL: setitimer(2)).  A guest's CPU time here is its instruction count,
one nanosecond per guest instruction (the scheduler's clock, threads.py): a timer set to
10 ms expires after 10,000,000 guest instructions of the process, whatever the host's
speed or load, so a run that waits for SIGPROF is deterministic.  System calls take no
time, so both timers run alike.  The run loop's `emu_start` stretches end where the
earliest timer runs out (Scheduler.count), and the signal is then queued and delivered at
that instruction (`on_expiry`), as the kernel delivers it on the next return to user mode.

Only instructions of stretches that run to their count are counted: a stretch a thread
ends early (it blocks, it exits) is not, so with several threads the timers run slow.
Where the instruction count cannot end a stretch (MIPS: capability `thread_preemption`), a
block hook counts instead, each block's instructions as it is entered, and the signal
arrives at the end of the block in which its timer expired.  A
forked child starts with both timers disarmed (fork(2)); the image an execve starts keeps
them (execve(2): session.Inherited)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

NS_PER_INSN = 1  # guest CPU time per instruction (the scheduler clock's rate)


@dataclass
class CpuTimer:
    signal: str  # its signal's name (the ISA's number comes from the ABI table)
    value: int = 0  # nanoseconds left until it expires; 0: disarmed
    interval: int = 0  # reloaded into `value` at each expiry; 0: one shot


class CpuTimers:
    """A process's ITIMER_VIRTUAL and ITIMER_PROF."""

    def __init__(self) -> None:
        self.timers = {"ITIMER_VIRTUAL": CpuTimer("SIGVTALRM"),
                       "ITIMER_PROF": CpuTimer("SIGPROF")}
        # told the names of the signals of the timers that expired (sys_sigdeliver.py)
        self.on_expiry: Callable[[list[str]], None] | None = None

    def running(self) -> bool:
        return any(t.value for t in self.timers.values())

    def next_due(self) -> int | None:
        """Guest instructions until the earliest running timer expires (None: none runs)."""
        left = [t.value for t in self.timers.values() if t.value]
        return -(-min(left) // NS_PER_INSN) if left else None

    def advance(self, insns: int) -> None:
        """`insns` guest instructions ran: the timers that expire reload (or stop) and
        their signals go to `on_expiry`."""
        fired = self.tick(insns)
        if fired and self.on_expiry is not None:
            self.on_expiry(fired)

    def tick(self, insns: int) -> list[str]:
        """`insns` guest instructions ran: the signals of the timers that expired, which
        reload (or stop).  Expiries that one count spans collapse into one signal, as a
        pending signal is not queued twice."""
        fired = []
        for timer in self.timers.values():
            if not timer.value:
                continue
            timer.value -= insns * NS_PER_INSN
            if timer.value <= 0:
                fired.append(timer.signal)
                if timer.interval:
                    timer.value = timer.interval - (-timer.value) % timer.interval
                else:
                    timer.value = 0
        return fired

    def disarm_all(self) -> None:
        for timer in self.timers.values():
            timer.value = timer.interval = 0
