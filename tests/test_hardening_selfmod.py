"""Issue 10 item 22: self-reading and self-modifying code under the mechanisms that patch or
probe code.  testbins/src/hard_selfmod.c (compiled here, static) checksums code that has
run, calls a copy of a function that has run, overwrites a function that has run with
another's code and calls it, then calls an untouched function again.  Its stdout must equal
the oracle's (a native run on x86_64, qemu-user elsewhere) under every backend, and the
calls after the rewrite must still be traced (strict cleanup and hwbp lost them after a
call into fresh code).  ISAs: x86_64 and aarch64 (breakpoint bytes), riscv64 (site hooks)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import ENV, TESTBINS, run_emutrace, run_qemu

SOURCE = TESTBINS / "src" / "hard_selfmod.c"
TRIPLES = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
           "riscv64": "riscv64-linux-gnu"}
BACKENDS = (("int3",), ("int3", "--cleanup", "strict"), ("entry",), ("hwbp",))


@pytest.fixture(scope="module", params=sorted(TRIPLES))
def built(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, bytes]:
    isa = request.param
    program = tmp_path_factory.mktemp("selfmod") / f"hard_selfmod.{isa}"
    subprocess.run([f"{TRIPLES[isa]}-gcc", "-static", "-O1", "-g", "-o", program, SOURCE],
                   check=True, timeout=120)
    oracle = (subprocess.run([program], env=ENV, capture_output=True, timeout=60)
              if isa == "x86_64" else run_qemu(isa, program))
    assert oracle.returncode == 0, oracle.stderr
    # the program did what it says: the copy and the overwritten function answer 42
    assert b"copy 42\noverwritten 42\ncaller still 17\n" in oracle.stdout
    return isa, program, oracle.stdout


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: "-".join(b[::2]))
def test_self_reading_and_rewritten_code_run_as_natively(built: tuple[str, Path, bytes],
                                                         backend: tuple[str, ...],
                                                         tmp_path: Path) -> None:
    isa, program, expected = built
    trace = tmp_path / "trace.txt"
    got = run_emutrace("run", "--backend", *backend, "-o", trace, program, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout == expected  # its own bytes read back, the copy and rewrite run
    text = trace.read_text()
    # after the copy was called and patchme rewritten, calls are still traced
    assert "caller(4) {" in text and "} = 17; /* caller */" in text
    assert "} = 0; /* main */" in text
