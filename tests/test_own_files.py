"""emutrace's own files out of the guest's reach: the traces `run -o FILE` writes after
the guest started (a forked child's FILE.<pid>, an execve'd image's FILE.exec) are made in
FILE's directory as opened before the guest ran, so a guest that moves that directory
away and puts a symlink to another directory in its place redirects nothing.  The host
file system is the oracle: the other directory stays empty."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ENV
from .test_busybox import busybox


def emutrace_sh(cwd: Path, *options: str, script: str) -> subprocess.CompletedProcess:
    """`emutrace OPTIONS busybox sh -c SCRIPT` (x86_64) in `cwd`."""
    return subprocess.run([sys.executable, "-m", "emutrace", *options, busybox("x86_64"),
                           "sh", "-c", script], cwd=cwd, env=ENV, capture_output=True,
                          timeout=300)


@pytest.mark.busybox
def test_child_and_exec_traces_stay_in_the_directory_opened_first(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    canary = tmp_path / "canary"
    canary.mkdir()
    bb = busybox("x86_64")
    script = f"mv out moved; ln -s {canary} out; (echo child); exec {bb} echo image"
    got = emutrace_sh(tmp_path, "run", "-o", "out/t.txt", script=script)
    assert got.returncode == 0, got.stderr
    assert got.stdout == b"child\nimage\n"
    assert list(canary.iterdir()) == []
    made = sorted(p.name for p in (tmp_path / "moved").iterdir())
    assert made[0] == "t.txt" and made[-1] == "t.txt.exec"
    children = [n for n in made if n.removeprefix("t.txt.").isdigit()]
    assert len(children) >= 3  # mv, ln and the subshell, each a forked guest process
    assert all((tmp_path / "moved" / n).read_text().startswith("# DURATION") for n in made)


@pytest.mark.busybox
def test_a_child_whose_trace_cannot_be_made_ends_with_one_line(tmp_path: Path) -> None:
    """The guest removes the directory of the traces; a child forked then cannot create
    FILE.<pid>: it ends before running (exit 74, one line naming it), and never runs on
    as a second copy of its parent."""
    (tmp_path / "out").mkdir()
    script = "rm -rf out; (echo child); echo status=$?"
    got = emutrace_sh(tmp_path, "run", "-o", "out/t.txt", script=script)
    assert got.returncode == 0, got.stderr
    assert got.stdout == b"status=74\n"
    lines = [ln for ln in got.stderr.decode().splitlines() if "forked child" in ln]
    assert len(lines) >= 1 and "No such file or directory" in lines[0]
    assert "Traceback" not in got.stderr.decode()


@pytest.mark.busybox
def test_a_recording_stays_in_the_directory_opened_first(tmp_path: Path) -> None:
    """`record`: the files written at the end (info, task.txt, the map, the symbols) go to
    the directory made before the guest ran, even after the guest renamed it and put a
    symlink to another directory under its name."""
    canary = tmp_path / "canary"
    canary.mkdir()
    script = f"mv rec moved; ln -s {canary} rec; (echo child)"
    got = emutrace_sh(tmp_path, "record", "-d", "rec", script=script)
    assert got.returncode == 0, got.stderr
    assert list(canary.iterdir()) == []
    made = {p.name for p in (tmp_path / "moved").iterdir()}
    assert {"info", "task.txt", "busybox.sym", "1.dat"} <= made
    replay = subprocess.run([sys.executable, "-m", "emutrace", "replay", "-d", "moved"],
                            cwd=tmp_path, env=ENV, capture_output=True, timeout=120)
    assert replay.returncode == 0, replay.stderr
