"""`emutrace rootfs`: build a root for `run --root` from Debian packages of an ISA (the
work is in emutrace/rootfs.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emutrace.errors import UsageError
from emutrace.isa import UnknownIsa, by_name
from emutrace.rootfs import build_root, system_dirs


class RootfsCommand:
    name = "rootfs"
    help = "build a root for --root from Debian packages of an ISA (apt download + unpack)"

    def configure(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--arch", required=True, metavar="ISA",
                       help="ISA (emutrace name or alias, e.g. aarch64 or arm64)")
        p.add_argument("-o", "--output", metavar="DIR",
                       help="the root to build or complete (default: rootfs-<isa>)")
        p.add_argument("--cache", metavar="DIR",
                       help="where downloaded .deb files are kept (default: "
                            "$XDG_CACHE_HOME/emutrace/debs, i.e. ~/.cache/emutrace/debs)")
        p.add_argument("packages", nargs="*", metavar="PACKAGE",
                       help="Debian packages to install with their dependencies "
                            "(default: libc6)")

    def __call__(self, args: argparse.Namespace) -> int:
        try:
            isa = by_name(args.arch)
        except UnknownIsa as e:
            raise UsageError(str(e)) from None
        root = Path(args.output or f"rootfs-{isa.name}")
        if root.exists() and not root.is_dir():
            raise UsageError(f"-o {root}: not a directory")
        arch = isa.identity.debian_arch
        cache = Path(args.cache) if args.cache else None
        if cache is not None and cache.exists() and not cache.is_dir():
            raise UsageError(f"--cache {cache}: not a directory")
        added = build_root(root, arch, args.packages or ["libc6"], cache=cache)
        scratch = system_dirs(root)
        print(f"emutrace: rootfs {root} ({arch}): {len(added)} packages unpacked"
              + (f": {' '.join(added)}" if added else ", all present"), file=sys.stderr)
        guest = " and ".join("/" + str(d.relative_to(root)) for d in scratch)
        print(f"emutrace: run with --root {root}: the guest may write in {guest} (and the "
              "current directory when it lies in the root); give it any other directory "
              f"with --allow-write DIR, e.g. --allow-write {root}/var", file=sys.stderr)
        return 0
