"""kill(-1, sig) as kill(2) and kernel/signal.c give it: every process the caller may
signal except itself (here: the guest's own processes only, never the host's), and ESRCH
when there is nobody else.  (No native oracle: as root on the host it would signal every
process.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import run_emutrace
from .test_busybox import busybox


@pytest.mark.busybox
@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_kill_minus_one_spares_the_caller(isa: str, tmp_path: Path) -> None:
    bb = busybox(isa)
    script = (f"{bb} sleep 30 & kill -TERM -1; echo alive=$?; wait $!; echo status=$?; "
              "kill -TERM -1; echo again=$?")
    got = run_emutrace("run", "--backend", "none", bb, "sh", "-c", script, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout == b"alive=0\nstatus=143\nagain=1\n"  # 143: 128 + SIGTERM
    assert b"No such process" in got.stderr
