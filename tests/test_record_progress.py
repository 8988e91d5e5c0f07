"""`emutrace record` shows a progress line on stderr when stderr is a terminal (a pty
here), and nothing when it is a pipe (tests/test_record_durability.py's Ctrl-C test)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from .conftest import ENV, bin_path


def test_progress_on_a_terminal_only(tmp_path: Path) -> None:
    # --timeout: the recording lasts 2 s of wall time (the line appears after 1 s); fib 36
    # takes far longer than that (fib 32, 14 M events, ended in 2 s once the native engine
    # recorded ~7 M events/s on x86_64)
    argv = [sys.executable, "-m", "emutrace", "record", "--timeout", "2",
            str(bin_path("x86_64", "fib")), "36"]
    master, slave = pty.openpty()
    proc = subprocess.Popen([*argv[:4], "-d", str(tmp_path / "tty"), *argv[4:]], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait() == 124  # --timeout
    assert b"records/s" in seen and b"recording " in seen, seen
