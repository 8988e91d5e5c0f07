"""System calls given hostile arguments and CPU faults end
as Linux ends them.  The oracle is the same static x86_64 program run natively on this
x86_64 Linux host."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

from .conftest import ENV, bin_path, run_emutrace


def test_hostile_syscall_arguments_as_native(tmp_path: Path) -> None:
    program = bin_path("x86_64", "hard_syscalls")
    native = subprocess.run([program], cwd=tmp_path, env=ENV, capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    got = run_emutrace("run", "--allow-write", tmp_path, program, cwd=tmp_path)
    assert got.stderr.decode() == ""  # no warning, no internal error
    assert got.returncode == 0
    assert got.stdout.decode() == native.stdout.decode()
    # the lines that were internal errors (70) or wrong results before the fix
    for line in ("write bad pointer = -1 EFAULT", "lseek 5 GiB = 5368709120",
                 "open 9999-byte path = -1 ENAMETOOLONG", "dup2 to -1 = -1 EBADF",
                 "raise ignored SIGUSR1 = 0", "SIGKILL blocked after blocking all = 0",
                 "SIGSTOP blocked after blocking all = 0"):
        assert line in got.stdout.decode()


def test_division_by_zero_is_sigfpe(tmp_path: Path) -> None:
    program = bin_path("x86_64", "hard_faults")
    native = subprocess.run([program, "div"], env=ENV, capture_output=True, timeout=60)
    assert native.returncode == -signal.SIGFPE
    for backend in ("none", "int3"):
        got = run_emutrace("run", "--backend", backend, program, "div", cwd=tmp_path)
        assert got.returncode == 128 + signal.SIGFPE, got.stderr
        assert "guest killed by SIGFPE" in got.stderr.decode()


def test_memory_requests_as_native(tmp_path: Path) -> None:
    """Items 2, 5, 7: 64 GiB mmap/brk → ENOMEM (native: this host has far less than 64 GiB
    of RAM + swap, overcommit heuristic), MAP_SHARED+PROT_WRITE of an O_RDONLY file → EACCES;
    a created file's set-user-ID/set-group-ID bits are stripped (a choice: native keeps them)."""
    program = bin_path("x86_64", "hard_memory")
    native = subprocess.run([program], cwd=tmp_path, env=ENV, capture_output=True, timeout=60)
    got = run_emutrace("run", "--allow-write", tmp_path, program, cwd=tmp_path)
    assert got.returncode == 0 and got.stderr.decode() == ""
    expected = native.stdout.decode().replace("mode = 6755", "mode = 755")
    assert got.stdout.decode() == expected
    assert "mmap 64 GiB = -1 ENOMEM" in expected  # the oracle says what the issue says


def test_max_memory_caps_a_malloc_loop(tmp_path: Path) -> None:
    got = run_emutrace("run", "--max-memory", "64M", bin_path("x86_64", "hard_memory"), "loop",
                       cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    mib = int(got.stdout.decode().split()[1])
    assert 32 <= mib < 64  # the image and stack take part of the 64 MiB


def test_file_calls_at_the_sandbox_edges_as_native(tmp_path: Path) -> None:
    """O_TMPFILE named through /proc/self/fd, metadata calls on descriptors, FIFOs by
    mknod, truncate, fsync, fchmodat(AT_SYMLINK_NOFOLLOW) of a link (machine/linux/
    sys_fsmeta.py): the same results as the program run natively."""
    program = bin_path("x86_64", "hard_files")
    native = subprocess.run([program], cwd=tmp_path, env=ENV, capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    assert "linkat fd = 0" in native.stdout.decode()
    got = run_emutrace("run", "--allow-write", tmp_path, program, cwd=tmp_path)
    assert (got.returncode, got.stderr.decode()) == (0, "")
    assert got.stdout.decode() == native.stdout.decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # quick to use up


def test_descriptors_used_up_as_native(tmp_path: Path) -> None:
    """A guest that opens descriptors until EMFILE gets exactly RLIMIT_NOFILE of them (the
    limit it reads: emutrace's own less a reserve for emutrace's files), and fork, the
    child's trace file (-o) and a recording still work; the same lines as natively (both
    started with a limit of 256)."""
    program = bin_path("x86_64", "hard_fds")
    native = subprocess.run([program], cwd=tmp_path, env=ENV, capture_output=True, timeout=60,
                            preexec_fn=_few_descriptors)
    assert native.returncode == 0, native.stderr
    assert "open at the limit = -1 EMFILE" in native.stdout.decode()
    assert "all numbers below the limit used = 1" in native.stdout.decode()
    for how in (("run", "--backend", "none"), ("run", "--backend", "int3", "-o", "t.txt"),
                ("record", "-d", "rec")):
        got = subprocess.run([sys.executable, "-m", "emutrace", *how, program], cwd=tmp_path,
                             env=ENV, capture_output=True, timeout=300,
                             preexec_fn=_few_descriptors)
        assert (got.returncode, got.stderr.decode()) == (0, ""), how
        assert got.stdout.decode() == native.stdout.decode(), how
    assert len(list(tmp_path.glob("t.txt.*"))) == 1  # the child's trace


def test_file_size_limit_as_native(tmp_path: Path) -> None:
    """RLIMIT_FSIZE set by the guest: writes cut at it, EFBIG and SIGXFSZ (ignored, caught,
    then the default action killing the process after an execve that kept the limit);
    ftruncate past it EFBIG.  emutrace's own process is not limited (the trace of the
    run is whole)."""
    program = bin_path("x86_64", "hard_fsize")
    native = subprocess.run([program], cwd=tmp_path, env=ENV, capture_output=True, timeout=60)
    assert native.returncode == -signal.SIGXFSZ, native.stderr
    assert "write 16 under a limit of 10 = 10" in native.stdout.decode()
    for how in (("--backend", "none"), ("--backend", "int3", "-o", "t.txt")):
        got = subprocess.run([sys.executable, "-m", "emutrace", "run", *how, program],
                             cwd=tmp_path, env=ENV, capture_output=True, timeout=300)
        assert got.returncode == 128 + signal.SIGXFSZ, got.stderr
        assert got.stdout.decode() == native.stdout.decode()
    assert (tmp_path / "t.txt.exec").stat().st_size > 10  # the trace is not limited
