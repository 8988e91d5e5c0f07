"""Self-reading and self-modifying code under the mechanisms that patch or
probe code.  testbins/src/hard_selfmod.c (compiled here, static) checksums code that has
run, calls a copy of a function that has run, overwrites a function that has run with
another's code and calls it, then calls an untouched function again.  Its stdout must equal
the oracle's (a native run on x86_64, qemu-user elsewhere) under every backend, and the
calls after the rewrite must still be traced (strict cleanup and hwbp lost them after a
call into fresh code).  ISAs: x86_64 and aarch64 (breakpoint bytes), riscv64 (site hooks)."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import ENV, TESTBINS, run_emutrace, run_qemu

SOURCE = TESTBINS / "src" / "hard_selfmod.c"
TRIPLES = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
           "riscv64": "riscv64-linux-gnu"}
NATIVE, STRICT = ("int3", "--engine", "native"), ("int3", "--cleanup", "strict")
# every backend on x86_64; the breakpoint-byte ones on aarch64; on riscv64 (site hooks,
# nothing patched) the two the JIT-call fix is about — each cell is a traced glibc run
CELLS = [("x86_64", b) for b in (("int3",), STRICT, ("entry",), ("hwbp",), NATIVE)] + [
    ("aarch64", b) for b in (("int3",), STRICT, ("entry",), NATIVE)] + [
    ("riscv64", b) for b in (STRICT, ("hwbp",))]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, bytes]]:
    """The program for an ISA (built once) and its oracle's stdout."""
    @functools.cache
    def built(isa: str) -> tuple[Path, bytes]:
        program = tmp_path_factory.mktemp("selfmod") / f"hard_selfmod.{isa}"
        subprocess.run([f"{TRIPLES[isa]}-gcc", "-static", "-O1", "-g", "-o", program, SOURCE],
                       check=True, timeout=120)
        oracle = (subprocess.run([program], env=ENV, capture_output=True, timeout=60)
                  if isa == "x86_64" else run_qemu(isa, program))
        assert oracle.returncode == 0, oracle.stderr
        # the program did what it says: the copy and the overwritten function answer 42
        assert b"copy 42\noverwritten 42\ncaller still 17\n" in oracle.stdout
        return program, oracle.stdout
    return built


@pytest.mark.parametrize(("isa", "backend"), CELLS,
                         ids=[f"{i}-{'-'.join(b[::2])}" for i, b in CELLS])
def test_self_reading_and_rewritten_code_run_as_natively(
        build: Callable[[str], tuple[Path, bytes]], isa: str, backend: tuple[str, ...],
        tmp_path: Path) -> None:
    program, expected = build(isa)
    trace = tmp_path / "trace.txt"
    got = run_emutrace("run", "--backend", *backend, "-o", trace, program, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout == expected  # its own bytes read back, the copy and rewrite run
    text = trace.read_text()
    # after the copy was called and patchme rewritten, calls are still traced
    assert "caller(4) {" in text and "} = 17; /* caller */" in text
    assert "} = 0; /* main */" in text
