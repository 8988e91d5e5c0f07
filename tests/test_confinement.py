"""Host file access is confined end to end: the guest writes only under --allow-write
directories (default: the current directory), reads only under --root, and cannot climb out
of the root with `..` or symlinks.  Refusals are EACCES plus one warning line.

Every test runs against both targets: under emulation (the Linux layer's
calls through `Sandbox`) and natively (`--target native`: the seccomp filter and the
tracer's checks, target/ptrace_confine.py), with a committed x86_64 and i386 `calls` and
the static x86_64 and i386 busybox.  The oracle is the sandbox's documented rules and the
host file system after the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import BUSYBOX, bin_path, run_emutrace

DENIED = "emutrace: sandbox: write to"
# (target options, the `calls` program): emulation with a foreign ISA on purpose
CALLS_TARGETS = {
    "emulation": ((), bin_path("s390x", "calls")),
    "native-x86_64": (("--target", "native"), bin_path("x86_64", "calls")),
    "native-i386": (("--target", "native"), bin_path("i386", "calls")),
}
# (target options, a static busybox): the i386 one natively too
TARGETS = {"emulation": ((), "x86_64"), "native-x86_64": (("--target", "native"), "x86_64"),
           "native-i386": (("--target", "native"), "i386")}


@pytest.fixture(params=sorted(CALLS_TARGETS))
def calls(request: pytest.FixtureRequest) -> tuple[tuple[str, ...], Path]:
    return CALLS_TARGETS[request.param]


@pytest.fixture(params=sorted(TARGETS))
def target(request: pytest.FixtureRequest) -> tuple[tuple[str, ...], Path]:
    options, isa = TARGETS[request.param]
    return options, busybox(isa)


def busybox(isa: str = "x86_64") -> Path:
    path = BUSYBOX / isa / "busybox"
    if not path.exists():
        pytest.fail(f"{path} missing: run `make setup`")
    return path


def test_default_allows_writing_in_the_current_directory(
        tmp_path: Path, calls: tuple[tuple[str, ...], Path]) -> None:
    options, program = calls
    got = run_emutrace("run", *options, program, "fileio", "out.txt", cwd=tmp_path)
    assert got.returncode == 0
    assert b"fileio: unlink ok" in got.stdout
    assert got.stderr == b""


def test_default_refuses_writing_elsewhere(
        tmp_path: Path, calls: tuple[tuple[str, ...], Path]) -> None:
    options, program = calls
    (tmp_path / "cwd").mkdir()
    (tmp_path / "other").mkdir()
    target = tmp_path / "other" / "out.txt"
    got = run_emutrace("run", *options, program, "fileio", target, cwd=tmp_path / "cwd")
    assert b"fileio: open failed" in got.stdout
    lines = got.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(DENIED) and "out.txt" in lines[0]
    assert not target.exists()


def test_allow_write_opens_a_directory(
        tmp_path: Path, calls: tuple[tuple[str, ...], Path]) -> None:
    options, program = calls
    (tmp_path / "cwd").mkdir()
    (tmp_path / "other").mkdir()
    target = tmp_path / "other" / "out.txt"
    got = run_emutrace("run", *options, "--allow-write", tmp_path / "other", program, "fileio",
                       target, cwd=tmp_path / "cwd")
    assert got.returncode == 0 and b"fileio: unlink ok" in got.stdout
    # --allow-write replaces the default: the current directory is no longer writable
    got = run_emutrace("run", *options, "--allow-write", tmp_path / "other", program, "fileio",
                       "x.txt", cwd=tmp_path / "cwd")
    assert b"fileio: open failed" in got.stdout and DENIED in got.stderr.decode()


def test_existing_files_outside_are_not_modified(
        tmp_path: Path, target: tuple[tuple[str, ...], Path]) -> None:
    (tmp_path / "cwd").mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    got = run_emutrace("run", *target[0], target[1], "rm", "-f", victim, cwd=tmp_path / "cwd")
    assert victim.read_text() == "precious\n"
    assert DENIED in got.stderr.decode() or "denied" in got.stderr.decode()
    got = run_emutrace("run", *target[0], target[1], "sh", "-c", f"echo evil > {victim}",
                       cwd=tmp_path / "cwd")
    assert victim.read_text() == "precious\n"
    assert got.returncode != 0


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    (r / "etc" / "hostname").write_text("inside-the-root\n")
    (r / "data").mkdir()
    os.symlink("/etc/hostname", r / "data" / "abs-link")  # absolute: stays inside the root
    os.symlink("../../../../../../etc/hostname", r / "data" / "climb-link")
    (tmp_path / "outside.txt").write_text("secret\n")
    return r


def test_root_maps_guest_slash(root: Path, target: tuple[tuple[str, ...], Path]) -> None:
    got = run_emutrace("run", *target[0], "--root", root, target[1], "cat", "/etc/hostname",
                       cwd=root)
    assert got.stdout == b"inside-the-root\n"
    got = run_emutrace("run", *target[0], "--root", root, target[1], "cat", "/data/abs-link",
                       cwd=root)
    assert got.stdout == b"inside-the-root\n"


def test_dotdot_cannot_leave_the_root(root: Path, target: tuple[tuple[str, ...], Path]) -> None:
    got = run_emutrace("run", *target[0], "--root", root, target[1], "cat", "/../outside.txt",
                       cwd=root)
    assert got.returncode != 0 and b"secret" not in got.stdout
    assert "escapes the root" in got.stderr.decode()


def test_symlink_cannot_leave_the_root(root: Path, target: tuple[tuple[str, ...], Path]) -> None:
    got = run_emutrace("run", *target[0], "--root", root, target[1], "cat", "/data/climb-link",
                       cwd=root)
    assert got.returncode != 0 and b"secret" not in got.stdout
    assert b"inside-the-root" not in got.stdout
    assert "escapes the root" in got.stderr.decode()
