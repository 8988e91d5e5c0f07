"""A trace cut short always says so: `run`'s trace on stderr redirected to a file that
cannot grow (RLIMIT_FSIZE; a full disk alike) ends with exit 74, never with the guest's
status as if the trace were whole (Python's buffered writer took the short write at the
limit for success and dropped the rest: the file ended at 64 KiB, exit 0, not a word)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.errors import EXIT_IOERR

from .conftest import ENV, bin_path

LIMIT = 1 << 16


def run_into(err: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """emutrace ARGV with stderr into `err`, which cannot grow past LIMIT bytes."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    with err.open("wb") as stderr:
        return subprocess.run([sys.executable, "-m", "emutrace", *argv], env=ENV,
                              cwd=err.parent, preexec_fn=limit, stdout=subprocess.PIPE,
                              stderr=stderr, timeout=300)


@pytest.mark.parametrize("engine", ["native", "python"])
def test_trace_on_a_stderr_that_cannot_grow_exits_74(engine: str, tmp_path: Path) -> None:
    err = tmp_path / "err.txt"
    done = run_into(err, "run", "--backend", "int3", "--engine", engine,
                    str(bin_path("x86_64", "fib")), "18")
    assert done.stdout == b"fib(18) = 2584\n"  # the guest ran to its end
    assert done.returncode == EXIT_IOERR
    assert err.stat().st_size == LIMIT  # what fitted (the error line could not)


def test_whole_trace_on_stderr_exits_with_the_guests_status(tmp_path: Path) -> None:
    err = tmp_path / "err.txt"
    done = run_into(err, "run", "--backend", "int3", str(bin_path("x86_64", "fib")), "8")
    assert done.returncode == 0 and err.stat().st_size < LIMIT
    assert err.read_text().splitlines()[-1].endswith("} /* exit (at exit) */")


REPLACE = """
import os, resource, sys
from emutrace.trace.uftrace_write import _replace
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
directory = os.open(os.path.dirname(sys.argv[1]), os.O_PATH | os.O_DIRECTORY)
try:
    _replace(directory, os.path.basename(sys.argv[1]), b"x" * (1 << 17))
except OSError as e:
    print("OSError", e.errno)
"""


def test_a_recordings_file_replaced_whole_or_an_error(tmp_path: Path) -> None:
    """`info`, `task.txt`, the map and the `.sym` files of a recording (uftrace_write's
    `_replace`): a file past the limit is an error (exit 74 for `record`), never a file cut
    at the limit and put in place."""
    target = tmp_path / "mod.sym"
    target.write_bytes(b"old")
    done = subprocess.run([sys.executable, "-c", REPLACE, str(target)], env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["OSError", "27"], done  # EFBIG
    assert target.read_bytes() == b"old"  # the old file stays whole
