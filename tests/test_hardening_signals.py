"""SIGTERM and SIGHUP stop a traced run as Ctrl-C does (the trace is
written, exit 128 + N); a stop signal while the output is written is deferred, not a
KeyboardInterrupt traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ENV, REPO, bin_path, wait_until_emulated


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_stop_signal_writes_trace(sig: signal.Signals, tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", "-o", str(out),
                             str(bin_path("x86_64", "fib")), "40"], env=ENV, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # main and some fib calls have been traced (C writes them: a CPU second of fib is ~10^6
    # records, whose text then takes several more; a fraction of one is plenty)
    wait_until_emulated(proc, cpu=0.3)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 128 + sig, text
    assert "Traceback" not in text
    assert "interrupted at pc" in text
    trace = out.read_text()
    assert "fib(" in trace  # uftrace-style lines of the calls seen before the stop
    assert trace.count("\n") > 10


DEFERRED = """
import os, signal, time
from emutrace.cli.deferred import stop_signals_deferred
with stop_signals_deferred() as late:
    os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt here
    time.sleep(0.05)
    print("written", flush=True)
print(late.signal, late.exit_code)
"""


def test_signal_while_writing_is_deferred() -> None:
    # a subprocess: the deferral works in the main thread, which a pytest-xdist worker's
    # test may not run in
    got = subprocess.run([sys.executable, "-c", DEFERRED], env=ENV, cwd=REPO,
                         capture_output=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode() == "written\nSIGINT 130\n"
