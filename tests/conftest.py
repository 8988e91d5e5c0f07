"""Shared helpers: where the committed test programs are, and how to run a program under
emutrace and under qemu-user (the oracle) the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.isa import MODULES, by_name

REPO = Path(__file__).resolve().parent.parent
TESTBINS = REPO / "testbins"
BUSYBOX = REPO / ".cache" / "busybox"
ISAS = MODULES
# PYTHONPATH: `python -m emutrace` in a subprocess runs the code beside these tests (a
# second checkout or worktree), not whatever checkout is installed in editable mode.
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": "/nonexistent",
       "PYTHONPATH": str(REPO)}


def bin_path(isa: str, name: str) -> Path:
    return TESTBINS / isa / name


def run_emutrace(*args: str | os.PathLike[str], cwd: Path | None = None,
                 stdin: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m emutrace ARGS` in a subprocess, with a small fixed environment.  A `run`
    without `--backend` gets `--backend none`: tests about running (not tracing) compare
    stderr with qemu's, and the default backend would add the trace there."""
    argv = [str(a) for a in args]
    if argv[:1] == ["run"] and "--backend" not in argv:
        argv[1:1] = ["--backend", "none"]
    return subprocess.run([sys.executable, "-m", "emutrace", *argv], cwd=cwd,
                          input=stdin, capture_output=True, timeout=timeout, env=ENV)


def qemu_binary(isa: str) -> str:
    name = f"qemu-{by_name(isa).identity.qemu}-static"
    path = shutil.which(name)
    if path is None:  # not a skip: CI installs qemu-user-static, its absence is a failure
        pytest.fail(f"{name} not found: install qemu-user-static (make setup does)")
    return path


def run_qemu(isa: str, program: str | os.PathLike[str], *args: str, cwd: Path | None = None,
             stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([qemu_binary(isa), str(program), *args], cwd=cwd, input=stdin,
                          capture_output=True, timeout=timeout, env=ENV)


def shell_status(returncode: int) -> int:
    """subprocess reports a killed child as -signal; a shell (and emutrace) as 128+signal."""
    return 128 - returncode if returncode < 0 else returncode
