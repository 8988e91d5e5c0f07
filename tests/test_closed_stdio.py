"""emutrace started with a standard descriptor closed (cron, CI runners, `<&-`): no internal
error, none of emutrace's own files takes the number, and the guest finds the descriptor
closed, as the same busybox script finds it when run natively on this host (the oracle)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ENV
from .test_busybox import busybox

SCRIPTS = {
    0: "read x; echo read=$?",
    1: "echo hi; echo rc=$? >&2",
    2: "echo hi >&2; echo rc=$?",
}


def _closed(number: int, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """argv run with descriptor `number` closed; the other two captured."""
    return subprocess.run(argv, cwd=cwd, env=ENV, timeout=120, capture_output=number != 0,
                          stdout=subprocess.PIPE if number == 0 else None,
                          stderr=subprocess.PIPE if number == 0 else None,
                          preexec_fn=lambda: os.close(number))


@pytest.mark.busybox
@pytest.mark.parametrize("number", sorted(SCRIPTS))
def test_guest_finds_it_closed_as_natively(number: int, tmp_path: Path) -> None:
    bb = str(busybox("x86_64"))
    script = SCRIPTS[number]
    want = _closed(number, [bb, "sh", "-c", script], tmp_path)
    got = _closed(number, [sys.executable, "-m", "emutrace", "run", "--backend", "none",
                           bb, "sh", "-c", script], tmp_path)
    assert b"internal error" not in (got.stderr or b"")
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout,
                                                        want.stderr)


@pytest.mark.busybox
def test_no_emutrace_file_takes_a_closed_number(tmp_path: Path) -> None:
    """With standard output closed, the trace file emutrace opens must not become the
    guest's standard output: the guest's write fails (EBADF) and the trace holds no
    guest output."""
    trace = tmp_path / "trace.txt"
    got = _closed(1, [sys.executable, "-m", "emutrace", "run", "-o", str(trace),
                      str(busybox("x86_64")), "sh", "-c", "echo SECRET; echo rc=$? >&2"],
                  tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stderr.endswith(b"rc=1\n")
    text = trace.read_bytes()
    assert b"SECRET" not in text and text.startswith(b"# DURATION")


@pytest.mark.busybox
@pytest.mark.parametrize("confine", [(), ("--unconfined",)], ids=["confined", "unconfined"])
def test_native_target_passes_it_on_closed(confine: tuple[str, ...], tmp_path: Path) -> None:
    bb = str(busybox("x86_64"))
    script = SCRIPTS[1]
    want = _closed(1, [bb, "sh", "-c", script], tmp_path)
    got = _closed(1, [sys.executable, "-m", "emutrace", "run", "--target", "native",
                      *confine, "--backend", "none", bb, "sh", "-c", script], tmp_path)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout,
                                                        want.stderr)
