"""The program of the command line as the kernel finds it: `--root R /bin/x` runs R's
/bin/x (a chroot's view), and a `#!` script runs through its interpreter with
binfmt_script's arguments (interpreter, its one optional argument, the script's path,
ARGS) — checked against the host kernel running the same script."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import ENV, REPO, run_emutrace

MIPSEL_ROOT = REPO / ".cache" / "rootfs" / "mipsel"


@pytest.mark.skipif(not (MIPSEL_ROOT / "bin" / "readlink").exists(),
                    reason="no mipsel root in .cache/rootfs (emutrace rootfs mipsel)")
def test_an_absolute_program_is_the_roots(tmp_path: Path) -> None:
    """The host's /bin/readlink is x86_64; the root's is mipsel, and its /proc/self/exe
    names it as the guest sees it."""
    done = run_emutrace("run", "--root", MIPSEL_ROOT, "/bin/readlink", "/proc/self/exe",
                        cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout == b"/bin/readlink\n"


def test_a_relative_program_stays_the_hosts(tmp_path: Path) -> None:
    done = run_emutrace("run", "--root", MIPSEL_ROOT if MIPSEL_ROOT.exists() else "/",
                        "bin/readlink", cwd=tmp_path)
    assert done.returncode == 66 and b"bin/readlink" in done.stderr


@pytest.mark.parametrize("line", ["#!/bin/sh", "#!/bin/sh -e", "#! /bin/sh  -e  "])
def test_a_script_runs_through_its_interpreter(line: str, tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text(f'{line}\necho "0=$0 args=$* flags=$-"\nfalse\necho "after false"\n'
                      f'exit 3\n')
    script.chmod(0o755)
    want = subprocess.run(["./s.sh", "a", "b c"], cwd=tmp_path, env=ENV, capture_output=True)
    got = run_emutrace("run", "./s.sh", "a", "b c", cwd=tmp_path)
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr,
                                                        want.returncode)
    assert got.stdout.startswith(b"0=./s.sh args=a b c")


def test_a_script_whose_interpreter_is_missing_says_so(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("#!/nonexistent/interp\n")
    script.chmod(0o755)
    done = run_emutrace("run", script, cwd=tmp_path)
    assert done.returncode == 66
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "/nonexistent/interp" in lines[0], lines
