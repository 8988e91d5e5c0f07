"""Real third-party programs: Debian's busybox-static under emutrace and under qemu-user
give the same output, on every ISA Debian ships it for (fetched by `make setup` through apt,
never committed).  ISAs without a Debian busybox are explicit xfails from the capability
table."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap

from .conftest import BUSYBOX, ENV, ISAS, qemu_binary, run_emutrace, run_qemu

FIXED_TIME = 1_700_000_000  # file times for a reproducible `ls -l`

APPLETS: list[tuple[str, ...]] = [
    ("echo", "hello", "world"),
    ("cat", "poem.txt", "numbers.txt"),
    ("wc", "poem.txt"),
    ("wc", "-l", "-w", "-c", "poem.txt", "numbers.txt"),
    ("sort", "numbers.txt"),
    ("sort", "-n", "-r", "numbers.txt"),
    ("sha256sum", "poem.txt", "numbers.txt"),
    ("md5sum", "poem.txt"),
    ("ls", "-l", "tree"),
    ("ls", "-la", "tree/sub"),
    ("expr", "6", "*", "7"),
    ("expr", "length", "emutrace"),
    ("sh", "-c", "i=0; s=0; while [ $i -lt 20 ]; do s=$((s + i * i)); i=$((i + 1)); done; "
                 "echo sum=$s"),
    ("sh", "-c", "for w in alpha beta gamma; do echo ${#w}:$w; done"),
    ("head", "-n", "3", "poem.txt"),
    ("tr", "a-z", "A-Z"),  # reads stdin
    ("uniq", "-c", "dups.txt"),
    ("cut", "-d", ":", "-f", "2", "colon.txt"),
]


def busybox_params() -> list:
    out = []
    for isa in ISAS:
        cap = by_name(isa).capability(Cap.BUSYBOX)
        marks = [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]
        out.append(pytest.param(isa, marks=marks, id=isa))
    return out


def busybox(isa: str) -> Path:
    path = BUSYBOX / isa / "busybox"
    if not path.exists():
        pytest.fail(f"{path} missing: run `make setup` (fetches busybox-static with apt)")
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "poem.txt").write_text("the quick brown fox\njumps over\nthe lazy dog\n" * 3)
    (tmp_path / "numbers.txt").write_text("".join(f"{(i * 37) % 101}\n" for i in range(40)))
    (tmp_path / "dups.txt").write_text("a\na\nb\nc\nc\nc\n")
    (tmp_path / "colon.txt").write_text("x:1:y\nx:22:y\nx:333:y\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "file-a").write_text("aaaa")
    (tree / "file-b").write_bytes(b"\0" * 1234)
    (tree / "sub" / "deep").write_text("x")
    os.symlink("file-a", tree / "link-a")
    for p in [*tree.rglob("*"), tree]:
        os.utime(p, (FIXED_TIME, FIXED_TIME), follow_symlinks=False)
    return tmp_path


@pytest.mark.busybox
@pytest.mark.parametrize("isa", busybox_params())
@pytest.mark.parametrize("applet", APPLETS, ids=lambda a: " ".join(a)[:40])
def test_applet_same_as_qemu(isa: str, applet: tuple[str, ...], workdir: Path,
                             emutrace_here: Callable[..., CompletedProcess]) -> None:
    """(emutrace in this process: conftest's `emutrace_here`; the tests below run it as a
    command.)"""
    bb = busybox(isa)
    stdin = b"from stdin\nmixed Case\n"
    want = run_qemu(isa, bb, *applet, cwd=workdir, stdin=stdin)
    got = emutrace_here("run", bb, *applet, cwd=workdir, stdin=stdin)
    assert want.returncode == 0, want.stderr
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr, 0)


def _pipeline(first: list[str], second: list[str], cwd: Path) -> bytes:
    a = subprocess.Popen(first, cwd=cwd, stdout=subprocess.PIPE, env=ENV)
    b = subprocess.run(second, cwd=cwd, stdin=a.stdout, capture_output=True, env=ENV,
                       timeout=300)
    assert a.stdout is not None
    a.stdout.close()
    assert a.wait(timeout=300) == 0
    assert b.returncode == 0, b.stderr
    return b.stdout


@pytest.mark.busybox
@pytest.mark.parametrize("isa", busybox_params())
def test_gzip_round_trip(isa: str, workdir: Path) -> None:
    """`gzip -c | gunzip -c`: two guests joined by a host pipe (no fork inside a guest)."""
    bb = str(busybox(isa))
    emu = [sys.executable, "-m", "emutrace", "run", bb]
    qemu = [qemu_binary(isa), bb]
    compressed_q = run_qemu(isa, bb, "gzip", "-c", "poem.txt", cwd=workdir).stdout
    compressed_e = run_emutrace("run", bb, "gzip", "-c", "poem.txt", cwd=workdir).stdout
    assert compressed_e == compressed_q and compressed_e[:2] == b"\x1f\x8b"
    got = _pipeline([*emu, "gzip", "-c", "poem.txt"], [*emu, "gunzip", "-c"], workdir)
    want = _pipeline([*qemu, "gzip", "-c", "poem.txt"], [*qemu, "gunzip", "-c"], workdir)
    assert got == want == (workdir / "poem.txt").read_bytes()
