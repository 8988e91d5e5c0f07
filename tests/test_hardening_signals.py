"""Issue 10 item 19: SIGTERM and SIGHUP stop a traced run as Ctrl-C does (the trace is
written, exit 128 + N); a stop signal while the output is written is deferred, not a
KeyboardInterrupt traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emutrace.cli.deferred import stop_signals_deferred

from .conftest import ENV, REPO, bin_path


def _emulating(pid: int) -> bool:
    """The watcher thread exists only while emulation runs (target/unicorn_run.py)."""
    return len(os.listdir(f"/proc/{pid}/task")) > 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_stop_signal_writes_trace(sig: signal.Signals, tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", "-o", str(out),
                             str(bin_path("x86_64", "fib")), "40"], env=ENV, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not _emulating(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # let some calls be traced
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 128 + sig, text
    assert "Traceback" not in text
    assert "interrupted at pc" in text
    trace = out.read_text()
    assert "fib(" in trace  # uftrace-style lines of the calls seen before the stop
    assert trace.count("\n") > 10


def test_signal_while_writing_is_deferred() -> None:
    with stop_signals_deferred() as late:
        os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt here
        time.sleep(0.05)
        written = True
    assert written
    assert late.signal == "SIGINT"
    assert late.exit_code == 130
