"""A wait for a child process that blocks only the calling thread (wait4, waitid).

While the process has more than one thread, a wait4/waitid that finds no child ready
does not wait on the host: it raises WouldBlock (threads.py), the thread waits and the
others run; the call is made again when the scheduler finds a child ready.  Readiness is
the host's own answer, without reaping: waitid(2) with WNOHANG|WNOWAIT for the same
children and state changes.  When every thread waits, the scheduler sleeps in one
poll(2) on the waited-for children's pidfds (pidfd_open(2), Linux 5.3: readable once
the child has exited) with the threads' other descriptors, so the host wakes it at the
child's exit instead of a polling loop; a stop or continue (WUNTRACED, WCONTINUED) has
no pidfd event and is seen by the probe, asked every threads.PROBE_MS.  The pidfds are
kept per child (Kernel.pidfds) and closed when the child is reaped."""

from __future__ import annotations

import os
import select
import signal
import time

from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.threads import WouldBlock

K = LinuxKernel
STATE_CHANGES = os.WEXITED | os.WSTOPPED | os.WCONTINUED


def wait4_target(pid: int) -> tuple[int, int]:
    """wait4's pid argument as waitid's (idtype, id) (wait4(2)): < -1 the group -pid,
    -1 any child, 0 the caller's group, > 0 that child."""
    if pid < -1:
        return os.P_PGID, -pid
    if pid == -1:
        return os.P_ALL, 0
    if pid == 0:
        return os.P_PGID, os.getpgrp()
    return os.P_PID, pid


def wait4_changes(host_options: int) -> int:
    """The waitid state changes a wait4 with these host options reports."""
    return os.WEXITED | (os.WSTOPPED if host_options & os.WUNTRACED else 0) \
        | (os.WCONTINUED if host_options & os.WCONTINUED else 0)


def child_event(k: K, idtype: int, ident: int, changes: int) -> WouldBlock:
    """What a thread waiting for a child's state change (`changes`: WEXITED...) waits
    for: the children's pidfds, and a probe that asks the host without reaping."""
    changes &= STATE_CHANGES

    def ready() -> bool:
        try:
            return os.waitid(idtype, ident, changes | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True  # no such child (any more): the call made again says ECHILD

    # a pidfd says only "exited": watched for a wait that takes exits, else the probe alone
    fds = _pidfds(k, idtype, ident) if changes & os.WEXITED else {}
    return WouldBlock(fds, probe=ready)


def _pidfds(k: K, idtype: int, ident: int) -> dict[int, int]:
    if idtype == os.P_PID:
        pids = [ident]
    else:
        group = ident or os.getpgrp()
        pids = [p for p in sorted(k.children) if idtype == os.P_ALL or _group(p) == group]
    fds: dict[int, int] = {}
    for pid in pids:
        fd = k.pidfds.get(pid)
        if fd is None:
            try:
                fd = k.pidfds[pid] = os.pidfd_open(pid)
            except OSError:  # gone, or no pidfds on this host: the probe alone says
                continue
        fds[fd] = select.POLLIN
    return fds


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def reaped(k: K, pid: int) -> None:
    """The child is reaped: no longer ours, its pidfd closed."""
    k.children.discard(pid)
    fd = k.pidfds.pop(pid, None)
    if fd is not None:
        os.close(fd)


def forget_children(k: K) -> None:
    """In a forked child: its parent's children are not its own."""
    for fd in k.pidfds.values():
        os.close(fd)
    k.pidfds.clear()
    k.children = set()


def end_children(k: K, sig: int) -> None:
    """The run was stopped (--timeout, a stop signal): every guest child not yet reaped
    gets host signal `sig` too, so no guest process outlives the run (each child's own
    run stops the same way and passes it on to its children).  An unreaped child's pid
    cannot have been reused, so nothing else is signalled."""
    for pid in sorted(k.children):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


OUTLIVE_POLL = 0.05  # seconds between looks at the children while they outlive the guest


def outlive(k: K, deadline: float | None, stops: frozenset[int]) -> str | None:
    """The guest process has ended (its exit, or a fatal signal): its children run on until
    they end, as Linux's outlive their parent (exit(2): reparented), and the run ends with
    the last of them.  The run's --timeout (`deadline`, monotonic) and stop signals
    (`stops`, taken here with sigtimedwait) still hold: every child then gets the signal
    (`end_children`: SIGTERM for the timeout) and the stop is returned, "timeout" or the
    signal's name; None once every child has ended."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        while True:
            for pid in sorted(k.children):
                try:
                    ended = os.waitpid(pid, os.WNOHANG)[0] == pid
                except ChildProcessError:
                    ended = True
                if ended:
                    reaped(k, pid)
            if not k.children:
                return None
            wait = OUTLIVE_POLL
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    end_children(k, signal.SIGTERM)
                    return "timeout"
                wait = min(wait, left)
            info = signal.sigtimedwait(stops, wait)
            if info is not None:
                end_children(k, info.si_signo)
                return signal.Signals(info.si_signo).name
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
