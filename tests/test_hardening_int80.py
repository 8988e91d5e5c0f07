"""`int $0x80` in x86_64 code runs the i386 system call (numbers, ebx ecx
edx ... arguments, 32-bit pointers, the result sign-extended into rax), as Linux's IA-32
compat entry does.  The oracle is the same program run natively on this x86_64 host."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .conftest import ENV, TESTBINS, run_emutrace

SOURCE = TESTBINS / "src" / "hard_int80.c"


def test_int80_runs_the_i386_call(tmp_path: Path) -> None:
    program = tmp_path / "hard_int80"
    subprocess.run(["x86_64-linux-gnu-gcc", "-static", "-O1", "-g", "-o", program, SOURCE],
                   check=True, timeout=120)
    native = subprocess.run([program], env=ENV, capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    assert b"pid matches = 1" in native.stdout  # the host has the IA-32 entry
    for backend in ("none", "int3"):
        trace = ["-o", tmp_path / "trace.txt"] if backend != "none" else []  # (untraced)
        got = run_emutrace("run", "--backend", backend, *trace, program, cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        assert got.stdout == native.stdout
    # the trace went on through the compat calls: main returned, its printf ran after them
    trace = (tmp_path / "trace.txt").read_text()
    assert "} = 0; /* main */" in trace and "printf(" in trace
