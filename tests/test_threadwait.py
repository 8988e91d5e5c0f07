"""A blocking system call blocks only its own thread.

`threadwait` (testbins/src/threadwait.c): thread A poll()s, then select()s, pipes that
thread B writes after some computation, then a poll with a 5 ms timeout of a pipe nobody
writes times out; the main thread wait4()s, then waitid()s, a forked child that exits
only after it has read a byte that thread C writes after its own computation; thread D
writes 200000 bytes to a pipe in one write() while main reads them (the pipe holds 64 KiB).
Under the old rule (a blocking call waited on the host, holding every thread) the run
hung.
Oracle: qemu-user's stdout (the threads truly run at once there); a traced run's calls
per thread, which `step` (a trap on every instruction) gives independently."""

from __future__ import annotations

import os
import re
import select
import subprocess
from pathlib import Path

import pytest

from emutrace.machine.linux.child_wait import child_event, reaped, wait4_target
from emutrace.machine.linux.pipe_write import write_pipe
from emutrace.machine.linux.threads import NEVER, Scheduler, Wait, WouldBlock

from .conftest import ENV, ISAS, bin_path, qemu_binary, run_emutrace
from .test_threads import FakeKernel

EXPECTED = (
    "A: poll returned 1, revents POLLIN, read 4 bytes: ping\n"
    "A: select returned 1, pong set, read 4 bytes: pong\n"
    "A: poll of the silent pipe returned 0, revents 0\n"
    "main: poller exit 1\n"
    "main: writer exit 2\n"
    "C: computed 6006 while main waits\n"
    "main: wait4 got the child, exited 1, status 6\n"
    "main: feeder exit 3\n"
    "C: computed 7186 while main waits\n"
    "main: waitid 0, got the child, code CLD_EXITED, status 86\n"
    "main: feeder exit 3\n"
    "main: read 200000 bytes through a full pipe, the last e; bulk writer exit 4\n")
TRACED = ("aarch64", "mipsel")  # one ISA with preemption, one without (MIPS)
# the others run with --backend none; TRACED ones compare stdout in their traced runs
UNTRACED = [isa for isa in ISAS if isa not in TRACED]


def _qemu(isa: str) -> bytes:
    ref = subprocess.run([qemu_binary(isa), str(bin_path(isa, "threadwait"))], env=ENV,
                         capture_output=True, timeout=60)
    assert (ref.returncode, ref.stdout.decode()) == (0, EXPECTED)  # what the program means
    return ref.stdout


@pytest.mark.oracle
@pytest.mark.parametrize("isa", UNTRACED)
def test_threadwait_as_qemu(isa: str, tmp_path: Path) -> None:
    """Every step as under qemu-user: while one thread waits in poll/select/wait4/waitid,
    the others run (one of them makes what it waits for)."""
    expected = _qemu(isa)
    ours = run_emutrace("run", "--timeout", "60", bin_path(isa, "threadwait"), cwd=tmp_path,
                        timeout=120)
    assert (ours.returncode, ours.stdout) == (0, expected), ours.stderr.decode()[-400:]


def _threads(text: str, durations: bool = False) -> list[str]:
    """A trace file's sections, one per thread, values aside (pids differ from run to
    run) and durations too unless asked for (the backends count the instruction that
    ends the process differently): the calls and returns, in order."""
    calls = [re.sub(r"\([^()]*\)| = [^;]*(?=;)", "", line if durations else
                    line.split("|", 1)[1]) if "|" in line else line
             for line in text.splitlines()]
    return "\n".join(calls).split("# thread ")[1:]


def _traced(isa: str, backend: str, where: Path,
            durations: bool = False) -> tuple[list[str], list[list[str]]]:
    """The process's trace per thread, and each forked child's (in the order of their
    traces, which does not depend on the pid)."""
    where.mkdir()
    out = where / "trace"
    ours = run_emutrace("run", "--backend", backend, "--timeout", "60", "-o", out,
                        bin_path(isa, "threadwait"), cwd=where, timeout=120)
    assert (ours.returncode, ours.stdout) == (0, _qemu(isa)), ours.stderr[-400:]
    children = sorted(_threads(p.read_text(), durations) for p in where.glob("trace.*"))
    return _threads(out.read_text(), durations), children


@pytest.mark.oracle
@pytest.mark.parametrize("isa", TRACED)
def test_threadwait_traced(isa: str, tmp_path: Path) -> None:
    """stdout as under qemu-user (these ISAs' share of test_threadwait_as_qemu), and int3
    traces every thread as step does: the same calls and returns per thread (main, A, B,
    the two C threads and D), and in each forked child."""
    int3, int3_children = _traced(isa, "int3", tmp_path / "int3")
    step, step_children = _traced(isa, "step", tmp_path / "step")
    assert len(int3) == 6 and len(int3_children) == 2
    assert "poller" in int3[1] and "writer" in int3[2] and "feeder" in int3[3]
    assert "bulk_writer" in int3[5]
    for n, (ours, truth) in enumerate(zip(int3, step, strict=True)):
        assert ours == truth, f"thread {n}: int3 != step"
    assert int3_children == step_children


@pytest.mark.oracle
def test_threadwait_rerun_is_the_same(tmp_path: Path) -> None:
    """Two int3 runs give the same trace, every duration included (values aside: the
    pids): every switch falls at the same instruction, whatever the host's timing of
    the children's exits and the pipes."""
    first = _traced("x86_64", "int3", tmp_path / "first", durations=True)
    second = _traced("x86_64", "int3", tmp_path / "second", durations=True)
    assert len(first[0]) == 6 and first == second


# ---------------------------------------------------------------- the scheduler alone
def _host_wait(sched: Scheduler, tid: int, fds: dict[int, int], deadline: int) -> None:
    sched.current = sched.threads[tid]
    sched.block(Wait("host", deadline=deadline, fds=fds, retry=lambda: 7))


def test_host_wait_ends_when_ready_or_timed_out() -> None:
    """A thread waiting on a host descriptor is passed over while nothing is ready and
    others can run; it runs (its call made again) once the descriptor is ready, or once
    the scheduler's clock has passed its timeout (the call made again as timed out)."""
    sched = Scheduler(FakeKernel(), 100)  # type: ignore[arg-type]
    sched.create(None, [])
    read_end, write_end = os.pipe()
    try:
        events = {read_end: select.POLLIN}
        _host_wait(sched, 101, events, 5000)
        main = sched.threads[100]
        assert sched._pick(main) is main  # nothing to read: the other thread runs
        sched.clock = 5000  # its quanta moved the clock to the deadline
        waiter = sched._pick(main)
        assert waiter.tid == 101 and waiter.expired and waiter.retry is not None

        waiter.retry, waiter.expired = None, False
        _host_wait(sched, 101, events, NEVER)
        assert sched._pick(main) is main
        os.write(write_end, b"x")
        waiter = sched._pick(main)
        assert waiter.tid == 101 and not waiter.expired and waiter.retry is not None
    finally:
        os.close(read_end)
        os.close(write_end)


def test_would_block_carries_the_timeout() -> None:
    """block_on_host puts the call's timeout on the scheduler's clock (none: NEVER)."""
    sched = Scheduler(FakeKernel(), 100)  # type: ignore[arg-type]
    sched.create(None, [])
    sched.clock = 1000
    sched.block_on_host(WouldBlock({}, timeout_ns=250), lambda: 0)
    assert sched.threads[100].wait is not None
    assert sched.threads[100].wait.deadline == 1250
    sched.current = sched.threads[101]
    sched.block_on_host(WouldBlock({3: select.POLLIN}), lambda: 0)
    assert sched.threads[101].wait is not None
    assert sched.threads[101].wait.deadline == NEVER


class _Broken:
    def __init__(self) -> None:
        self.broken = 0

    def pipe_broken(self) -> None:
        self.broken += 1


def test_pipe_write_waits_for_room_then_finishes() -> None:
    """A write larger than the pipe: what fits goes at once, never a host write that
    waits; at a full pipe WouldBlock asks for POLLOUT with the rest as `resume`, which
    returns the whole count (one blocking write(2)).  The reader gone after a part: that
    part's count, and SIGPIPE (pipe_write.py, fs/pipe.c pipe_write)."""
    k = _Broken()
    read_end, write_end = os.pipe()
    try:
        data = bytes(range(256)) * 400  # 102400 bytes: more than the 64 KiB pipe
        with pytest.raises(WouldBlock) as full:
            write_pipe(k, write_end, data)  # type: ignore[arg-type]
        assert full.value.fds == {write_end: select.POLLOUT} and full.value.resume
        got = b""
        while len(got) < 65536:
            got += os.read(read_end, 65536 - len(got))
        assert full.value.resume() == len(data)
        got += os.read(read_end, len(data))
        assert got == data

        with pytest.raises(WouldBlock) as full:
            write_pipe(k, write_end, data)  # type: ignore[arg-type]
        os.close(read_end)
        read_end = -1
        assert full.value.resume is not None
        assert 0 < full.value.resume() < len(data) and k.broken == 1
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)


class _Parent:
    def __init__(self, pid: int) -> None:
        self.children = {pid}
        self.pidfds: dict[int, int] = {}


def test_child_wait_sleeps_on_the_pidfd() -> None:
    """wait4/waitid's host wait (child_wait.py): the child's pidfd becomes readable when
    it exits and the probe then says ready, without reaping it (the host's waitpid still
    gets it); a wait for stops only has no pidfd to watch (a pidfd says only "exited")."""
    child = subprocess.Popen(["sleep", "0.2"])
    k = _Parent(child.pid)
    try:
        event = child_event(k, *wait4_target(child.pid), os.WEXITED)  # type: ignore[arg-type]
        assert event.probe is not None and not event.probe()
        assert list(event.fds) == [k.pidfds[child.pid]]
        poller = select.poll()
        poller.register(k.pidfds[child.pid], select.POLLIN)
        assert poller.poll(10_000)  # woken by the exit, not by a timeout
        assert event.probe()
        assert not child_event(k, os.P_PID, child.pid, os.WSTOPPED).fds  # type: ignore[arg-type]
        assert child.wait(timeout=10) == 0  # not reaped by the probe
        reaped(k, child.pid)  # type: ignore[arg-type]
        assert not k.pidfds and not k.children
    finally:
        child.kill()
        child.wait()


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ["riscv64"])
def test_a_sleeper_wakes_while_another_thread_spins(isa: str, tmp_path: Path) -> None:
    """`threadwait sleep`: thread S sleeps 2 ms, then sets the flag main spins on with no
    system call.  The scheduler's clock passes S's deadline while main's quanta run, and
    S wakes then (before, a deadline was looked at only when every thread waited: the
    run hung).  Needs preemption (not on MIPS: test_threads' spin test is its xfail)."""
    program = bin_path(isa, "threadwait")
    ref = subprocess.run([qemu_binary(isa), str(program), "sleep"], capture_output=True,
                         timeout=60, env=ENV)
    assert ref.stdout == b"main: spun until the sleeper woke; sleeper exit 5\n"
    ours = run_emutrace("run", "--timeout", "60", program, "sleep", cwd=tmp_path,
                        timeout=120)
    assert (ours.returncode, ours.stdout) == (0, ref.stdout), ours.stderr.decode()[-400:]
