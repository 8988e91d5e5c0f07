"""wait4/waitid of a guest name the guest's children only, never another child of the
process emutrace runs in (a program embedding emutrace, a test worker with a helper
process): a run that cannot fork (embedded) whose guest then waits gets ECHILD at once, as
a process without children does on Linux, and the other child is neither waited for nor
reaped.  (A test worker with a multiprocessing helper hung in wait4(-1) before.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from emutrace.session import Process, RunConfig

from .conftest import bin_path


def test_an_embedded_run_does_not_wait_for_the_hosts_children(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "60"])
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        # sigctx forks (EAGAIN in an embedded run) and then waitpid()s twice; waiting for
        # `other` instead would end the run only at its --timeout
        result = Process(RunConfig(str(bin_path("x86_64", "sigctx")), [], backend="none",
                                   timeout=30), warn=lambda m: None).run()
        assert (result.stop.kind, result.exit_code) == ("exit", 0), result.stop
        assert other.poll() is None  # not reaped by the guest's wait
    finally:
        os.chdir(here)
        other.kill()
        other.wait()
