"""The process half of a confined native run (and the project's rule that
a guest touches nothing of the host outside what the user allowed): system calls that act
on *another* process — signals, scheduling, limits, NUMA placement — reach only the
guest's own processes (the run's first process and the children it followed,
target/ptrace_children.py), as under emulation (machine/linux/sys_process.py `_kill`: a
guest must not signal the host's other processes, emutrace may run as root); any other pid
is ESRCH, as in the guest's PID namespace (ptrace and process_vm_* too, `refused_errno`).

A signal to a process group (pid 0 or -pgid) or to everybody (-1) is sent by the tracer to
each guest process in it (the kernel would reach the user's other processes, emutrace
among them: the guest shares its process group) and the call returns 0, or ESRCH when
none is there; pid -1 leaves out the caller, as kill(2) does."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from emutrace.target.confine_checks import Call, Check, Refused, int32

if TYPE_CHECKING:
    from emutrace.target.ptrace_confine import Confinement

PRIO_PROCESS = 0  # <linux/resource.h>; PRIO_PGRP and PRIO_USER reach others
IOPRIO_WHO_PROCESS = 1  # <linux/ioprio.h>


def guests(c: Confinement) -> set[int]:
    return {c.children.first.pid, *c.children.live}


def _target(c: Confinement, pid: int) -> None:
    """A call on one process: itself (0), or one of the guest's processes."""
    if pid == 0:
        return
    in_namespace = _namespace_pids(c)  # (the pid is the guest's namespace's)
    if pid in (guests(c) if in_namespace is None else in_namespace):
        return
    # not there for the guest: the PID namespace holds none but its processes (and
    # emulation answers the same)
    raise Refused("ESRCH")


# refused calls that name a process (ptrace(2)'s pid is argument 1, except for
# PTRACE_TRACEME; process_vm_readv/writev's is argument 0)
PTRACE_TRACEME = 0
_PID_ARGUMENT = {"ptrace": 1, "process_vm_readv": 0, "process_vm_writev": 0}


def refused_errno(c: Confinement, name: str, args: list[int], errno_name: str) -> str:
    """The errno of a refused call (seccomp_filter.REFUSED): ESRCH when it names a process
    that is not the guest's (the kernel's answer in the guest's PID namespace), else the
    refusal's own errno."""
    at = _PID_ARGUMENT.get(name)
    if at is None or (name == "ptrace" and args[0] == PTRACE_TRACEME):
        return errno_name
    try:
        _target(c, int32(args[at]))
    except Refused as e:
        return e.errno_name
    return errno_name


def _namespace_pids(c: Confinement) -> dict[int, int] | None:
    """The guest's processes by their pid in its PID namespace (target/namespaces.py), or
    None when it has none: the last field of /proc/PID/status `NSpid` (proc(5))."""
    out: dict[int, int] = {}
    for host in guests(c):
        try:
            with open(f"/proc/{host}/status") as f:
                fields = next((line.split()[1:] for line in f if line.startswith("NSpid:")),
                              [])
        except OSError:
            continue
        if len(fields) < 2:
            return None
        out[int(fields[-1])] = host
    return out


def _host_pid(c: Confinement, pid: int) -> int:
    """A pid the guest names, as the host knows it (-1: none of the guest's)."""
    in_namespace = _namespace_pids(c)
    if in_namespace is None:
        return pid
    return in_namespace.get(pid, -1)


def _kill(c: Confinement, call: Call) -> None:
    pid, sig = int32(call.args[0]), int32(call.args[1])
    if pid > 0:
        _target(c, pid)
        return
    if not 0 <= sig <= 64:
        raise Refused("EINVAL")
    me = c.pid
    if pid == -1:
        targets = guests(c) - {me}
    else:
        group = os.getpgid(me) if pid == 0 else _host_pid(c, -pid)
        targets = {p for p in guests(c) if _group(p) == group}
    for p in sorted(targets):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            targets.discard(p)
    if not targets:
        raise Refused("ESRCH")
    call.result = 0


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _first_pid(c: Confinement, call: Call) -> None:
    """tkill, tgkill (its thread too), rt_(tg)sigqueueinfo, pidfd_open, prlimit64,
    sched_set*, migrate_pages, move_pages: the pid argument(s) must be the guest's."""
    _target(c, int32(call.args[0]))
    if call.name in ("tgkill", "rt_tgsigqueueinfo"):
        _target(c, int32(call.args[1]))


def _pidfd_send_signal(c: Confinement, call: Call) -> None:
    """A pidfd (pidfd_open, clone's CLONE_PIDFD) or a /proc/PID directory descriptor: the
    process it names must be the guest's."""
    fd = int32(call.args[0])
    pid = None
    try:
        with open(f"/proc/{c.pid}/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
    except (OSError, ValueError):
        raise Refused("EBADF") from None
    if pid is None:
        host = c.fd_host_path(fd) or b""
        name = os.path.basename(host)
        if not (host.startswith(b"/proc/") and name.isdigit()):
            return  # not a process: the kernel says EBADF
        pid = int(name)
    if pid <= 0 or pid not in guests(c):
        raise Refused("EPERM")


def _who(which_i: int, who_i: int, process: int) -> Check:
    """setpriority, ioprio_set: one process only (a group or a user reaches others)."""
    def check(c: Confinement, call: Call) -> None:
        if int32(call.args[which_i]) != process:
            raise Refused("EPERM", f"emutrace: native: {call.name} on a process group or "
                                   f"user refused (it reaches the host's other processes): "
                                   f"returning EPERM")
        _target(c, int32(call.args[who_i]))
    return check


PROCESS_CHECKS: dict[str, Check] = {
    "kill": _kill,
    **{n: _first_pid for n in ("tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
                               "pidfd_open", "prlimit64", "sched_setaffinity",
                               "sched_setscheduler", "sched_setparam", "sched_setattr",
                               "migrate_pages", "move_pages")},
    "pidfd_send_signal": _pidfd_send_signal,
    "setpriority": _who(0, 1, PRIO_PROCESS),
    "ioprio_set": _who(0, 1, IOPRIO_WHO_PROCESS),
}
