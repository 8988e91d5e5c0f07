"""How a dynamic program is started natively (`--target native`) when its interpreter is
not on this host (i386's /lib/ld-linux.so.2 on an x86_64 host): the interpreter of a root
is run explicitly, `ROOT/<PT_INTERP> --library-path DIRS --argv0 ARGV0 PROGRAM ARGS`
(ld.so(8), "explicit invocation"; glibc 2.33+ for --argv0).  The root is --root when given,
else the Debian root of the program's ISA that `scripts/setup.sh` builds
(`emutrace.rootfs.setup_root`, .cache/rootfs/<isa>).  DIRS are the root's multiarch
directories of etc/ld.so.conf.d/*.conf (what ldconfig(8) would put in the root's cache)
followed by lib and usr/lib (ld.so's trusted defaults), those that exist.

What changes for the tracer: the kernel loads ld.so as the main program, so AT_ENTRY is
ld.so's entry and AT_BASE is 0 (no PT_INTERP was read); ld.so's bias is AT_ENTRY minus its
own e_entry, and the program is mapped by ld.so with mmap like a library: its module (and
its load bias, for a PIE) is learnt from /proc/PID/maps when that mmap returns
(target/native_modules.py), before its first instruction runs."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from emutrace.elf import Image
from emutrace.rootfs import setup_root


@dataclass(frozen=True)
class Launch:
    """What to execve for a program: `path` with `argv`; `interpreter` is the host path
    of the ld.so the program runs with, `explicit` when that ld.so is what is executed."""

    path: str
    argv: list[bytes]
    interpreter: str | None
    explicit: bool


def root_for(image: Image, root: str) -> Path | None:
    """The root whose interpreter runs the program: --root when given, else the setup's
    Debian root of its ISA, when it holds the interpreter."""
    assert image.interpreter is not None
    candidate = Path(root) if root != "/" else setup_root(image.isa.name)
    if candidate is None or not (candidate / image.interpreter.lstrip("/")).exists():
        return None
    return candidate


def missing_interpreter_reason(image: Image) -> str:
    return (f"its interpreter {image.interpreter} is not on this host, nor in a root of "
            f"{image.isa.name} (--root, or `emutrace rootfs --arch {image.isa.name} -o "
            f".cache/rootfs/{image.isa.name}` / make setup)")


def library_dirs(root: Path) -> list[str]:
    """Guest paths (from the root's /) of its library directories, in ld.so's order."""
    dirs: list[str] = []
    for conf in sorted(glob.glob(str(root / "etc" / "ld.so.conf.d" / "*.conf"))):
        with open(conf, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line.startswith("/") and not line.startswith("include"):
                    dirs.append(line)
    dirs += ["/lib", "/usr/lib"]
    seen: list[str] = []
    for d in dirs:
        if d not in seen and (root / d.lstrip("/")).is_dir():
            seen.append(d)
    return seen


def launch_of(image: Image, root: str, argv: list[bytes], program: str,
              in_guest: bool) -> Launch:
    """How to start `image` (argv[0] first; `program`: its path as ld.so is to open it).
    `in_guest`: the paths ld.so is given are seen through the sandbox's root (a confined
    run with --root), else host paths."""
    if image.interpreter is None or os.path.exists(image.interpreter):
        interp = None if image.interpreter is None else os.path.realpath(image.interpreter)
        return Launch(image.path, argv, interp, False)
    base = root_for(image, root)
    if base is None:
        raise FileNotFoundError(missing_interpreter_reason(image))
    ld_so = os.path.realpath(base / image.interpreter.lstrip("/"))
    host_root = "" if in_guest else str(base)
    dirs = ":".join(host_root + d for d in library_dirs(base))
    explicit = [os.fsencode(ld_so), b"--library-path", os.fsencode(dirs),
                b"--argv0", argv[0], os.fsencode(program), *argv[1:]]
    return Launch(ld_so, explicit, ld_so, True)
