"""/proc/self/exe is a guest path.  A program under the root is seen at its
path inside the root; one outside it (given relative or absolute) at `/` + its basename —
never a host path, never a relative one (glibc's _dl_get_origin asserts it is absolute)."""

from __future__ import annotations

import shutil
from pathlib import Path

from .conftest import BUSYBOX, run_emutrace

PROGRAM = BUSYBOX / "x86_64" / "busybox"


def test_exe_outside_root_relative_and_absolute(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for program in ("busybox", str(PROGRAM)):
        got = run_emutrace("run", "--root", root, "--allow-write", root, program,
                           "readlink", "/proc/self/exe", cwd=PROGRAM.parent)
        assert got.returncode == 0, got.stderr
        assert got.stdout.decode() == "/busybox\n"


def test_exe_under_root_is_its_guest_path(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    inside = tmp_path / "bin" / "busybox"
    shutil.copy(PROGRAM, inside)
    got = run_emutrace("run", "--root", tmp_path, "--allow-write", tmp_path, "bin/busybox",
                       "readlink", "/proc/self/exe", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode() == "/bin/busybox\n"
