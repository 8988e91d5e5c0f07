"""Issue 11 item 5: the system calls real programs make (sysinfo, getrusage, times, process
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
    assert ours.stdout.decode() == ref.stdout.decode()
    assert ours.returncode == 0
    for line in ("getpeername(0) = -1 ENOTSOCK", "tcgetattr(0) = -1 ENOTTY",
                 "open /dev/tty = -1 ENXIO", "lgetxattr missing = -1 ENODATA",
                 "revents = 0 0x20 0", "select bad fd = -1 EBADF", "sysinfo sane = 1"):
        assert line in ref.stdout.decode()  # the oracle says what the issue says
