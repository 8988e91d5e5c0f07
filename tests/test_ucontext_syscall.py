"""ppc32's swapcontext system call (machine/linux/sys_ucontext.py), which that ISA's glibc
getcontext, setcontext and swapcontext make.  `testbins/ppc/ucregs` checks a round trip
itself: values GCC keeps in callee-saved GPRs and FPRs across swapcontext, a resumed
getcontext returning again, each context's own signal mask, and the size check's EINVAL.
Its output is compared with qemu-user's (the oracle).  ppc only: no other ISA's glibc makes
a ucontext system call (the other ISAs' contexts are the harness's, test_uftrace_conformance)."""

from __future__ import annotations

from .conftest import bin_path, run_emutrace, run_qemu


def test_swapcontext_round_trip_as_the_program_checks_it() -> None:
    program = bin_path("ppc", "ucregs")
    oracle = run_qemu("ppc", program)
    assert oracle.returncode == 0, oracle.stdout.decode()
    done = run_emutrace("run", program)
    assert done.stderr.decode() == ""
    assert done.returncode == 0
    assert done.stdout == oracle.stdout
    assert done.stdout.decode().splitlines()[-1] == "ok"
