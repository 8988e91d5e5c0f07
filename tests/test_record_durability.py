"""Durability of `emutrace record`'s data directory (trace/uftrace_write.py): a recorder
killed with SIGKILL mid-run leaves a directory Debian's uftrace 0.13 reads (the files are
written at the start, `info` before any record that needs it); Ctrl-C (SIGINT) leaves a
complete one; calls deeper than uftrace's 1024-level limit are left out and counted."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import ENV, bin_path, run_emutrace


def start_record(out: Path, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "emutrace", "record", "-d", str(out), *argv],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_data(proc: subprocess.Popen[bytes], dat: Path, size: int) -> None:
    """Until `dat` holds at least `size` bytes (several flushes) while `proc` still runs."""
    deadline = time.monotonic() + 120
    while not (dat.exists() and dat.stat().st_size >= size):
        assert proc.poll() is None, "the recorder ended before it was stopped"
        assert time.monotonic() < deadline
        time.sleep(0.05)


def uftrace(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["uftrace", *map(str, argv)], capture_output=True, text=True)


def test_sigkill_leaves_a_readable_directory(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = start_record(out, str(bin_path("x86_64", "fib")), "30")
    wait_for_data(proc, out / "1.dat", 3 << 16)
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    replay = uftrace("replay", "--no-pager", "-d", out)
    assert replay.returncode == 0, replay.stderr
    assert "uftrace stopped tracing with remaining functions" in replay.stdout  # open calls
    dump = uftrace("dump", "-d", out)
    assert dump.returncode == 0, dump.stderr
    entries = dump.stdout.count("[entry]")
    assert entries > 3000 and dump.stdout.count("[entry] fib(") > 3000
    # ours reads the same records, says the recording was cut short, closes the open calls
    info = run_emutrace("info", "-d", out).stdout.decode()
    assert "state:       cut short" in info
    assert f"calls:       {entries} to " in info
    ours = run_emutrace("replay", "-d", out)
    assert ours.returncode == 0, ours.stderr.decode()
    assert ours.stdout.decode().rstrip().endswith("} /* main (at exit) */")


def test_ctrl_c_leaves_a_complete_directory(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    proc = start_record(out, str(bin_path("x86_64", "fib")), "30")
    wait_for_data(proc, out / "1.dat", 2 << 16)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()  # 128 + SIGINT, as the README says
    assert "interrupted" in err.decode()
    assert "records/s" not in err.decode()  # no progress line: stderr is a pipe
    info = uftrace("info", "-d", out)
    # the recording ended by SIGINT: info's wait status says so
    assert "exit status         : terminated by signal: 2 (Interrupt)" in info.stdout, info.stdout
    assert "ended by signal 2 (exit status 130)" in run_emutrace("info", "-d", out).stdout.decode()
    replay = uftrace("replay", "--no-pager", "-d", out)
    assert replay.returncode == 0, replay.stderr
    opened = len(re.findall(r"\) \{$", replay.stdout, re.M))
    closed = len(re.findall(r"\} (= .*; )?/\* ", replay.stdout))
    assert opened == closed > 20  # every frame closed at the interruption
    assert "remaining functions" not in replay.stdout


def test_calls_deeper_than_uftrace_keeps_are_counted(tmp_path: Path) -> None:
    """`calls deep 1100`: deep_recurse is called 1101 times, the outermost at depth 5 (under
    __libc_start_main, __libc_start_call_main, main, run_scenario, scenario_deep); uftrace
    keeps depths 0..1023."""
    out = tmp_path / "deep"
    rec = run_emutrace("record", "-d", out, bin_path("x86_64", "calls"), "deep", "1100")
    assert rec.returncode == 0, rec.stderr.decode()
    dump = uftrace("dump", "-d", out)
    assert dump.returncode == 0, dump.stderr
    depths = [int(d) for d in re.findall(r"depth: (\d+)", dump.stdout)]
    assert max(depths) == 1023
    kept = dump.stdout.count("[entry] deep_recurse(")
    info = run_emutrace("info", "-d", out).stdout.decode()
    m = re.search(r"not recorded: (\d+) calls deeper than 1024", info)
    assert m, info
    assert kept + int(m.group(1)) == 1101
    assert uftrace("replay", "--no-pager", "-d", out).returncode == 0
