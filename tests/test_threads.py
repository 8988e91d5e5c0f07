"""Threads under the deterministic scheduler (machine/linux/threads.py).

`threads` (testbins/src/threads.c): three pthreads wait on a condition variable, add
their share under a mutex (yielding while they hold it, so the others block on its
futex) and return exit codes that main reads with pthread_join; main's timed wait on
a condition variable nobody signals times out first; a __thread variable checks TLS.
Oracles: qemu-user's stdout; the program's own -finstrument-functions record, written
under qemu-user with each line's thread id (threads ranked by tid: creation order, the
main thread first), is each thread's call sequence."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from emutrace.elf import load_image
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.threads import Deadlock, Scheduler, Wait
from emutrace.session import Process, RunConfig, RunResult
from emutrace.trace.canonical import canonical_text, instr_records, parse_instr_record
from emutrace.trace.events import Entry
from emutrace.trace.format import ReplayOptions, replay_text

from .conftest import ENV, ISAS, bin_path, qemu_binary, run_emutrace
from .test_uftrace_write import UFTRACE, replay_records

EXPECTED = ("timedwait ETIMEDOUT\nthread 0 exit 1\nthread 1 exit 11\nthread 2 exit 21\n"
            "total=1798 main tls=42\n")
PROGRAM_FUNCS = {"main", "worker", "wait_for_go", "work", "add"}


def _oracle_by_thread(record: str) -> list[list[tuple[str, int]]]:
    """The self-record's events per thread, threads in tid order (creation order)."""
    by_tid: dict[int, list[tuple[str, int]]] = {}
    for line in record.splitlines():
        tid, rest = line.split(" ", 1)
        by_tid.setdefault(int(tid), []).extend(parse_instr_record(rest))
    return [by_tid[t] for t in sorted(by_tid)]


def _traced(isa: str, backend: str, cleanup: str = "lazy") -> RunResult:
    config = RunConfig(str(bin_path(isa, "threads")), backend=backend, cleanup=cleanup,
                       env={})
    result = Process(config, warn=lambda _m: None).run()
    assert result.exit_code == 0
    return result


def _calls_only(text: str) -> list[str]:
    """The trace's lines without the duration column."""
    return [line.split(" | ", 1)[-1] for line in text.splitlines()]


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_thread_traces(isa: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """stdout as under qemu-user; per thread: int3 = step = int3 strict, a rerun's trace has
    the same calls and returns in the same order (values and durations aside, since the
    program reads the host's clock), and each thread's calls of the program's functions
    are those of its own record (under qemu-user)."""
    record = tmp_path / "record"
    env = {**ENV, "CALLTRACE_OUT": str(record)}
    ref = subprocess.run([qemu_binary(isa), str(bin_path(isa, "threads"))], env=env,
                         check=True, capture_output=True, timeout=120)
    assert ref.stdout.decode() == EXPECTED  # the oracle says what the program means
    oracle = _oracle_by_thread(record.read_text())
    assert len(oracle) == 4

    capfd.readouterr()
    first = _traced(isa, "int3")
    assert capfd.readouterr().out == EXPECTED  # the guest's stdout, as under qemu-user
    second, step = _traced(isa, "int3"), _traced(isa, "step")
    strict = _traced(isa, "int3", "strict")  # cleanup per thread at every switch
    image = first.image

    def name(addr: int) -> str:
        return image.symbolize(image.isa.code_address(addr)).split("+")[0]

    # values aside: the program reads the host's clock (its timed wait's deadline)
    layout = ReplayOptions(show_args=False, show_retval=False)
    text = replay_text(first.records, name, layout)
    # rerun: every call and return of every thread in the same order; durations aside as
    # well, since the timed wait's clock-dependent path may take a few instructions more or
    # less (main's duration differed by 3 in one full run)
    assert _calls_only(text) == _calls_only(replay_text(second.records, name, layout))
    assert [f"# thread {n}" for n in range(4)] == [
        line for line in text.splitlines() if line.startswith("# thread")]
    for n, events in enumerate(oracle):
        ours = [r for r in first.records if r.tid == n]
        # every function, the same calls and returns (durations aside: the backends
        # count the instruction that ends the process differently)
        assert canonical_text(ours, name) == canonical_text(
            [r for r in step.records if r.tid == n], name), f"thread {n}: int3 != step"
        assert canonical_text(ours, name) == canonical_text(
            [r for r in strict.records if r.tid == n], name), f"thread {n}: lazy != strict"
        assert canonical_text(ours, name, PROGRAM_FUNCS) == canonical_text(
            instr_records(events), name, PROGRAM_FUNCS), f"thread {n}"


@pytest.mark.oracle
def test_deadlock_ends_the_run(tmp_path: Path) -> None:
    """`threads deadlock`: two threads take two mutexes in opposite orders.  Under
    qemu-user it hangs (ended by timeout(1) here); emutrace ends it at once with one line
    naming each waiting thread, exit 124 (a hang, as --timeout reports one)."""
    program = bin_path("mips", "threads")
    hang = subprocess.run(["timeout", "1", qemu_binary("mips"), str(program), "deadlock"],
                          capture_output=True, timeout=60, env=ENV)
    assert hang.returncode == 124  # timeout(1): still running after 1 s
    ours = run_emutrace("run", program, "deadlock", cwd=tmp_path)
    assert ours.returncode == 124
    assert ours.stdout == b""
    line = ours.stderr.decode().splitlines()[0]
    assert re.fullmatch(r"emutrace: deadlock: every thread waits and none can wake another "
                        r"\(thread (\d+) in futex at 0x[0-9a-f]+, thread (\d+) in futex at "
                        r"0x[0-9a-f]+\)", line), line


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ["mips"])
def test_read_of_an_empty_pipe_lets_the_writer_run(isa: str, tmp_path: Path) -> None:
    """`threads pipe`: main reads a pipe that a thread it created writes later.  The read
    finds the pipe empty: main waits, the writer runs, main's read is made again and gets
    the data (as under qemu-user); a host read there would have blocked every thread."""
    program = bin_path(isa, "threads")
    ref = subprocess.run([qemu_binary(isa), str(program), "pipe"], capture_output=True,
                         timeout=60, env=ENV)
    assert ref.stdout == b"read 16 bytes: through the pipe; writer exit 0\n"
    ours = run_emutrace("run", program, "pipe", cwd=tmp_path, timeout=60)
    assert (ours.returncode, ours.stdout) == (0, ref.stdout)


def preemption_gap(isa: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capabilities[Cap.THREAD_PREEMPTION]
    return [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]


@pytest.mark.oracle
@pytest.mark.parametrize("isa", [pytest.param(i, marks=preemption_gap(i)) for i in ISAS])
def test_a_spinning_thread_is_preempted(isa: str, tmp_path: Path) -> None:
    """`threads spin`: main spins with no system call until a thread it created has
    counted to a million; only the quantum gives that thread the CPU (as under qemu-user,
    where both run at once)."""
    program = bin_path(isa, "threads")
    ref = subprocess.run([qemu_binary(isa), str(program), "spin"], capture_output=True,
                         timeout=60, env=ENV)
    assert ref.stdout == b"spun until the flag; counter exit 1000\n"
    # where the table declares the gap, main spins until the timeout: a short one shows it
    works = by_name(isa).capabilities[Cap.THREAD_PREEMPTION].works
    ours = run_emutrace("run", "--timeout", "30" if works else "5", program, "spin",
                        cwd=tmp_path)
    assert (ours.returncode, ours.stdout) == (0, ref.stdout)


# ---------------------------------------------------------------- the scheduler alone
class FakeCpu:
    def __init__(self) -> None:
        self.stops = 0
        self.pc = 0x1000

    def stop(self) -> None:
        self.stops += 1


class FakeKernel:
    def __init__(self) -> None:
        self.cpu = FakeCpu()
        self.isa = by_name("x86_64")
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> bool:
        self.slept.append(seconds)
        return True


def _scheduler(threads: int) -> Scheduler:
    sched = Scheduler(FakeKernel(), 100)  # type: ignore[arg-type]
    for _ in range(threads - 1):
        sched.create(None, [])
    return sched


def test_futex_wake_order_and_bitsets() -> None:
    """Waiters are woken first come, first served, only where the bitsets share a bit;
    a woken thread's call returns 0 (threads.py)."""
    sched = _scheduler(4)
    for tid, bits in ((101, 1), (102, 2), (103, 3)):
        sched.current = sched.threads[tid]
        sched.block(Wait("futex", 0x40, bits))
    assert [t.tid for t in sched.waiters(0x40)] == [101, 102, 103]
    assert sched.wake(0x40, 5, bitset=2) == 2
    assert sched.threads[101].wait is not None
    assert sched.threads[102].wait is None and sched.threads[102].result == 0
    assert sched.wake(0x40, 1) == 1 and sched.threads[101].wait is None


def test_deadline_and_deadlock() -> None:
    """When every thread waits, the clock jumps to the earliest deadline (that wait ends
    with its timeout result); with no deadline left, the run ends as a deadlock."""
    sched = _scheduler(2)
    sched.current = sched.threads[101]
    sched.block(Wait("futex", 0x40, deadline=5000, timeout_result=-110))
    sched.current = sched.threads[100]
    sched.block(Wait("futex", 0x80))
    sched._advance_clock()
    assert sched.clock == 5000 and sched.threads[101].result == -110
    sched.current = sched.threads[101]
    sched.block(Wait("futex", 0x40))
    with pytest.raises(Deadlock, match="thread 100 in futex"):
        sched._advance_clock()


def test_no_thread_no_preemption() -> None:
    """A program that never makes a thread runs as before: emu_start's count is the
    --max-insns budget (0: unbounded), not the quantum."""
    sched = _scheduler(1)
    assert sched.count(0) == 0 and sched.count(77) == 77
    assert sched.resume(0x2000, 0xFFF0, 0) is None


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ["s390x"])
def test_recording_has_one_task_per_thread(isa: str, tmp_path: Path) -> None:
    """`emutrace record` writes one `<task>.dat` per thread (task 1 the main thread, 1 + n
    the n-th created); Debian's uftrace reads four tasks, and in each task's replay the
    program's functions are entered as in that thread's own record under qemu-user."""
    program = bin_path(isa, "threads")
    record = tmp_path / "record"
    subprocess.run([qemu_binary(isa), str(program)], check=True, capture_output=True,
                   timeout=120, env={**ENV, "CALLTRACE_OUT": str(record)})
    oracle = _oracle_by_thread(record.read_text())
    data = tmp_path / "data"
    ours = run_emutrace("record", "-d", data, program, cwd=tmp_path)
    assert ours.returncode == 0, ours.stderr.decode()[-500:]
    assert sorted(p.name for p in data.glob("*.dat")) == ["1.dat", "2.dat", "3.dat", "4.dat"]
    info = subprocess.run([UFTRACE, "info", "-d", str(data)], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    assert "number of tasks     : 4" in info
    image = load_image(str(program))
    for n, events in enumerate(oracle):
        replay = subprocess.run([UFTRACE, "replay", "--no-pager", "-d", str(data),
                                 "--tid", str(1 + n)], capture_output=True, text=True,
                                timeout=60, check=True).stdout
        records, names = replay_records(replay)
        theirs = [names[r.func] for r in records if isinstance(r, Entry)]
        expected = [image.symbolize(addr).split("+")[0] for kind, addr in events
                    if kind == ">"]
        assert expected[0] == ("main" if n == 0 else "worker")
        assert [f for f in theirs if f in PROGRAM_FUNCS] == expected, f"task {1 + n}"


# ---------------------------------------------------------------- futex(2), call by call
def _kernel() -> tuple[object, int]:
    """A loaded (not run) x86_64 `threads` process and a scratch word on its stack."""
    proc = Process(RunConfig(str(bin_path("x86_64", "threads")), env={}),
                   warn=lambda _m: None)
    sp = proc.cpu.reg_read("rsp")
    return proc.kernel, (sp - 0x400) & ~0xF


def test_futex_calls_as_the_man_page() -> None:
    """futex(2)'s results, each as the man page states it: a wait on a changed word is
    EAGAIN, a misaligned word EINVAL, a wake with nobody waiting 0, CMP_REQUEUE with a
    changed word EAGAIN, WAKE_OP stores op(old, oparg) and PI operations are ENOSYS here;
    a waiter is woken by WAKE (1 woken) and moved by CMP_REQUEUE (1 requeued)."""
    k, word = _kernel()
    assert isinstance(k, LinuxKernel)
    nr = k.abi.syscalls["futex"]
    c = k.abi.constants

    def futex(*args: int) -> int:
        return k.call(nr, (*args, 0, 0, 0, 0)[:6])

    def errno(name: str) -> int:
        return -k.abi.errno[name]

    k.write(word, (5).to_bytes(4, "little"))
    assert futex(word, 128 | 0, 6) == errno("EAGAIN")  # FUTEX_WAIT_PRIVATE, *word != 6
    assert futex(word + 1, 1, 1) == errno("EINVAL")  # not 4-byte aligned
    assert futex(word, 1, 1) == 0  # FUTEX_WAKE: nobody waits
    assert futex(word, 4, 1, 1, word + 4, 7) == errno("EAGAIN")  # CMP_REQUEUE, *word != 7
    # FUTEX_WAKE_OP: op ADD (1), oparg 3, cmp EQ (0) with 5: *uaddr2 = 5 + 3
    k.write(word + 4, (5).to_bytes(4, "little"))
    assert futex(word, 5, 1, 1, word + 4, (1 << 28) | (0 << 24) | (3 << 12) | 5) == 0
    assert int.from_bytes(k.read(word + 4, 4), "little") == 8
    assert futex(word, 6, 0) == errno("ENOSYS")  # FUTEX_LOCK_PI

    flags = c["CLONE_VM"] | c["CLONE_THREAD"] | c["CLONE_SIGHAND"]
    tid = k.call(k.abi.syscalls["clone"], (flags, 0, 0, 0, 0, 0))
    assert tid == k.threads.main_tid + 1 and k.threads.active
    assert futex(word, 0, 5) == 0  # FUTEX_WAIT on *word == 5: the main thread waits
    main = k.threads.current
    assert main.wait is not None and main.wait.futex == word
    k.threads.current = k.threads.threads[tid]
    assert futex(word, 4, 0, 1, word + 4, 5) == 1  # CMP_REQUEUE: 0 woken, 1 moved
    assert main.wait.futex == word + 4
    assert futex(word + 4, 1, 1) == 1 and main.wait is None and main.result == 0
