"""The Debian roots the set-up makes with `emutrace rootfs` (scripts/setup.sh) for the tests
that run Debian's programs: one directory per ISA, marked by `.emutrace-rootfs`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest


def built_root(roots: Path, isa: str, packages: Iterable[str]) -> Path:
    """roots/isa, or a skip that says how to build it (scripts/setup.sh builds every one)."""
    root = roots / isa
    if not (root / ".emutrace-rootfs").exists():
        pytest.skip(f"{root} is not built: run scripts/setup.sh (emutrace rootfs --arch "
                    f"{isa} -o {root} {' '.join(packages)})")
    return root
