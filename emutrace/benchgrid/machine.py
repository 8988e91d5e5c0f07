"""Where a benchmark ran (CPU model, whether virtualised, code revision) and silencing the
guest's standard streams for in-process runs.

Whether the machine is a virtual machine is recorded because debug traps are VM exits there
(reference/unicorn-and-hardware-facts.md §2.1): a native-cost prediction and the measured
emulator times are read differently on bare metal.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import emutrace

SOURCE_ROOT = Path(emutrace.__file__).resolve().parent.parent


def cpuinfo_field(name: str) -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    return None


def machine_description() -> str:
    model = cpuinfo_field("model name") or platform.processor() or platform.machine()
    flags = (cpuinfo_field("flags") or "").split()
    virtual = "virtual machine (cpuid hypervisor flag)" if "hypervisor" in flags else \
        "no hypervisor flag"
    return f"{model}, {os.cpu_count()} CPUs, {virtual}, Linux {platform.release()}, " \
           f"Python {platform.python_version()}"


def git_revision() -> str:
    """HEAD of the emutrace checkout, "+dirty" when emutrace/ has uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=SOURCE_ROOT, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    try:
        rev = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "emutrace")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return rev + ("+dirty" if dirty else "")


@contextlib.contextmanager
def guest_stdio_silenced() -> Iterator[None]:
    """Point fds 0, 1, 2 at /dev/null.  The Linux layer duplicates the host's fds 0–2 when a
    Process is built, so build the Process inside this, not only run it."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        yield
    finally:
        for fd, copy in zip((0, 1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)
