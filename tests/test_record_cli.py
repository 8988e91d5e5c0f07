"""`emutrace record`: the directory a crashing guest leaves is read by Debian's uftrace with
every open frame closed; an existing DIR becomes DIR.old."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from emutrace.session import Process, RunConfig

from .conftest import BUSYBOX, bin_path


def emutrace(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "emutrace", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_record_crash_leaves_readable_dir(tmp_path: Path) -> None:
    (tmp_path / "t.data").mkdir()
    (tmp_path / "t.data" / "mine").write_text("kept")
    r = emutrace("record", "-d", "t.data", str(bin_path("x86_64", "calls")), "crash",
                 cwd=tmp_path)
    assert r.returncode == 139, r.stderr  # SIGSEGV, as qemu-user reports it
    assert (tmp_path / "t.data.old" / "mine").read_text() == "kept"
    replay = subprocess.run(["uftrace", "replay", "--no-pager", "-d", "t.data"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    # the crash is inside crash_deref, called from scenario_crash: both entered, then closed
    assert re.search(r"crash_deref\(.*\)( \{|;)$", replay, re.M), replay
    # the outermost frame closed, under the alias `emutrace run` shows for glibc's
    # __libc_start_main / __libc_start_main_impl (one address; the .sym lists it first)
    assert replay.rstrip().endswith("} /* __libc_start_main_impl */")
    info = subprocess.run(["uftrace", "info", "-d", "t.data"], cwd=tmp_path,
                          capture_output=True, text=True, check=True).stdout
    assert "terminated by signal: 11" in info, info  # info's exit_status is a wait status


def test_record_stops_leave_readable_dirs(tmp_path: Path) -> None:
    """--max-insns and --timeout end the run mid-recursion: uftrace still reads the
    directory, and every frame entered (fib's recursion) is closed at the end.  (The
    timeout is 2 s of wall time: with 0.5 s a loaded CI machine stopped before fib.)"""
    fib = str(bin_path("x86_64", "fib"))
    # (fib 40 for the timeout: the native record writer finishes fib 30 within 2 s)
    for name, opts, n in (("m", ["--max-insns", "300000"], "30"),
                          ("t", ["--timeout", "2"], "40")):
        r = emutrace("record", "-d", name, *opts, fib, n, cwd=tmp_path)
        assert r.returncode in (124, 125), r.stderr  # README: timeout, max-insns
        replay = subprocess.run(["uftrace", "replay", "--no-pager", "-d", name], cwd=tmp_path,
                                capture_output=True, text=True, check=True).stdout
        opened = len(re.findall(r"\) \{$", replay, re.M))
        closed = len(re.findall(r"\} (= .*; )?/\* ", replay))
        assert opened == closed > 0
        assert re.search(r"fib\(\d+\) \{$", replay, re.M)


def peak_rss_kib(argv: list[str], cwd: Path) -> tuple[int, int]:
    """(peak RSS in KiB, exit status) of `python -m emutrace ARGV`: VmHWM (the process's
    peak RSS since its exec; ru_maxrss would include the forked pytest worker's pages),
    polled until it exits: it only grows."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", *argv], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak_kib = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            break
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak_kib = max(peak_kib, int(line.split()[1]))
        time.sleep(0.1)
    return peak_kib, proc.wait()


def test_record_memory_is_bounded(tmp_path: Path) -> None:
    """~3×10^5 records streamed: the emutrace process's peak RSS stays near its start-up
    size (measured ~50 MB; keeping the records in a list, as `run` does, peaks at
    ~95 MB for the same 3×10^5 records, measured in-process with the ListSink).  `replay`
    of that recording streams too (measured ~45 MB; reading the records into a list first,
    as it did before, ~110 MB)."""
    peak_kib, code = peak_rss_kib(["record", "-d", "big", "--max-insns", "3000000",
                                   str(bin_path("x86_64", "fib")), "30"], tmp_path)
    assert code == 125
    records = (tmp_path / "big" / "1.dat").stat().st_size // 32  # with its return value
    assert records > 100_000
    assert 0 < peak_kib < 70_000
    peak_kib, code = peak_rss_kib(["replay", "-d", "big"], tmp_path)
    assert code == 0
    assert 0 < peak_kib < 70_000


def test_run_memory_is_bounded(tmp_path: Path) -> None:
    """`run` keeps its records in a temporary file until it prints them (trace/spill.py):
    the same ~3×10^5 records as above, peak RSS near start-up size (kept in a list, as
    before, the same run peaked at ~110 MB); the text has a line per call."""
    peak_kib, code = peak_rss_kib(["run", "-o", "trace.txt", "--max-insns", "3000000",
                                   str(bin_path("x86_64", "fib")), "30"], tmp_path)
    assert code == 125
    lines = (tmp_path / "trace.txt").read_text().count("fib(")
    assert lines > 50_000
    assert 0 < peak_kib < 70_000


def test_record_runs_what_the_program_execs_untraced(tmp_path: Path) -> None:
    """`record`'s directory holds the first image: what it execve()s runs untraced (it was
    traced into records nobody kept), with the program's output unchanged."""
    busybox = str(BUSYBOX / "x86_64" / "busybox")
    config = RunConfig(busybox, ["sh", "-c", f"exec {busybox} echo hi"], backend="int3",
                       env={}, trace_execs=False)
    process = Process(config, warn=lambda _m: None)
    result = process.run()
    assert result.stop.kind == "exec" and process.backend is not None
    after = result.next_process
    assert after is not None and after.config.backend == "none" and after.backend is None
    assert after.run().exit_code == 0
    # the default: an exec'd image is traced as its program was
    traced = Process(replace(config, trace_execs=True), warn=lambda _m: None).run()
    assert traced.next_process is not None and traced.next_process.backend is not None
    done = subprocess.run([sys.executable, "-m", "emutrace", "record", "-d",
                           str(tmp_path / "d"), busybox, "sh", "-c", f"exec {busybox} echo hi"],
                          capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stdout == b"hi\n"
    assert b"(execve) runs untraced" in done.stderr
