"""ITIMER_PROF and ITIMER_VIRTUAL (emutrace/machine/linux/cpu_timers.py: in guest-
instruction time): `proftimer prof|virtual` arms the timer at 10 ms, spins without a
system call until its handler has run three times, reads the timer back and disarms it
(testbins/src/proftimer.c).  The oracle is the same program under qemu-user and, for
x86_64 and i386, natively; an ISA whose capability table says the timers cannot expire
(`cpu_timers`) is a strict xfail (the program spins until --timeout)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from emutrace.isa.base import Cap
from emutrace.machine.linux.cpu_timers import CpuTimers

from .conftest import ENV, ISAS, bin_path, isa_params, qemu_binary, run_emutrace

NATIVE = ("x86_64", "i386")


@pytest.mark.oracle
@pytest.mark.parametrize("which", ["prof", "virtual"])
@pytest.mark.parametrize("isa", isa_params(Cap.CPU_TIMERS))
def test_cpu_time_timer_signals_a_spinning_program(isa: str, which: str,
                                                    tmp_path: Path) -> None:
    path = str(bin_path(isa, "proftimer"))
    oracles = [subprocess.run([qemu_binary(isa), path, which], env=ENV, capture_output=True,
                              timeout=120)]
    if isa in NATIVE:
        oracles.append(subprocess.run([path, which], env=ENV, capture_output=True,
                                      timeout=120))
    for ref in oracles:
        assert ref.returncode == 0, ref.stderr
        assert ref.stdout == oracles[0].stdout
    got = run_emutrace("run", "--timeout", "120", path, which, cwd=tmp_path)
    assert (got.returncode, got.stdout) == (0, oracles[0].stdout), got.stderr.decode()


def test_expiry_reloads_the_interval_or_stops() -> None:
    """setitimer(2): at expiry a timer reloads its interval, or stops (interval 0); one
    signal per expiry, to the one listener."""
    timers = CpuTimers()
    prof, virtual = timers.timers["ITIMER_PROF"], timers.timers["ITIMER_VIRTUAL"]
    prof.value, prof.interval = 5, 3
    virtual.value = 7
    fired: list[list[str]] = []
    timers.on_expiry = fired.append
    assert timers.next_due() == 5
    timers.advance(5)
    assert fired == [["SIGPROF"]] and (prof.value, virtual.value) == (3, 2)
    timers.advance(2)
    assert fired[1:] == [["SIGVTALRM"]] and (prof.value, virtual.value) == (1, 0)
    timers.advance(1)
    assert fired[2:] == [["SIGPROF"]] and prof.value == 3 and timers.next_due() == 3


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_execve_keeps_the_timers(isa: str, tmp_path: Path) -> None:
    """`proftimer exec` arms both timers at 10 s and execs itself; the new image reads them
    running, with their interval (execve(2)).  The oracle is the same program run natively
    on this host (x86_64; qemu-user cannot be one here: its execve of /proc/self/exe is
    passed to the host kernel, which refuses a foreign ELF without binfmt_misc)."""
    native = subprocess.run([str(bin_path("x86_64", "proftimer")), "exec"], env=ENV,
                            capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    assert native.stdout.count(b"interval=20000us running=1") == 2
    got = run_emutrace("run", bin_path(isa, "proftimer"), "exec", cwd=tmp_path)
    assert (got.returncode, got.stdout) == (0, native.stdout), got.stderr.decode()


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_fork_child_starts_without_the_timers(isa: str, tmp_path: Path) -> None:
    """`proftimer fork`: ITIMER_PROF runs in the parent, the forked child's is disarmed
    (fork(2)), as qemu-user (and the host kernel, natively on x86) shows."""
    path = str(bin_path(isa, "proftimer"))
    ref = subprocess.run([qemu_binary(isa), path, "fork"], env=ENV, capture_output=True,
                         timeout=120)
    assert ref.returncode == 0, ref.stderr
    assert ref.stdout == (b"child: interval=0us running=0\n"
                          b"parent: interval=20000us running=1\n")
    if isa in NATIVE:
        assert subprocess.run([path, "fork"], env=ENV, capture_output=True,
                              timeout=60).stdout == ref.stdout
    got = run_emutrace("run", path, "fork", cwd=tmp_path)
    assert (got.returncode, got.stdout) == (0, ref.stdout), got.stderr.decode()
