"""Debian's own dynamic programs on the seven Debian ISAs, from the roots
`emutrace rootfs` makes (scripts/setup.sh: .cache/rootfs/<isa> with coreutils, grep, sed,
findutils, diffutils, gawk): stdout, stderr and exit status equal to
`qemu-<isa>-static -L ROOT` with the same root, input and environment; and a traced `sort`
names the libc functions it imports (the oracle: the program's undefined dynamic symbols,
from readelf) with its output unchanged by tracing.

Both run from inside the root with relative paths: qemu-user falls back to the host's file
when a path is missing under `-L`, emutrace never does.  The inputs are files the packages
ship (their mtimes come from the .debs).  To keep the test time small every ISA runs `find`
(getdents64, fchdir, newfstatat/statx, fstatfs) and two more commands in rotation, so
each command runs on two ISAs.  A gap is a strict xfail read from the ISA's capability
table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from tests.conftest import ENV, REPO, qemu_binary

DEBIAN_ISAS = ("x86_64", "i386", "aarch64", "arm", "mipsel", "ppc64le", "s390x")
ROOTS = REPO / ".cache" / "rootfs"
DOC = "usr/share/doc"
# TZ: diff -u prints mtimes; without it qemu would read the host's /etc/localtime
RUN_ENV = {**ENV, "TZ": "UTC0"}

FIND = ("./usr/bin/find", DOC, "-name", "copyright")
ROTATION = {  # name → argv (inside the root)
    "ls": ("./bin/ls", "-ln", f"{DOC}/sed"),  # statfs, getdents64, lstat, getxattr
    "stat-f": ("./usr/bin/stat", "-f", "-c", "%t %T %s %S %b %c %l %i", DOC),  # statfs values
    "sort": ("./usr/bin/sort", "-r", f"{DOC}/sed/copyright"),  # sysinfo, threads' set-up
    "grep": ("./bin/grep", "-c", "GPL", f"{DOC}/grep/copyright"),  # pcre2, mincore
    "sed": ("./bin/sed", "s/GNU/gnu/g", f"{DOC}/sed/copyright"),
    "diff": ("./usr/bin/diff", "-u", f"{DOC}/sed/copyright", f"{DOC}/grep/copyright"),
    "gawk": ("./usr/bin/gawk", "{s += NF} END {print s}", f"{DOC}/sed/copyright"),
    "sha256sum": ("./usr/bin/sha256sum", f"{DOC}/sed/copyright"),
}
# ISA i runs `find` and ORDER[i], ORDER[i + 4] (mod 8): each command on one or two ISAs,
# sha256sum on mipsel (its gap)
ORDER = ("diff", "ls", "stat-f", "grep", "sha256sum", "sed", "gawk", "sort")
GAPS = {"sha256sum": Cap.COREUTILS_DIGESTS}  # command → the capability it needs


def root_of(isa: str) -> Path:
    root = ROOTS / isa
    assert (root / ".emutrace-rootfs").exists(), f"{root}: run scripts/setup.sh"
    return root


def qemu(isa: str, argv: tuple[str, ...]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([qemu_binary(isa), "-L", ".", *argv], cwd=root_of(isa),
                          capture_output=True, timeout=120, env=RUN_ENV)


def emutrace(isa: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "emutrace", "run", "--root", ".", *args],
                          cwd=root_of(isa), capture_output=True, timeout=300, env=RUN_ENV)


def gap(isa: str, capability: Cap) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capabilities.get(capability)
    if cap is None or cap.works:
        return []
    return [pytest.mark.xfail(reason=cap.reason, strict=True)]


def cells() -> list:  # type: ignore[type-arg]
    out = [pytest.param(isa, "find", id=f"{isa}-find") for isa in DEBIAN_ISAS]
    for i, isa in enumerate(DEBIAN_ISAS):
        for name in (ORDER[i], ORDER[(i + 4) % len(ORDER)]):
            marks = gap(isa, GAPS[name]) if name in GAPS else []
            out.append(pytest.param(isa, name, id=f"{isa}-{name}", marks=marks))
    return out


@pytest.mark.parametrize(("isa", "command"), cells())
def test_debian_program_like_qemu(isa: str, command: str) -> None:
    argv = FIND if command == "find" else ROTATION[command]
    want = qemu(isa, argv)
    assert want.returncode in (0, 1) and want.stdout, want.stderr  # diff: 1, differences
    got = emutrace(isa, "--backend", "none", *argv)
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr,
                                                        want.returncode)


def imported_functions(program: Path) -> set[str]:
    """The program's undefined dynamic function symbols (readelf, any target)."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(program)], capture_output=True,
                         text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        cols = line.split()
        # Num: Value Size Type Bind Vis [ppc64le: <localentry>: N] Ndx Name
        if len(cols) >= 8 and cols[3] == "FUNC" and "UND" in cols[6:-1]:
            names.add(cols[cols.index("UND", 6) + 1].split("@")[0])
    return names


LIBC_CALLS = ("malloc", "free", "fwrite_unlocked")  # sort: its lines, buffers and output


@pytest.mark.parametrize("isa", DEBIAN_ISAS)
def test_debian_program_traced_names_libc_calls(isa: str, tmp_path: Path) -> None:
    argv = ("./usr/bin/sort", "-r", f"{DOC}/sed/AUTHORS")  # 10 lines: a short trace
    assert set(LIBC_CALLS) <= imported_functions(root_of(isa) / argv[0])
    want = qemu(isa, argv)
    assert want.returncode == 0 and want.stdout
    trace = tmp_path / "trace.txt"
    got = emutrace(isa, "--backend", "int3", "-o", str(trace), *argv)
    assert (got.stdout, got.returncode) == (want.stdout, 0), got.stderr
    called = {line.split("|", 1)[1].strip().split("(")[0] for line in
              trace.read_text().splitlines()[1:] if "|" in line}
    for name in LIBC_CALLS:
        assert name in called, name
