"""What every benchmark script here shares: where the repository is, the machine and code
revision a result was taken on, and silencing the guest's standard streams for in-process
runs — the same helpers `emutrace bench` uses (`emutrace.benchgrid.machine`)."""

from __future__ import annotations

import datetime as dt
import os
import platform

import unicorn

from emutrace.benchgrid.machine import SOURCE_ROOT, cpuinfo_field, git_revision
from emutrace.benchgrid.machine import guest_stdio_silenced as stdout_to_devnull

ROOT = SOURCE_ROOT
__all__ = ["ROOT", "machine_info", "stdout_to_devnull"]


def machine_info(command: str, **extra: object) -> dict[str, object]:
    """Where and when a result was taken (written into every results file)."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "cpu": cpuinfo_field("model name") or platform.processor() or "unknown",
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "unicorn": unicorn.__version__,
        **extra,
        "emutrace_git": git_revision(),
        "platform": platform.platform(),
    }
