"""Dynamic programs (first slice): testbins/<isa>/calls.dyn (calls linked
dynamically against the Debian cross glibc) run with `--root` the cross sysroot give what
`qemu-<isa>-static -L` the same sysroot gives: stdout, stderr and exit status.  The ld.so
and libc.so.6 come from the root (PT_INTERP, then the guest's own mmap of files).

An ISA where this does not work is a strict xfail read from the capability table
(`run_dynamic`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from tests.conftest import ENV, ISAS, TESTBINS, qemu_binary, run_emutrace


def sysroot(isa: str) -> Path:
    """Debian's cross sysroot of the ISA (libc6-<arch>-cross); the host's own for x86_64."""
    return Path("/") if isa == "x86_64" else Path("/usr") / by_name(isa).identity.triple


def gap(isa: str) -> list[pytest.MarkDecorator]:
    cap = by_name(isa).capabilities[Cap.RUN_DYNAMIC]
    return [] if cap.works else [pytest.mark.xfail(reason=cap.reason, strict=True)]


# calls.dyn is linked at a fixed address, calls.dynpie is a dynamic PIE (Debian gcc's default):
# the kernel (and emutrace) choose its base
@pytest.mark.parametrize("program_name", ["calls.dyn", "calls.dynpie"])
@pytest.mark.parametrize("isa", [pytest.param(i, marks=gap(i)) for i in ISAS])
def test_dynamic_calls_like_qemu(isa: str, program_name: str) -> None:
    program = TESTBINS / isa / program_name
    root = sysroot(isa)
    want = subprocess.run([qemu_binary(isa), "-L", str(root), str(program), "recursion"],
                          capture_output=True, timeout=120, env=ENV)
    assert want.returncode == 0 and b"fact(10) = 3628800" in want.stdout
    got = run_emutrace("run", "--root", root, program, "recursion")
    assert (got.stdout, got.stderr, got.returncode) == (want.stdout, want.stderr,
                                                        want.returncode)

