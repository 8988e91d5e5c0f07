"""`run --no-follow-forks` (strace's spelling; following is uftrace's default and emutrace's):
only the first process is traced — the children a shell pipeline forks, and what they
execve, run untraced and write no trace file — while the program's output and exit status
stay what they are with every child traced."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from emutrace.native import available as native_available

from .conftest import BUSYBOX, run_emutrace

SHELL = BUSYBOX / "x86_64" / "busybox"
# a pipeline (two forked children, one execs) and a last command the shell execs itself
SCRIPT = 'echo piped | $0 cat; $0 true'

pytestmark = pytest.mark.skipif(not SHELL.exists(), reason="no busybox in .cache")


def traced(tmp_path: Path, *options: str) -> tuple[bytes, list[str]]:
    done = run_emutrace("run", "--backend", "int3", *options, "-o", "t", SHELL, "sh", "-c",
                        SCRIPT, SHELL, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr and b"# DURATION" not in done.stderr
    return done.stdout, sorted(p.name for p in tmp_path.iterdir())


def test_children_traced_by_default(tmp_path: Path) -> None:
    out, files = traced(tmp_path)
    assert out == b"piped\n"
    children = [f for f in files if f.split(".")[1:2] and f.split(".")[1].isdigit()]
    assert len(children) >= 2, files  # t.<pid> of each side of the pipe


def test_no_follow_forks_traces_the_first_process_only(tmp_path: Path) -> None:
    out, files = traced(tmp_path, "--no-follow-forks")
    assert out == b"piped\n"
    # the first process's trace, and its own execve's (`true`, exec'd by the shell)
    assert files == ["t", "t.exec"], files
    first = (tmp_path / "t").read_text()
    assert first.startswith("# DURATION") and len(first.splitlines()) > 100  # (stripped)


# a subshell: a forked child that runs 50 loop iterations of the shell's own code (no
# execve), then the parent's own line
SUBSHELL = '(i=0; while [ $i -lt 50 ]; do i=$((i+1)); done; echo child $i); echo parent'
# each mechanism's counter of what it saw: frozen at the fork in a child that is not followed
COUNTERS = {"int3": "traps", "step": "steps", "bts": "records"}


def counters(stderr: bytes, backend: str) -> list[int]:
    """The mechanism's counter of each process's `--stats` line, in the order they ended
    (the child first: the parent waits for it)."""
    found = re.findall(rf"^emutrace: {backend}: .*?\b{COUNTERS[backend]}=(\d+)",
                       stderr.decode(), re.M)
    return [int(n) for n in found]


@pytest.mark.parametrize(("backend", "engine"), [("int3", "native"), ("int3", "python"),
                                                 ("step", "native"), ("bts", "native")])
def test_unfollowed_child_runs_untraced(tmp_path: Path, backend: str, engine: str) -> None:
    """The child's output is the program's own (busybox on this host), and its mechanism
    counted nothing after the fork: its count (the parent's at the fork, inherited) is at
    most the parent's at its end, where a followed child's is far above it."""
    if engine == "native" and not native_available(backend):
        pytest.skip(f"no native engine for {backend} here")
    host = subprocess.run([SHELL, "sh", "-c", SUBSHELL], capture_output=True, check=True)
    seen = {}
    for follow in ("--follow-forks", "--no-follow-forks"):
        done = run_emutrace("run", "--backend", backend, "--engine", engine, follow,
                            "--stats", "-o", tmp_path / f"t{follow}", SHELL, "sh", "-c",
                            SUBSHELL, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == host.stdout == b"child 50\nparent\n"
        child, parent = counters(done.stderr, backend)
        seen[follow] = child - parent
    assert seen["--no-follow-forks"] <= 0  # nothing counted in the child after the fork
    assert seen["--follow-forks"] > 50  # (the loop's work, when the child is traced)
