"""The system calls real programs make (sysinfo, getrusage, times, process
groups, socket calls on non-sockets, xattrs, TCGETS, /dev/tty, poll/select/ppoll/pselect,
nanosleep, clock_nanosleep, statx, prlimit64) answer as under qemu-user, on all ten ISAs.
`realcalls` prints each result with its errno name; it runs in a new session (no
controlling terminal: /dev/tty is ENXIO) with stdin a pipe (TCGETS is ENOTTY)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ENV, ISAS, bin_path, qemu_binary


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=ENV, input=b"", capture_output=True,
                          timeout=120, start_new_session=True)


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_real_program_calls_as_qemu(isa: str, tmp_path: Path) -> None:
    program = str(bin_path(isa, "realcalls"))
    ref = run([qemu_binary(isa), program], tmp_path)
    assert ref.returncode == 0, ref.stderr
    ours = run([sys.executable, "-m", "emutrace", "run", "--backend", "none", program],
               tmp_path)
    assert ours.stderr.decode() == ""  # no "unsupported syscall" warning
    # "sysinfo sane": on a 32-bit guest qemu-user copies the host's byte counts into the
    # 32-bit fields without Linux's mem_unit scaling (kernel/sys.c do_sysinfo), so its line
    # depends on how much memory the host has free at that moment; the line's own
    # invariants (a power-of-two mem_unit, freeram <= totalram, ...) are the oracle there
    sane = "sysinfo sane = 1\n"
    assert sane in ours.stdout.decode()
    assert _without_sanity(ours.stdout.decode()) == _without_sanity(ref.stdout.decode())
    assert ours.returncode == 0
    for line in ("getpeername(0) = -1 ENOTSOCK", "tcgetattr(0) = -1 ENOTTY",
                 "open /dev/tty = -1 ENXIO", "lgetxattr missing = -1 ENODATA",
                 "revents = 0 0x20 0", "select bad fd = -1 EBADF"):
        assert line in ref.stdout.decode()  # the oracle says what the issue says


def _without_sanity(text: str) -> str:
    return "".join(line for line in text.splitlines(True)
                   if not line.startswith("sysinfo sane = "))
