"""A root for `--root` from Debian packages of one architecture, through the host's apt:
the packages and their dependencies (`apt-cache depends --recurse`, Depends and
Pre-Depends only), downloaded (`apt-get download`) into DIR/.debs and unpacked
(`dpkg-deb -x`) into DIR.  No maintainer scripts run (none is needed for programs to find
their libraries: Debian 12's libc6 ships `/lib/ld-linux-*.so.*` and `/lib/<triple>/`
itself).  Cached: a package already unpacked (DIR/.emutrace-rootfs lists them) is skipped.

The host's apt must know the architecture (`dpkg --add-architecture ARCH; apt-get
update`); Debian 12 has no mips, riscv64 or powerpc port (their cross sysroots
`/usr/<triple>` from `libc6-<arch>-cross` are roots too).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from emutrace.errors import EmutraceError, Unsupported

MARKER = ".emutrace-rootfs"  # the packages unpacked into the root, one per line
DEPENDS_FLAGS = ("--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                 "--no-breaks", "--no-replaces", "--no-enhances")
EXIT_UNAVAILABLE = 69  # EX_UNAVAILABLE: apt cannot provide a package

Runner = Callable[[list[str], Path | None], str]


def run_host(argv: list[str], cwd: Path | None = None) -> str:
    """Run a host tool; its failure is one line naming the tool and its last message."""
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EmutraceError(f"rootfs: {argv[0]}: {e}", EXIT_UNAVAILABLE) from None
    if done.returncode != 0:
        lines = [x for x in (done.stderr or done.stdout).splitlines() if x.strip()]
        last = lines[-1].strip() if lines else f"exit status {done.returncode}"
        raise EmutraceError(f"rootfs: {' '.join(argv[:2])} failed: {last}", EXIT_UNAVAILABLE)
    return done.stdout


def dependency_closure(depends_output: str, arch: str) -> list[str]:
    """Package names (with `:arch`) from `apt-cache depends --recurse` output: the
    unindented lines, without virtual packages (`<name>`); `:all` packages keep no suffix
    (apt-get download takes them by name)."""
    out = []
    for line in depends_output.splitlines():
        if not line or line[0].isspace() or line.startswith("<"):
            continue
        name = line.strip()
        if re.fullmatch(r"[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?", name) is None:
            continue
        if ":" not in name:  # an Architecture: all package
            out.append(name)
        elif name.endswith(f":{arch}"):
            out.append(name)
    return sorted(set(out))


def build_root(root: Path, arch: str, packages: Iterable[str],
               run: Runner = run_host) -> list[str]:
    """Download and unpack the packages and their dependencies; returns what was unpacked
    now (empty when all were there)."""
    wanted = [p if ":" in p else f"{p}:{arch}" for p in packages]
    known = run(["dpkg", "--print-architecture"], None).split() + run(
        ["dpkg", "--print-foreign-architectures"], None).split()
    if arch not in known:
        raise Unsupported(f"rootfs: dpkg does not know the {arch} architecture; as root: dpkg "
                          f"--add-architecture {arch} && apt-get update (Debian 12 has no "
                          "mips, riscv64 or powerpc port: use /usr/<triple>)")
    names = dependency_closure(run(["apt-cache", "depends", *DEPENDS_FLAGS, *wanted], None),
                               arch)
    debs = root / ".debs"
    debs.mkdir(parents=True, exist_ok=True)
    marker = root / MARKER
    done = set(marker.read_text().split()) if marker.exists() else set()
    todo = [n for n in names if n not in done]
    missing = [n for n in todo if not _deb_of(debs, n)]
    if missing:
        run(["apt-get", "download", "-qq", *missing], debs)
    for name in todo:
        deb = _deb_of(debs, name)
        if deb is None:
            raise EmutraceError(f"rootfs: apt-get download gave no .deb for {name}",
                                EXIT_UNAVAILABLE)
        run(["dpkg-deb", "-x", str(deb), str(root)], None)
        with open(marker, "a") as fh:
            fh.write(name + "\n")
    return todo


def _deb_of(debs: Path, name: str) -> Path | None:
    """The downloaded file of `name[:arch]` (apt names it NAME_VERSION_ARCH.deb)."""
    package, _, arch = name.partition(":")
    found = sorted(debs.glob(f"{package}_*_{arch or 'all'}.deb"))
    return found[-1] if found else None
