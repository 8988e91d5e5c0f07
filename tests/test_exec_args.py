"""execve's limits on arguments as Linux's (fs/exec.c): one string may be up to
MAX_ARG_STRLEN (128 KiB), longer is E2BIG; all strings and pointers together are E2BIG
past a quarter of the stack limit.  The oracle is the same shell script run by busybox
natively on this host (x86_64); the guest busybox of each ISA must print the same."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from .conftest import ENV
from .test_busybox import busybox

SCRIPT = """\
a=$(head -c 100000 /dev/zero | tr '\\0' a)
{bb} echo "$a" | wc -c
b=$(head -c 140000 /dev/zero | tr '\\0' b)
{bb} echo "$b" | wc -c
c=$(head -c 60000 /dev/zero | tr '\\0' c)
{bb} true {many}
echo rc=$?
{bb} true {few}
echo rc=$?
"""


def _script(tmp_path: Path, bb: Path) -> Path:
    many = " ".join(["$c$c"] * 18)  # 18 × 120 kB: beyond 2 MiB (8 MiB stack / 4)
    few = " ".join(["$c$c"] * 12)   # 1.4 MB: within
    path = tmp_path / f"args-{bb.parent.name}.sh"
    path.write_text(SCRIPT.format(bb=bb, many=many, few=few))
    return path


@pytest.mark.busybox
@pytest.mark.parametrize("isa", ["x86_64", "arm", "s390x"])
def test_argument_limits_as_linux(isa: str, tmp_path: Path,
                                  emutrace_here: Callable[..., CompletedProcess]) -> None:
    native_bb = busybox("x86_64")
    want = subprocess.run([str(native_bb), "sh", str(_script(tmp_path, native_bb))],
                          capture_output=True, env=ENV, cwd=tmp_path, timeout=60)
    assert b"Argument list too long" in want.stderr and b"100001" in want.stdout
    guest_bb = busybox(isa)
    got = emutrace_here("run", guest_bb, "sh", _script(tmp_path, guest_bb), cwd=tmp_path)
    assert got.stdout == want.stdout
    assert got.stderr == want.stderr.replace(str(native_bb).encode(), str(guest_bb).encode()) \
        .replace(b"args-x86_64", f"args-{isa}".encode())
