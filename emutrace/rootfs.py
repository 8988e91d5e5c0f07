"""A root for `--root` from Debian packages of one architecture, through the host's apt:
the packages and their dependencies (`apt-cache depends --recurse`, Depends and
Pre-Depends only), downloaded (`apt-get download`) into a cache directory outside the root
(default `$XDG_CACHE_HOME/emutrace/debs`, `~/.cache/emutrace/debs`: the .deb files are named
NAME_VERSION_ARCH, so one cache serves every architecture) and unpacked (`dpkg-deb -x`)
into DIR.  No maintainer scripts run (none is needed for programs to find
their libraries: Debian 12's libc6 ships `/lib/ld-linux-*.so.*` and `/lib/<triple>/`
itself).  Cached: a package already unpacked (DIR/.emutrace-rootfs lists them) is skipped.

Besides the packages, the root gets the directories a system has that no package ships:
`/tmp` (mode 1777), the home directory of $HOME when it is `/root` or `/home/NAME`, and
`/dev` and `/proc`
(empty: emutrace serves their contents itself, machine/linux/devfs.py and procfs.py; the
empty directories make them appear in a listing of `/` and give qemu-user's `-L` the same
tree).  A run under the root may write in its /tmp and that home without `--allow-write`
(sandbox.scratch_dirs); anything else needs `--allow-write DIR`.

The host's apt must know the architecture (`dpkg --add-architecture ARCH; apt-get
update`); Debian 12 has no mips, riscv64 or powerpc port (their cross sysroots
`/usr/<triple>` from `libc6-<arch>-cross` are roots too).
"""

from __future__ import annotations

import os
import re
import shutil
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
    import subprocess  # (here: every run imports this module, through isa/i386.py)

    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EmutraceError(f"rootfs: {argv[0]}: {e}", EXIT_UNAVAILABLE) from None
    if done.returncode != 0:
        lines = [x for x in (done.stderr or done.stdout).splitlines() if x.strip()]
        last = lines[-1].strip() if lines else f"exit status {done.returncode}"
        raise EmutraceError(f"rootfs: {' '.join(argv[:2])} failed: {last}", EXIT_UNAVAILABLE)
    return done.stdout


def dependency_closure(depends_output: str, arch: str, native: str = "") -> list[str]:
    """Package names from `apt-cache depends --recurse` output: the unindented lines,
    without virtual packages (`<name>`).  apt prints the host's (native) architecture and
    `Architecture: all` packages without a suffix and a Multi-Arch: foreign dependency
    (dpkg, tar) once per architecture; kept: `NAME:ARCH`, and an unsuffixed name when it is
    ours (ARCH is the native one: suffixed `:ARCH` here) or has no `:ARCH` twin (an
    `all` package, downloaded by name)."""
    names = set()
    for line in depends_output.splitlines():
        if not line or line[0].isspace() or line.startswith("<"):
            continue
        name = line.strip()
        if re.fullmatch(r"[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?", name) is not None:
            names.add(name)
    out = set()
    for name in names:
        if name.endswith(f":{arch}"):
            out.add(name)
        elif ":" not in name:
            if arch == native:
                out.add(f"{name}:{arch}")
            elif f"{name}:{arch}" not in names:
                out.add(name)
    return sorted(out)


# the roots `scripts/setup.sh` builds (`emutrace rootfs` into .cache/rootfs/<isa> of the
# source tree): what a native run of a dynamic program whose interpreter is not on this
# host falls back to (target/native_interp.py)
SETUP_ROOTS = Path(__file__).resolve().parent.parent / ".cache" / "rootfs"


def setup_root(isa: str) -> Path | None:
    """The setup's Debian root of an ISA, when it was built."""
    root = SETUP_ROOTS / isa
    return root if root.is_dir() else None


def default_cache() -> Path:
    """Where downloaded .deb files are kept (XDG base directory rule)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "emutrace" / "debs"


def build_root(root: Path, arch: str, packages: Iterable[str],
               run: Runner = run_host, cache: Path | None = None) -> list[str]:
    """Download (into `cache`, default `default_cache()`) and unpack the packages and their
    dependencies; returns what was unpacked now (empty when all were there)."""
    wanted = [p if ":" in p else f"{p}:{arch}" for p in packages]
    native = run(["dpkg", "--print-architecture"], None).strip()
    known = [native] + run(["dpkg", "--print-foreign-architectures"], None).split()
    if arch not in known:
        raise Unsupported(f"rootfs: dpkg does not know the {arch} architecture; as root: dpkg "
                          f"--add-architecture {arch} && apt-get update (Debian 12 has no "
                          "mips, riscv64 or powerpc port: use /usr/<triple>)")
    names = dependency_closure(run(["apt-cache", "depends", *DEPENDS_FLAGS, *wanted], None),
                               arch, native)
    debs = cache or default_cache()
    debs.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    _move_old_cache(root / ".debs", debs)
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
    if todo:
        relative_links(root)
    return todo


def system_dirs(root: Path, home: str | None = None) -> list[Path]:
    """Make the directories of a system that no package ships (see the module's text);
    returns the scratch ones (/tmp, the home directory).  `home` defaults to $HOME; a
    home other than /root or /home/NAME is not made (sandbox.scratch_dirs gives no other
    one write access)."""
    parts = Path(home if home is not None else os.environ.get("HOME", "/root")).parts[1:]
    for name in ("dev", "proc"):
        (root / name).mkdir(mode=0o755, exist_ok=True)
    tmp = root / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)  # hier(7): world-writable, sticky
    made = [tmp]
    if parts == ("root",) or (len(parts) == 2 and parts[0] == "home"
                              and parts[1] not in (".", "..")):
        where = root.joinpath(*parts)
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        made.append(where)
    return made


def relative_links(root: Path) -> int:
    """Rewrite the root's absolute symbolic links as relative ones (same target inside the
    root; returns how many): tools that do not follow links inside the root — qemu-user's
    `-L`, the host kernel — would follow `/lib64/ld64.so.2 -> /lib/powerpc64le-linux-gnu/
    ld64.so.2` (Debian's ppc64el libc6) out of it to the host's file.  Inside the root both
    name the same file, so what the guest sees does not change."""
    count = 0
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            link = Path(here) / name
            if not link.is_symlink():
                continue
            target = os.readlink(link)
            if not target.startswith("/"):
                continue
            inside = root / target.lstrip("/")
            link.unlink()
            link.symlink_to(os.path.relpath(inside, link.parent))
            count += 1
    return count


def _deb_of(debs: Path, name: str) -> Path | None:
    """The downloaded file of `name[:arch]` (apt names it NAME_VERSION_ARCH.deb; an
    unsuffixed name is an `all` package, and so may be a native `name:arch`)."""
    package, _, arch = name.partition(":")
    found = sorted(debs.glob(f"{package}_*_{arch or 'all'}.deb")) or sorted(
        debs.glob(f"{package}_*_all.deb"))
    return found[-1] if found else None


def _move_old_cache(old: Path, debs: Path) -> None:
    """An earlier emutrace kept the downloads in DIR/.debs, visible inside the root: they
    move to the cache."""
    if not old.is_dir() or old.resolve() == debs.resolve():
        return
    for deb in old.glob("*.deb"):
        if not (debs / deb.name).exists():
            shutil.move(str(deb), debs / deb.name)
    shutil.rmtree(old)
