"""The fuzz harness (first part): mutated ELF files and hostile system-call arguments.
Every case must end as a Stop or an EmutraceError (one line, a documented exit code) —
never another exception.

CI runs a short slice.  The long run (documented in the README):

    EMUTRACE_FUZZ_EXAMPLES=100000 PYTHONPATH=$PWD python -m pytest -p no:xdist \\
        tests/test_hardening_fuzz.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emutrace.errors import EXIT_INTERNAL, EmutraceError
from emutrace.session import Process, RunConfig

from .conftest import bin_path

EXAMPLES = int(os.environ.get("EMUTRACE_FUZZ_EXAMPLES", "0")) or None
SEED = bin_path("x86_64", "hard_syscalls").read_bytes()
HEADERS = 0x40 + 56 * 16  # the ELF header and the program headers that follow it
def fuzz(short: int) -> settings:
    """`short` examples in CI (a fixed, derandomized slice); EMUTRACE_FUZZ_EXAMPLES for more."""
    return settings(max_examples=EXAMPLES or short, deadline=None,
                    derandomize=EXAMPLES is None, suppress_health_check=list(HealthCheck))


def _run(program: Path, cwd: Path) -> None:
    here = os.getcwd()
    os.chdir(cwd)
    try:
        Process(RunConfig(program=str(program), max_insns=200_000, timeout=10,
                          allow_write=[str(cwd)], max_memory=256 << 20,
                          env={"PATH": "/bin"}), warn=lambda _m: None).run()
    except EmutraceError as e:
        assert e.exit_code != EXIT_INTERNAL, e.message
        assert "\n" not in e.message
    finally:
        os.chdir(here)


@fuzz(20)
@given(edits=st.lists(st.tuples(st.integers(0, HEADERS - 1), st.integers(0, 255)),
                      min_size=1, max_size=8))
def test_mutated_elf_headers(edits: list[tuple[int, int]], tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fuzz")
    blob = bytearray(SEED)
    for at, value in edits:
        blob[at] = value
    program = tmp / "mutant"
    program.write_bytes(bytes(blob))
    _run(program, tmp)


WORDS = st.one_of(st.sampled_from([0, 1, 2, 3, -1 & (2**64 - 1), 2**31, 2**32, 2**40, 2**62,
                                   2**63, 2**64 - 4096, 0xDEAD0000]),
                  st.integers(0, 2**64 - 1))
# read-only-ish calls and descriptor calls: safe to aim at the host through the sandbox
NAMES = ["read", "write", "pread64", "lseek", "readv", "dup2", "fcntl", "ftruncate",
         "rt_sigprocmask", "rt_sigaction", "getrandom", "mmap", "munmap", "brk",
         "mprotect", "openat", "newfstatat", "getcwd", "ioctl", "clock_gettime", "uname"]


@fuzz(60)
@given(name=st.sampled_from(NAMES), args=st.lists(WORDS, min_size=6, max_size=6))
def test_syscall_arguments(name: str, args: list[int], tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    """A handler given any argument words returns a value or -errno; it never raises."""
    tmp = tmp_path_factory.mktemp("sys")
    here = os.getcwd()
    os.chdir(tmp)
    try:
        proc = Process(RunConfig(program=str(bin_path("x86_64", "hard_syscalls")),
                                 allow_write=[str(tmp)], max_memory=256 << 20),
                       warn=lambda _m: None)
        kernel = proc.kernel
        nr = kernel.abi.syscalls[name]
        result = kernel.call(nr, tuple(args))
        assert isinstance(result, int)
    finally:
        os.chdir(here)


@pytest.mark.parametrize("name", ["fork", "vfork", "clone"])
def test_embedded_run_never_forks_its_host(name: str) -> None:
    """A run embedded in another program (this test, the bench, the fuzz harness) gets
    EAGAIN from fork, vfork and clone: a host fork there would return into the embedding
    program twice (it once ran a pytest worker twice).  Only the `emutrace` command, whose
    child ends in os._exit, forks (tests/test_signals.py, tests/test_shells.py)."""
    proc = Process(RunConfig(program=str(bin_path("x86_64", "hard_syscalls"))),
                   warn=lambda _m: None)
    kernel = proc.kernel
    sigchld = kernel.abi.constants["SIGCHLD"]
    me = os.getpid()
    result = kernel.call(kernel.abi.syscalls[name], (sigchld, 0, 0, 0, 0, 0))
    assert os.getpid() == me
    assert result == -kernel.abi.errno["EAGAIN"]
