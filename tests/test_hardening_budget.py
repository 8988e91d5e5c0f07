"""Issue 10 item 12: a long nanosleep honours --timeout and Ctrl-C; a 1 GiB getrandom
returns promptly (one call's share is bounded, as Linux before 5.18 bounded it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emutrace import errors

from .conftest import ENV, REPO, bin_path, run_emutrace

PROGRAM = bin_path("x86_64", "hard_budget")


@pytest.mark.parametrize("mode", ["sleep", "sleepmax"])
def test_sleep_honours_timeout(mode: str, tmp_path: Path) -> None:
    start = time.monotonic()
    got = run_emutrace("run", "--timeout", "1", PROGRAM, mode, cwd=tmp_path, timeout=60)
    assert got.returncode == errors.EXIT_TIMEOUT, got.stderr
    assert time.monotonic() - start < 30  # was: still running at 60 s


def test_sleep_honours_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                             str(PROGRAM), "sleep"], env=ENV, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(os.listdir(f"/proc/{proc.pid}/task")) < 2:  # the watcher: emulation runs
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    start = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert time.monotonic() - start < 10
    assert "Traceback" not in err.decode()


def test_getrandom_gigabyte_is_prompt(tmp_path: Path) -> None:
    start = time.monotonic()
    got = run_emutrace("run", "--timeout", "30", PROGRAM, "random", cwd=tmp_path, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode() == "getrandom = positive\n"
    assert time.monotonic() - start < 30
