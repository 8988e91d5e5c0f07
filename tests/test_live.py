"""`emutrace live` (uftrace's `live`): its output is `record` followed by `replay` of the
same command — the program's output, then the replayed call graph, shaped by the replay
options given to live — and its temporary directory is gone afterwards unless kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ENV, REPO, bin_path, cli_argv

# (ISA, program arguments, display options live hands to replay)
CASES = [("x86_64", ["tail"], ["-F", "scenario_tail", "-D", "3"]),
         ("aarch64", ["recursion"], ["-N", "printf", "--no-args"]),
         ("s390x", ["tail"], [])]


def emutrace(tmp: Path, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess:
    """The CLI with TMPDIR set to `tmp` (where live's temporary directory goes; the guest
    sees it too: its stack addresses move with the environment's length)."""
    return subprocess.run([sys.executable, "-m", "emutrace", *cli_argv(args)], cwd=tmp,
                          capture_output=True, timeout=300, env={**ENV, "TMPDIR": str(tmp)})


@pytest.mark.parametrize(("isa", "argv", "shown"), CASES, ids=[c[0] for c in CASES])
def test_live_is_record_then_replay(tmp_path: Path, isa: str, argv: list[str],
                                    shown: list[str]) -> None:
    program = bin_path(isa, "calls")
    temp = tmp_path / "tmp"
    temp.mkdir()
    live = emutrace(temp, "live", *shown, program, *argv)
    assert live.returncode == 0, live.stderr.decode()
    assert list(temp.iterdir()) == []  # the temporary directory is removed

    data = tmp_path / "data"
    record = emutrace(temp, "record", "-d", data, program, *argv)
    replay = emutrace(temp, "replay", "-d", data, *shown)
    assert record.returncode == replay.returncode == 0
    assert live.stdout == record.stdout + replay.stdout
    assert b"# DURATION" in live.stdout and live.stderr == record.stderr + replay.stderr


def test_live_keeps_the_directory_it_is_given(tmp_path: Path) -> None:
    data = tmp_path / "kept"
    live = emutrace(tmp_path, "live", "-d", data, "-F", "fib", bin_path("riscv64", "fib"), "8")
    assert live.returncode == 0, live.stderr.decode()
    replay = emutrace(tmp_path, "replay", "-d", data, "-F", "fib")
    assert live.stdout.endswith(replay.stdout) and b"fib(8)" in replay.stdout


def test_live_keep_names_the_temporary_directory(tmp_path: Path) -> None:
    live = emutrace(tmp_path, "live", "--keep", bin_path("x86_64", "fib"), "5")
    assert live.returncode == 0, live.stderr.decode()
    kept = live.stderr.decode().split("kept in ")[1].strip()
    assert Path(kept).parent.parent == tmp_path and (Path(kept) / "info").exists()


@pytest.mark.parametrize("option", [["-o", "t"], ["--stats"]])
def test_live_refuses_what_neither_uses(tmp_path: Path, option: list[str]) -> None:
    live = emutrace(tmp_path, "live", *option, bin_path("x86_64", "fib"), "5")
    assert live.returncode == 64, live.stderr.decode()
    assert live.stderr.decode().startswith("emutrace: live ") and live.stdout == b""
    assert [p for p in tmp_path.iterdir() if p.name.startswith("emutrace-live")] == []


def test_live_help_lists_both_sides() -> None:
    out = subprocess.run([sys.executable, "-m", "emutrace", "live", "--help"], cwd=REPO,
                         capture_output=True, text=True, env=ENV).stdout
    for option in ("--keep", "-d DIR", "--backend", "-F FUNC", "--time-filter", "--no-args"):
        assert option in out, option


def test_live_with_syscalls_is_record_then_replay(tmp_path: Path) -> None:
    """A record option (--syscalls) goes to the recording, and the replay shows its calls."""
    program = bin_path("aarch64", "fib")
    temp = tmp_path / "tmp"
    temp.mkdir()
    live = emutrace(temp, "live", "--syscalls", "-D", "4", program, "6")
    data = tmp_path / "data"
    record = emutrace(temp, "record", "--syscalls", "-d", data, program, "6")
    replay = emutrace(temp, "replay", "-d", data, "-D", "4")
    assert live.returncode == record.returncode == replay.returncode == 0
    assert live.stdout == record.stdout + replay.stdout
    assert b"linux:exit_group(0);" in live.stdout
