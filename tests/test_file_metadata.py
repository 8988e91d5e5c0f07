"""File metadata, links, FIFOs, times, truncation and syncing (machine/linux/sys_fsmeta.py):
Debian's busybox does the same under emutrace as under qemu-user, each in a scratch
directory of its own, on every ISA Debian ships busybox for.  Where emutrace's sandbox
departs from Linux on purpose (no set-user-ID bit, no change of owner), the host file
system says what happened."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from .conftest import run_qemu
from .test_busybox import busybox, busybox_params

SCRIPT = "; ".join([
    'touch f', 'chmod 640 f', 'stat -c "%a %s %h" f',
    'ln f g', 'stat -c "%h" f',                       # link
    'ln -s f h', 'readlink h', 'stat -L -c "%a" h',    # symlink
    'mkfifo p', 'stat -c "%F %a" p',                   # mknod of a FIFO
    'touch -t 200109090146.40 f', 'stat -c "%Y" f',    # utimensat
    'touch -c -r f g', 'stat -c "%Y" g',
    'truncate -s 5 f', 'stat -c "%s" f',
    'sync', 'chown "$(id -u):$(id -g)" f && echo same-owner-ok',
    'chmod 600 g', 'ls -l g h | cut -c1-10',
    'rm g h p', 'ls',
])


def _both(isa: str, tmp_path: Path, script: str,
          emutrace_here: Callable[..., CompletedProcess]) -> tuple[CompletedProcess, ...]:
    bb = busybox(isa)
    (tmp_path / "qemu").mkdir()
    (tmp_path / "emutrace").mkdir()
    want = run_qemu(isa, bb, "sh", "-c", script, cwd=tmp_path / "qemu")
    got = emutrace_here("run", bb, "sh", "-c", script, cwd=tmp_path / "emutrace")
    return want, got


@pytest.mark.busybox
@pytest.mark.parametrize("isa", busybox_params())
def test_metadata_calls_as_qemu(isa: str, tmp_path: Path,
                                emutrace_here: Callable[..., CompletedProcess]) -> None:
    want, got = _both(isa, tmp_path, SCRIPT, emutrace_here)
    assert want.returncode == 0, want.stderr
    assert b"same-owner-ok" in want.stdout and b"fifo" in want.stdout
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr, 0)
    assert sorted(os.listdir(tmp_path / "emutrace")) == ["f"]


@pytest.mark.busybox
def test_no_set_user_id_bit_and_no_other_owner(
        tmp_path: Path, emutrace_here: Callable[..., CompletedProcess]) -> None:
    """chmod 4755 keeps only the permission bits; chown to another user is EPERM for the
    guest, whoever runs emutrace (root included)."""
    other = os.getuid() + 4242
    got = emutrace_here("run", busybox("x86_64"), "sh", "-c",
                        f"touch f; chmod 4755 f; chown {other} f; echo rc=$?",
                        cwd=tmp_path)
    made = (tmp_path / "f").stat()
    assert made.st_mode & 0o7777 == 0o755
    assert made.st_uid == os.getuid()
    assert b"rc=1" in got.stdout and b"Operation not permitted" in got.stderr


@pytest.mark.busybox
def test_metadata_outside_writable_directories_is_refused(
        tmp_path: Path, emutrace_here: Callable[..., CompletedProcess]) -> None:
    """A file the guest may read but not write keeps its mode, times and links."""
    kept = tmp_path / "kept"
    kept.mkdir()
    target = kept / "file"
    target.write_text("x")
    os.chmod(target, 0o644)
    os.utime(target, (1_000_000, 1_000_000))
    work = tmp_path / "work"
    work.mkdir()
    script = (f"chmod 600 {target}; touch {target}; ln {target} here; "
              f"truncate -s 0 {target}; echo done")
    got = emutrace_here("run", busybox("x86_64"), "sh", "-c", script, cwd=work)
    assert got.stdout.endswith(b"done\n")
    st = target.stat()
    assert (st.st_mode & 0o777, st.st_mtime, st.st_nlink, st.st_size) == (0o644, 1_000_000, 1, 1)
    assert not (work / "here").exists()
