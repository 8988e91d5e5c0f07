"""Dynamic programs on the native engine: the same records as the Python reference.

`auto` runs every program natively, dynamic ones included (ld.so's start-up, the module
map growing as libraries are mapped, PLT stubs, lazy binding through the resolver).  Held
to the reference:

* `calls.dyn qsort` (a program linked against Debian's cross glibc, run with the cross
  sysroot as its root; libc's qsort calls back into the program): every record equal on
  every ISA, for int3 lazy and step; strict, hwbp and entry on one ISA per delivery.  On
  x86_64 and i386 the dynamic loader reads the time-stamp counter (`rdtsc`, which Unicorn
  2.1.4 lets no hook answer), so values differ between any two runs: there the records are
  compared without their values.
* Debian's own `sort` and `sed` (the roots of scripts/setup.sh) under `emutrace record`:
  the same calls and returns (canonical traces of the recordings) on the seven Debian ISAs;
  their values carry the host's pid and free memory, which no two runs share.

tests/test_dynamic_trace.py and tests/test_debian_programs.py hold the default engine (the
native one) to oracles that owe nothing to emutrace (the program's own
-finstrument-functions record under qemu-user, qemu-user's output)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from emutrace import native
from emutrace.elf import load_image
from emutrace.errors import Unsupported
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_text
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.spill import SpillSink
from emutrace.trace.uftrace_read import load_recording

from .conftest import ISAS, bin_path
from .test_debian_programs import DEBIAN_ISAS, RUN_ENV, root_of
from .test_dynamic import sysroot
from .test_native_engine import _stdout_to_devnull
from .test_native_threads import assert_same_records

READS_TSC = ("x86_64", "i386")  # ld.so's start-up reads rdtsc: values differ run to run
EVERY_ISA = (("int3", "lazy"), ("step", "lazy"))
SOME_ISAS = (("int3", "strict"), ("hwbp", "lazy"), ("entry", "lazy"))
DELIVERIES = ("aarch64", "arm", "mipsel")


def _records(isa: str, backend: str, cleanup: str, engine: str) -> list[Record]:
    process = Process(RunConfig(str(bin_path(isa, "calls.dyn")), ["qsort"],
                                root=str(sysroot(isa)), backend=backend, cleanup=cleanup,
                                engine=engine, env={}), warn=lambda _m: None)
    assert process.engine == engine
    sink = SpillSink()
    process.sink = sink
    with _stdout_to_devnull():
        assert process.run().exit_code == 0
    records = list(sink)
    if isa in READS_TSC:
        return [replace(r, args=()) if isinstance(r, Entry)
                else replace(r, retval=None) if isinstance(r, Exit) else r
                for r in records]
    return records


def _check(isa: str, backend: str, cleanup: str) -> None:
    want = _records(isa, backend, cleanup, "python")
    got = _records(isa, backend, cleanup, "native")
    assert len(want) > 1000  # ld.so's start-up, libc, the program
    assert_same_records(got, want)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(("backend", "cleanup"), EVERY_ISA)
def test_dynamic_native_equals_python(isa: str, backend: str, cleanup: str) -> None:
    _check(isa, backend, cleanup)


@pytest.mark.parametrize("isa", DELIVERIES)
@pytest.mark.parametrize(("backend", "cleanup"), SOME_ISAS)
def test_dynamic_native_equals_python_other_backends(isa: str, backend: str,
                                                     cleanup: str) -> None:
    _check(isa, backend, cleanup)


# one Debian program per ISA, each program on several
DEBIAN_CELLS = {isa: ("sort", "-r", "usr/share/doc/sed/copyright") if n % 2 == 0
                else ("sed", "s/GNU/gnu/g", "usr/share/doc/sed/copyright")
                for n, isa in enumerate(DEBIAN_ISAS)}


def _recorded(isa: str, engine: str, out: Path) -> str:
    """The canonical trace of `emutrace record` of the ISA's Debian program."""
    program, *args = DEBIAN_CELLS[isa]
    argv = [sys.executable, "-m", "emutrace", "record", "--root", ".", "--engine", engine,
            "-d", str(out), f"./usr/bin/{program}" if program == "sort" else f"./bin/{program}",
            *args]
    done = subprocess.run(argv, cwd=root_of(isa), capture_output=True, timeout=300,
                          env=RUN_ENV)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    records, symbolize, _isa = load_recording(str(out))
    return canonical_text(records, symbolize)


@pytest.mark.parametrize("isa", DEBIAN_ISAS)
def test_debian_program_native_equals_python(isa: str, tmp_path: Path) -> None:
    want = _recorded(isa, "python", tmp_path / "py")
    got = _recorded(isa, "native", tmp_path / "nat")
    assert want.count("\n") > 1000
    assert got == want


def test_auto_is_native_for_dynamic_programs() -> None:
    """The default engine of a dynamic program that can create threads is the native one."""
    image = load_image(str(bin_path("aarch64", "calls.dyn")), dynamic=True)
    assert image.interpreter is not None
    process = Process(RunConfig(str(bin_path("aarch64", "calls.dyn")), ["qsort"],
                                root=str(sysroot("aarch64")), backend="int3", env={}),
                      warn=lambda _m: None)
    assert process.engine == "native"


def test_auto_without_the_library_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the native library `auto` traces on the reference, and says so in one line
    (never a silent slow run)."""
    def missing() -> None:
        raise Unsupported("the native library is not built")

    monkeypatch.setattr(native, "load", missing)
    said: list[str] = []
    process = Process(RunConfig(str(bin_path("x86_64", "fib")), ["5"], backend="int3",
                                env={}), warn=said.append)
    assert process.engine == "python"
    assert len(said) == 1 and "Python reference" in said[0] and "not built" in said[0]
