"""`emutrace run -o FILE`: the trace file is checked and opened before the program runs, so a
bad `-o` is a usage error (exit 64) with no guest output, and the file is never looked up by
name again (a guest cannot swap a symlink in under it while it runs)."""

from __future__ import annotations

import os
from pathlib import Path

from .conftest import bin_path, run_emutrace


def _refused(proc, needle: str) -> None:  # type: ignore[no-untyped-def]
    err = proc.stderr.decode()
    assert proc.returncode == 64, err
    assert proc.stdout == b"", "the program must not have run"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("emutrace: -o ") and needle in lines[0], err


def test_output_directory_is_a_usage_error(tmp_path: Path) -> None:
    prog = bin_path("x86_64", "calls")
    _refused(run_emutrace("run", "--backend", "int3", "-o", str(tmp_path), prog, "recursion",
                          cwd=tmp_path), "directory")


def test_output_in_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    prog = bin_path("x86_64", "calls")
    target = tmp_path / "missing" / "dir" / "t.txt"
    _refused(run_emutrace("run", "--backend", "int3", "-o", str(target), prog, "recursion",
                          cwd=tmp_path), "No such file")


def test_output_symlink_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    link = tmp_path / "trace.txt"
    os.symlink(outside, link)
    prog = bin_path("x86_64", "calls")
    proc = run_emutrace("run", "--backend", "int3", "-o", str(link), prog, "recursion",
                        cwd=tmp_path)
    assert proc.returncode == 64
    assert outside.read_text() == "keep\n"


def test_output_written_when_good(tmp_path: Path) -> None:
    prog = bin_path("x86_64", "calls")
    out = tmp_path / "t.txt"
    proc = run_emutrace("run", "--backend", "int3", "-o", str(out), prog, "recursion",
                        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    text = out.read_text()
    assert text.startswith("# DURATION") and "fact(" in text
