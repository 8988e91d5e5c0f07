"""The CI slice of the fuzz harness tools/fuzz.py (the long run and its last result
are in the README, section "Fuzz harness").  Hypothesis drives the harness's own case
generators: system calls with hostile arguments in-process, and mutated programs in forked
children (a crash of Python, a hang past the budget, an internal error or a traceback is a
finding), once per backend."""

from __future__ import annotations

import faulthandler
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools import fuzz

SLICE = settings(max_examples=1000, deadline=None, database=None, derandomize=True,
                 suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[fuzz.SyscallTarget]:
    cwd = os.getcwd()
    t = fuzz.SyscallTarget(tmp_path_factory.mktemp("fuzz"))
    yield t
    t.close()
    os.chdir(cwd)


@SLICE
@given(st.data())
def test_every_syscall_with_hostile_arguments(target: fuzz.SyscallTarget,
                                              data: st.DataObject) -> None:
    """Any call the x86_64 table serves, six words that break things: an int (a result
    or -errno) or the guest's end, never an exception, within the hang budget."""
    name = data.draw(st.sampled_from(target.names))
    word = st.one_of(st.sampled_from(fuzz.INTERESTING + target.pointers()),
                     st.integers(0, (1 << 64) - 1))
    target.run(name, tuple(data.draw(word) for _ in range(6)))


@pytest.mark.parametrize("isa", ["i386", "arm", "s390x"])
def test_other_isas_syscalls_with_hostile_arguments(tmp_path: Path, isa: str) -> None:
    """The same, 300 seeded cases on a 32-bit, an EABI and a big-endian ISA (their 64-bit
    argument pairs and private calls differ): found i386's set_thread_area of an unmapped
    user_desc, an exception until ISA-private handlers' faults became EFAULT."""
    cwd = os.getcwd()
    target = fuzz.SyscallTarget(tmp_path, isa)
    os.chdir(cwd)
    for i in range(300):
        target.run(*target.case(random.Random(f"ci:{isa}:{i}")))
    k = target.kernel
    # set_thread_area(2): "EFAULT u_info is an invalid pointer" (man 2 set_thread_area)
    if "set_thread_area" in k.abi.syscalls and isa == "i386":
        assert k.call(k.abi.syscalls["set_thread_area"], (0xDEAD0000,)) == -k.errno("EFAULT")
    target.close()


def test_huge_write_costs_no_memory(tmp_path: Path) -> None:
    """write(fd, buf, 2^40) with a 16 KiB buffer: the bytes that are mapped, never a 2 GiB
    host buffer (the kernel moves data IO_CHUNK at a time after checking the mapping)."""
    cwd = os.getcwd()
    target = fuzz.SyscallTarget(tmp_path)
    os.chdir(cwd)
    k = target.kernel
    nr = k.abi.syscalls["write"]
    assert k.call(nr, (1, target.buf, 1 << 40)) == 0x4000  # the mapped part: a short write
    assert k.call(nr, (1, 0xDEAD0000, 10)) == -k.errno("EFAULT")
    target.close()


def test_fixed_mapping_past_the_user_space(tmp_path: Path) -> None:
    """Found by the long run (seed 1, cases 491752, 604836): MAP_FIXED at 2^64 - 4 KiB was
    Unicorn's UC_ERR_ARG (an exception).  The host kernel (the oracle, asked the same) says
    ENOMEM; a fixed mapping of the NULL pages is EPERM (vm.mmap_min_addr, unprivileged)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    fixed_anon = 0x10 | 0x02 | 0x20  # MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS (x86_64)
    top = (1 << 64) - 4096
    assert libc.mmap(top, 4 << 20, 1, fixed_anon, -1, 0) == (1 << 64) - 1  # MAP_FAILED
    host_errno = ctypes.get_errno()
    cwd = os.getcwd()
    target = fuzz.SyscallTarget(tmp_path)
    os.chdir(cwd)
    k = target.kernel
    nr = k.abi.syscalls["mmap"]
    assert k.call(nr, (top, 4 << 20, 1, fixed_anon, (1 << 64) - 1, 0)) == -host_errno
    assert k.call(nr, (0, 4096, 1, fixed_anon, (1 << 64) - 1, 0)) == -k.errno("EPERM")
    target.close()


@pytest.mark.parametrize("backend", fuzz.BACKENDS)
def test_mutated_program(tmp_path: Path, backend: str) -> None:
    """Three mutants per backend, run end to end in a forked child with the harness's
    budgets: a documented exit code, at most one line of emutrace's own."""
    base = fuzz.PROGRAM.read_bytes()
    for i in range(3):
        blob = fuzz.mutate(base, random.Random(f"ci:{backend}:{i}"))
        fuzz.isolated(lambda b=blob: fuzz.check_elf(b, backend, tmp_path),  # type: ignore[misc]
                      fuzz.RUN_SECONDS + fuzz.HANG_SECONDS)


def _crash_quietly() -> None:
    """Die of SIGSEGV without pytest's faulthandler printing "Fatal Python error" (the
    child inherits it): a deliberate crash must not read like one in CI's log."""
    faulthandler.disable()
    os.kill(os.getpid(), signal.SIGSEGV)


def test_harness_reports_a_crash_and_a_hang() -> None:
    """The harness itself can fail: a child killed by a signal and one past its budget
    are findings (so '0 crashes, 0 hangs' in the README means something)."""
    with pytest.raises(fuzz.Finding, match="crash"):
        fuzz.isolated(_crash_quietly, 5)
    with pytest.raises(fuzz.Finding, match="hang"):
        fuzz.isolated(lambda: __import__("time").sleep(30), 0.5)


def test_case_server_runs_cases_and_reports_a_dead_worker(tmp_path: Path) -> None:
    """The long run's fork server (one warm worker for many cases): cases hold, a worker
    killed by a signal is a crash finding and the next case gets a fresh worker, a case
    over its CPU budget is a hang finding."""
    base = fuzz.PROGRAM.read_bytes()
    server = fuzz.CaseServer(3, base, ("none", "int3"), tmp_path)
    server.run(0)
    server.run(1)
    first = server.pid
    os.kill(first, signal.SIGKILL)  # (SIGSEGV would make the worker's faulthandler print)
    os.waitid(os.P_PID, first, os.WEXITED | os.WNOWAIT)
    with pytest.raises(fuzz.Finding, match="crash"):
        server.run(2)
    server.run(3)
    assert server.pid not in (0, first)
    server.close()
    stingy = fuzz.CaseServer(3, base, ("none",), tmp_path, budget=1e-6, wall=60)
    with pytest.raises(fuzz.Finding, match="hang: .* of CPU"):
        stingy.run(0)
    stingy.close()


def test_found_by_the_long_run_dwarf_sibling_loop(tmp_path: Path) -> None:
    """Seed 31 case 88206 of the 10^5 run: a mutant whose DWARF sends iter_children round a
    loop ran forever before emulation (outside --timeout); it is unreadable DWARF now (one
    warning) and the case holds."""
    server = fuzz.CaseServer(31, fuzz.PROGRAM.read_bytes(), fuzz.BACKENDS, tmp_path)
    server.run(88206)
    server.close()


def test_found_by_the_long_run_deep_text_trace(tmp_path: Path) -> None:
    """Seed 32 case 65785 of the session-6 run: a mutant recursing ~10^5 deep until
    --max-insns; writing its text trace (two spaces of indentation per level: O(d^2), ~10^10
    bytes) ran past every budget after the guest had stopped.  The indentation stops at
    format.MAX_INDENT levels now and the case holds."""
    server = fuzz.CaseServer(32, fuzz.PROGRAM.read_bytes(), fuzz.BACKENDS, tmp_path)
    server.run(65785)
    server.close()
