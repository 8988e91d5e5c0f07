"""A write error of the trace output while the program runs (disk full, file too large):
one line on stderr, exit 74 (EX_IOERR), no traceback, and what was written before stays
readable — by Debian's uftrace for a recording, as whole lines for `run -o`.

The full disk is /dev/full (ENOSPC) or RLIMIT_FSIZE (EFBIG; Python ignores SIGXFSZ), which
need neither root nor a mount."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
from pathlib import Path

from .conftest import ENV, bin_path, run_emutrace


def limited(*argv: str | Path, max_bytes: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """emutrace under RLIMIT_FSIZE: a write past `max_bytes` of any file fails."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return subprocess.run([sys.executable, "-m", "emutrace", *map(str, argv)], cwd=cwd,
                          env=ENV,
                          preexec_fn=limit, capture_output=True, text=True, timeout=300)


def one_line(stderr: str, what: str) -> None:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if what in line]
    assert len(lines) == 1 and "cannot write" in lines[0], stderr


def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def fib_calls(lines: list[str]) -> tuple[list[int], list[int], int]:
    """(arguments of the fib calls entered, of those still open, number of returns) in a
    replay text, checking that each fib(n) returned F(n)."""
    args: list[int] = []  # the open calls
    entered: list[int] = []
    returned = 0
    for line in lines:
        if m := re.search(r"\| +fib\((\d+)\)( = (\d+);| \{)$", line):
            if m.group(3) is not None:
                assert int(m.group(3)) == fibonacci(int(m.group(1))), line
                returned += 1
            else:
                args.append(int(m.group(1)))
                entered.append(int(m.group(1)))
        elif m := re.search(r"\} = (\d+); /\* fib \*/$", line):
            assert int(m.group(1)) == fibonacci(args.pop()), line
            returned += 1
    return entered, args, returned


def test_record_disk_full_keeps_what_was_written(tmp_path: Path) -> None:
    proc = limited("record", "-d", "f.data", bin_path("x86_64", "fib"), "18",
                   max_bytes=200_000, cwd=tmp_path)
    assert proc.returncode == 74, proc.stderr
    one_line(proc.stderr, "f.data")
    dat = tmp_path / "f.data" / "1.dat"
    assert 0 < dat.stat().st_size <= 200_000
    # uftrace reads what is there; every fib(n) that returned in it returned F(n) (fib.c)
    theirs = subprocess.run(["uftrace", "replay", "--no-pager", "-d", "f.data"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    entered, open_calls, returned = fib_calls(theirs.splitlines())
    assert entered[:3] == [18, 17, 16] and open_calls[0] == 18 and returned > 1000
    ours = run_emutrace("replay", "-d", tmp_path / "f.data")
    assert ours.returncode == 0, ours.stderr.decode()


def test_run_output_disk_full(tmp_path: Path) -> None:
    program = bin_path("x86_64", "fib")
    proc = run_emutrace("run", "--backend", "int3", "-o", "/dev/full", program, "10")
    assert proc.returncode == 74
    one_line(proc.stderr.decode(), "-o /dev/full")
    # a file cut at 4 KiB: its whole lines are the start of fib's call tree
    proc2 = limited("run", "-o", "t.txt", program, "10", max_bytes=4096, cwd=tmp_path)
    assert proc2.returncode == 74
    one_line(proc2.stderr, "-o t.txt")
    kept = (tmp_path / "t.txt").read_text().splitlines()[:-1]  # the last may be cut
    entered, _open, returned = fib_calls(kept)
    assert kept[0].startswith("# DURATION") and entered[:2] == [10, 9] and returned > 20
