"""`emutrace record`: the directory a crashing guest leaves is read by Debian's uftrace with
every open frame closed; an existing DIR becomes DIR.old."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import bin_path


def emutrace(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "emutrace", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_record_crash_leaves_readable_dir(tmp_path: Path) -> None:
    (tmp_path / "t.data").mkdir()
    (tmp_path / "t.data" / "mine").write_text("kept")
    r = emutrace("record", "-d", "t.data", str(bin_path("x86_64", "calls")), "crash",
                 cwd=tmp_path)
    assert r.returncode == 139, r.stderr  # SIGSEGV, as qemu-user reports it
    assert (tmp_path / "t.data.old" / "mine").read_text() == "kept"
    replay = subprocess.run(["uftrace", "replay", "--no-pager", "-d", "t.data"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    # the crash is inside crash_deref, called from scenario_crash: both entered, then closed
    assert "crash_deref() {" in replay or "crash_deref();" in replay
    assert replay.rstrip().endswith("} /* __libc_start_main */")
