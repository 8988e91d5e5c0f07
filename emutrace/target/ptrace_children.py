"""The forked children of a confined native run (and their children): traced for their
checked system calls only.  The backend does not follow them (their code gets the
program's own bytes back, `PtraceTarget.release_child`); each gets a `Confinement` of its
own over the same `Sandbox` (the sandbox keeps no per-process state natively: the current
directory is read from /proc/PID/cwd at each check) and keeps its parent's scratch page
(a fork copies it; it is checked before each use anyway).

The run loop waits for its tracee with `Children.wait_for`, which serves the children's
stops meanwhile (seccomp stops, their own forks and execs, their signals, passed on), so
a child blocked at a check never waits for the first process's next stop.  A child whose
first stop (the SIGSTOP of an auto-attached child, ptrace(2) PTRACE_O_TRACEFORK) is seen
before its parent's fork event is remembered (`early`).  When the first process exits, the
run goes on until its children have ended too (`outlive`, as Linux lets them run on); a
--timeout or stop signal kills them with it (`kill`)."""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from emutrace.target.ptrace import (
    PTRACE_CONT,
    PTRACE_EVENT_EXEC,
    PTRACE_EVENT_FORK,
    PTRACE_EVENT_SECCOMP,
    PTRACE_EVENT_VFORK,
    WALL,
    event_message,
    ptrace,
)

if TYPE_CHECKING:
    from emutrace.target.ptrace_confine import Confinement


class Children:
    """The traced children of one confined run."""

    def __init__(self, first: Confinement) -> None:
        self.first = first
        self.live: dict[int, Confinement] = {}
        self.early: set[int] = set()
        self.followed = 0  # children confined over the run

    def first_stop(self, pid: int) -> None:
        """Wait for a new child's first stop unless it was already seen."""
        if pid in self.early:
            self.early.discard(pid)
        else:
            os.waitpid(pid, WALL)

    def adopt(self, pid: int, scratch: int | None) -> None:
        """A new child, stopped at its first stop: confined from here, resumed."""
        child = self.first.confine_child(pid)
        child.scratch = scratch
        self.live[pid] = child
        self.followed += 1
        ptrace(PTRACE_CONT, pid, 0, 0)

    def wait_for(self, pid: int) -> int:
        """waitpid(pid) for the caller's tracee, serving the children's stops meanwhile."""
        while True:
            if not self.live:
                return os.waitpid(pid, WALL)[1]
            got, status = os.waitpid(-1, WALL)
            if got == pid:
                return status
            self._serve(got, status)

    def _serve(self, pid: int, status: int) -> None:
        child = self.live.get(pid)
        if child is None:
            if os.WIFSTOPPED(status):
                self.early.add(pid)  # a grandchild, before its parent's fork event
            return
        if not os.WIFSTOPPED(status):
            del self.live[pid]
            child.close()
            return
        sig, event = os.WSTOPSIG(status), status >> 16
        pending = 0
        try:
            if sig == signal.SIGTRAP and event:
                self._event(child, event)
            else:
                pending = sig  # the child's own signal
            ptrace(PTRACE_CONT, pid, 0, pending)
        except ProcessLookupError:
            pass  # killed meanwhile (SIGKILL ends even a stopped tracee): its exit comes next

    def _event(self, child: Confinement, event: int) -> None:
        if event == PTRACE_EVENT_SECCOMP:
            child.on_seccomp()
        elif event in (PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK):
            grandchild = event_message(child.pid)
            self.first_stop(grandchild)
            self.adopt(grandchild, child.scratch)
        elif event == PTRACE_EVENT_EXEC:
            child.on_exec()

    def outlive(self) -> None:
        """The first process has exited: its children run on until they end, their calls
        still checked, as Linux's children outlive a parent that exits (exit(2): they are
        reparented).  A --timeout or stop signal ends them (`kill`), which ends this."""
        while self.live:
            try:
                got, status = os.waitpid(-1, WALL)
            except ChildProcessError:
                break
            self._serve(got, status)

    def kill(self) -> None:
        """SIGKILL to every child still followed (the run was stopped); reaped later."""
        for pid in list(self.live):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def end(self) -> None:
        """The run is over: children still running are killed and reaped."""
        for pid, child in list(self.live.items()):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, WALL)
            except (ProcessLookupError, ChildProcessError):
                pass
            child.close()
        self.live.clear()
        self.early.clear()
