"""Threads on the native engine: the same records as the Python reference, byte for byte.

`threads` (testbins/src/threads.c: three pthreads on a condition variable and a mutex, a
timed wait, TLS) runs under the deterministic scheduler (machine/linux/threads.py), which
switches threads at blocking system calls and every QUANTUM instructions — so a switch can
fall between a call and its target's first instruction, or inside a block holding an armed
site.  At each switch the native engine hands C the incoming thread's state
(int3_native.py, step_native.py `switch_thread`); these tests hold its records to the
reference's on every ISA: the records `run` formats (its spill file, C writing the main
thread's records) and `record`'s uftrace directory (C writing every thread's records into
its task's file).

The program reads the host's clock (its timed wait's deadline), so both runs are given the
same made-up clock: the guest then takes the same path in both.

The reference is held to an oracle that owes nothing to emutrace by
tests/test_threads.py (each thread's calls equal the program's own
-finstrument-functions record under qemu-user); with the default engine that test traces on
the native engine as well."""

from __future__ import annotations

import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from emutrace.machine.linux import sys_proc
from emutrace.session import Process, RunConfig
from emutrace.trace.events import Record
from emutrace.trace.spill import SpillSink
from emutrace.trace.uftrace_write import sink_for_image

from .conftest import ISAS, bin_path
from .test_native_engine import _stdout_to_devnull
from .test_native_writer import files

# (backend, cleanup) on every ISA; the others on one ISA per delivery (breakpoint bytes,
# ARM's A32/Thumb sites, site hooks): their thread switching is int3's
EVERY_ISA = (("int3", "lazy"), ("step", "lazy"))
SOME_ISAS = (("int3", "strict"), ("hwbp", "lazy"), ("entry", "lazy"))
DELIVERIES = ("x86_64", "arm", "mipsel")


def _made_up_clock() -> types.SimpleNamespace:
    """`time` as sys_proc reads it, answering 1 µs later at each call."""
    now = [1_700_000_000 * 10**9]

    def ns(*_clock: int) -> int:
        now[0] += 1000
        return now[0]

    return types.SimpleNamespace(
        clock_gettime_ns=ns, time_ns=ns, time=lambda: ns() / 10**9,
        **{n: getattr(time, n) for n in dir(time) if n.startswith("CLOCK_")})


@pytest.fixture(autouse=True)
def _same_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sys_proc, "time", _made_up_clock())
    yield


def _spilled(isa: str, backend: str, cleanup: str, engine: str) -> tuple[list[Record], int]:
    """The records of one run as `run` keeps them (its spill file), and the exit code."""
    sys_proc.time = _made_up_clock()  # (each run from the same start)
    process = Process(RunConfig(str(bin_path(isa, "threads")), backend=backend,
                                cleanup=cleanup, engine=engine, env={}),
                      warn=lambda _m: None)
    assert process.engine == engine
    sink = SpillSink()
    process.sink = sink
    with _stdout_to_devnull():
        code = process.run().exit_code
    return list(sink), code


def _check_spilled(isa: str, backend: str, cleanup: str) -> None:
    want, want_code = _spilled(isa, backend, cleanup, "python")
    got, got_code = _spilled(isa, backend, cleanup, "native")
    assert want_code == got_code == 0
    assert {r.tid for r in want} == {0, 1, 2, 3}, "four threads traced"
    assert_same_records(got, want)


def assert_same_records(got: list[Record], want: list[Record]) -> None:
    """The same records in the same order; the first difference named by its index."""
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, (n, g, w)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(("backend", "cleanup"), EVERY_ISA)
def test_threads_native_equals_python(isa: str, backend: str, cleanup: str) -> None:
    _check_spilled(isa, backend, cleanup)


@pytest.mark.parametrize("isa", DELIVERIES)
@pytest.mark.parametrize(("backend", "cleanup"), SOME_ISAS)
def test_threads_native_equals_python_other_backends(isa: str, backend: str,
                                                     cleanup: str) -> None:
    _check_spilled(isa, backend, cleanup)


def _recorded(isa: str, engine: str, out: Path) -> Process:
    sys_proc.time = _made_up_clock()
    out.mkdir()
    process = Process(RunConfig(str(bin_path(isa, "threads")), backend="int3",
                                engine=engine, env={}), warn=lambda _m: None)
    sink = sink_for_image(str(out), process.image, ["threads"])
    process.sink = sink
    with _stdout_to_devnull():
        status = process.run().exit_code
    sink.close(status)
    return process


@pytest.mark.parametrize("isa", ISAS)
def test_threads_recording_native_equals_python(isa: str, tmp_path: Path) -> None:
    """`record`'s directory: one task file per thread, the same bytes; C wrote records of
    the other threads too (its writer follows the running thread)."""
    _recorded(isa, "python", tmp_path / "py")
    process = _recorded(isa, "native", tmp_path / "nat")
    want, got = files(tmp_path / "py"), files(tmp_path / "nat")
    assert {"1.dat", "2.dat", "3.dat", "4.dat"} <= want.keys()
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert stats["c_records_other_threads"] > 0, stats
