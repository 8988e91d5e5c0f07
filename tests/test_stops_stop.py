"""Every stop stops: a guest blocked in a host call (open of a FIFO nobody opens, a write
to a pipe nobody reads) ends with --timeout and with SIGTERM, Ctrl-C's way (the watcher
interrupts the blocked call: target/host_calls.py).  Before, these runs never ended.  The
limits are generous for a loaded machine; without the interrupt they are never met."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ENV, wait_until_blocked
from .test_busybox import busybox

LIMIT = 30.0  # seconds from the stop to the end of the run


@pytest.mark.busybox
def test_timeout_ends_an_open_of_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    got = subprocess.run([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                          "--timeout", "1", busybox("x86_64"), "cat", fifo],
                         capture_output=True, env=ENV, timeout=LIMIT + 60)
    assert got.returncode == 124, got.stderr  # EXIT_TIMEOUT
    assert b"--timeout reached" in got.stderr
    assert time.monotonic() - started < LIMIT


@pytest.mark.busybox
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_a_write_to_a_full_pipe(stop: signal.Signals, tmp_path: Path) -> None:
    read_end, write_end = os.pipe()  # nobody reads: `yes` fills it and blocks
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                             busybox("x86_64"), "yes"], stdout=write_end,
                            stderr=subprocess.PIPE, env=ENV)
    os.close(write_end)
    try:
        wait_until_blocked(proc)
        proc.send_signal(stop)
        started = time.monotonic()
        _, err = proc.communicate(timeout=LIMIT + 60)
        assert time.monotonic() - started < LIMIT
        assert proc.returncode == 128 + stop, err
        assert b"interrupted" in err
    finally:
        proc.kill()
        os.close(read_end)


def _descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out.update(map(int, kids))
        todo.extend(map(int, kids))
    return out


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its (new) parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.busybox
@pytest.mark.parametrize("stop", ["SIGTERM", "--timeout"])
def test_no_guest_process_outlives_a_stopped_run(stop: str, tmp_path: Path) -> None:
    """A shell with a background job and a foreground one (each a forked guest process):
    after the stop, neither is left running."""
    bb = busybox("x86_64")
    extra = ["--timeout", "15"] if stop == "--timeout" else []
    script = f"{bb} sleep 300 & {bb} sleep 301; echo never"  # (forks both)
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", "--backend", "none",
                             *extra, bb, "sh", "-c", script],
                            stderr=subprocess.PIPE, env=ENV, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while len(_descendants(proc.pid)) < 2:  # both sleeps forked
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        guests = _descendants(proc.pid)
        if stop == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=LIMIT + 60)
        assert proc.returncode == (124 if stop == "--timeout" else 128 + signal.SIGTERM), err
        assert b"internal error" not in err
        deadline = time.monotonic() + LIMIT
        while any(_alive(p) for p in guests) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in guests if _alive(p)]
    finally:
        proc.kill()
        for p in _descendants(proc.pid):
            os.kill(p, signal.SIGKILL)
