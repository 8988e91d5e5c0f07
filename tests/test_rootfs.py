"""`emutrace rootfs`: a root made from Debian's arm64 packages (coreutils and its
dependencies; scripts/setup.sh builds it once into .cache/rootfs/aarch64) runs Debian's own
dynamic programs as `qemu-aarch64-static -L ROOT` runs them, and a traced run names the libc
functions the program calls through its PLT."""

from __future__ import annotations

import subprocess
from pathlib import Path

from emutrace import errors
from tests.conftest import ENV, run_emutrace

ROOT = Path(__file__).resolve().parent.parent / ".cache" / "rootfs" / "aarch64"
TEXT = "usr/share/doc/coreutils/copyright"  # a file inside the root, named relative to it


def qemu(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["qemu-aarch64-static", "-L", ".", *argv], cwd=ROOT,
                          capture_output=True, timeout=120, env=ENV)


def test_rootfs_programs_like_qemu() -> None:
    """Run from inside the root (relative paths name the same files for both): stdout,
    stderr and exit status of cat and md5sum (more programs, on seven ISAs:
    tests/test_debian_programs.py)."""
    assert (ROOT / "lib" / "ld-linux-aarch64.so.1").exists(), "run scripts/setup.sh"
    for argv in (("./bin/cat", TEXT), ("./usr/bin/md5sum", TEXT)):
        want = qemu(*argv)
        assert want.returncode == 0 and len(want.stdout) > 20
        got = run_emutrace("run", "--root", ".", *argv, cwd=ROOT)
        assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr,
                                                            want.returncode)


def test_rootfs_program_traced_names_libc_calls() -> None:
    """A stripped distribution program: its PLT stubs (`read@plt`) and the libc functions
    they reach (named from libc's .dynsym) appear in the trace; `--start libc:read` starts
    it at libc's read (cat has no `main` symbol), `-N libc.so.6:write` hides libc's write
    (its stub stays)."""
    got = run_emutrace("run", "--backend", "int3", "--start", "libc:read", "-N",
                       "libc.so.6:write", "--root", ".", "./bin/cat", TEXT, cwd=ROOT)
    assert got.returncode == 0
    trace = got.stderr.decode()
    assert trace.splitlines()[1].split("|")[1].strip().startswith("read(")
    for name in ("read@plt(", "write@plt("):
        assert name in trace, name
    assert " write(" not in trace


def test_rootfs_refusals() -> None:
    """An unknown ISA is a usage error (64); an ISA apt has no packages of (Debian 12 has no
    mips port) one line, 69."""
    bad = run_emutrace("rootfs", "--arch", "vax")
    assert bad.returncode == errors.EXIT_USAGE and bad.stderr.count(b"\n") == 1
    none = run_emutrace("rootfs", "--arch", "mips", "-o", "/nonexistent/never-made")
    assert none.returncode == errors.EXIT_UNSUPPORTED and none.stderr.count(b"\n") == 1
    assert b"dpkg does not know the mips architecture" in none.stderr
