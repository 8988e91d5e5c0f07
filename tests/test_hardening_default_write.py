"""Without --allow-write the current directory is writable only when that
gives away no more than a scratch directory: run from `/`, from $HOME or from a directory
holding the root, nothing is writable and the refused write names the way out.  The guest
(busybox `mkdir`, x86_64) tries, under emulation and natively (the same
sandbox); the host file system says what happened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BUSYBOX, ENV

BUSYBOX_X86_64 = BUSYBOX / "x86_64" / "busybox"
TARGETS = pytest.mark.parametrize("target", [(), ("--target", "native")],
                                  ids=["emulation", "native"])


def touch(target: Path, cwd: Path, home: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                           *extra, str(BUSYBOX_X86_64), "mkdir", str(target)],
                          cwd=cwd, env={**ENV, "HOME": str(home)}, capture_output=True,
                          timeout=120)


@TARGETS
def test_current_directory_is_writable_by_default(tmp_path: Path, target: tuple[str, ...]
                                                  ) -> None:
    work = tmp_path / "work"
    work.mkdir()
    got = touch(work / "made", work, tmp_path / "elsewhere", *target)
    assert got.returncode == 0, got.stderr
    assert (work / "made").exists()


@TARGETS
def test_nothing_writable_from_home_root_or_slash(tmp_path: Path, target: tuple[str, ...]
                                                  ) -> None:
    # $HOME as the current directory
    got = touch(tmp_path / "home-file", tmp_path, tmp_path, *target)
    assert got.returncode == 1
    assert not (tmp_path / "home-file").exists()
    assert b"pass --allow-write" in got.stderr
    # `/`: the whole host file system would be writable (the target is in tmp_path)
    got = touch(tmp_path / "slash-file", Path("/"), tmp_path / "elsewhere", *target)
    assert got.returncode == 1
    assert not (tmp_path / "slash-file").exists()
    # the root itself (--root R from R): the guest's whole file system
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    got = touch(Path("/made"), root, tmp_path / "elsewhere", *target, "--root", str(root))
    assert got.returncode == 1
    assert not (root / "made").exists()
    # an explicit --allow-write still works from $HOME
    got = touch(tmp_path / "asked", tmp_path, tmp_path, *target, "--allow-write",
                str(tmp_path))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "asked").exists()
