"""`run --no-follow-forks` (strace's spelling; following is uftrace's default and emutrace's):
only the first process is traced — the children a shell pipeline forks, and what they
execve, run untraced and write no trace file — while the program's output and exit status
stay what they are with every child traced."""

from __future__ import annotations

from pathlib import Path

import pytest

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
