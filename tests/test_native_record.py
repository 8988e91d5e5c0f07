"""`emutrace record --target native`: the native run's records stream into a uftrace data
directory through the tracer's sink (emutrace/tracer.py), as an emulated recording's do.

Oracle: the same program run natively in this process, its records kept in a list (the
tracer's default sink): the directory read back names the same calls and returns in the same
nesting, start-up and unwinding included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emutrace.native_session import NativeProcess
from emutrace.session import RunConfig
from emutrace.trace.canonical import canonical_text
from emutrace.trace.uftrace_read import load_recording

from .conftest import ENV, bin_path, run_emutrace
from .test_native_engine import _stdout_to_devnull


@pytest.mark.parametrize(("program", "args", "backend"), [
    ("calls", ["tail"], "int3"), ("calls", ["longjmp"], "int3"), ("fib", ["12"], "step"),
    ("calls.dyn", ["qsort"], "hwbp")])
def test_record_native_equals_the_run(program: str, args: list[str], backend: str,
                                      tmp_path: Path) -> None:
    path = bin_path("x86_64", program)
    data = tmp_path / "d"
    # the program's stdout on /dev/null and its environment the same in both runs (glibc
    # asks isatty of a character device only; the environment's size moves the stack)
    done = subprocess.run([sys.executable, "-m", "emutrace", "record", "--target", "native",
                           "--unconfined", "--backend", backend, "-d", str(data), str(path),
                           *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=300, env=ENV)
    assert done.returncode == 0, done.stderr
    records, name, isa = load_recording(str(data))
    assert isa == "x86_64"
    got = canonical_text(records, name)
    with _stdout_to_devnull():
        want = NativeProcess(RunConfig(str(path), args, backend=backend, env=dict(ENV)),
                             unconfined=True).run()
    assert want.exit_code == 0 and len(want.records) > 20
    assert got == canonical_text(want.records, name)


def test_record_native_refusals_are_usage_errors(tmp_path: Path) -> None:
    """What `run --target native` refuses, `record --target native` refuses the same way,
    before a directory is made."""
    data = tmp_path / "d"
    done = run_emutrace("record", "--target", "native", "--stats", "-d", data,
                        bin_path("x86_64", "fib"), "5")
    assert done.returncode == 64 and b"--stats" in done.stderr
    done = run_emutrace("record", "--target", "native", "-d", data,
                        bin_path("aarch64", "fib"), "5")
    assert done.returncode == 64 and b"--target native" in done.stderr
    assert not data.exists()


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_record_native_c_writer_equals_python_loop(isa: str, tmp_path: Path) -> None:
    """`record --target native` on the C loop (int3, lazy cleanup): the record writer in C
    (native/ufwrite.c, bound to the ptrace port) writes the calls and returns C finishes
    — most of fib's — and the directory reads back the same records (times, addresses,
    depths, values) as the Python loop's, where Python writes every record.  The traces
    themselves are held to the program's own `-finstrument-functions` record by
    tests/test_native_loop.py.  (x86_64 and i386: the ISAs the native target runs.)"""
    from emutrace.cli.recording import prepare_dir, recorded

    from .test_native_loop import _fixed_random

    path = bin_path(isa, "fib")
    read: dict[str, list] = {}
    stats: dict[str, dict[str, int]] = {}
    for engine in ("python", "native"):
        with _fixed_random(isa):
            process = NativeProcess(RunConfig(str(path), ["12"], backend="int3",
                                              engine=engine, env=dict(ENV)), unconfined=True)
        with _stdout_to_devnull():
            result = recorded(process, prepare_dir(str(tmp_path / engine)), [str(path), "12"])
        assert result.exit_code == 0
        records, _name, _isa = load_recording(str(tmp_path / engine))
        read[engine] = list(records)
        stats[engine] = dict(process.backend.native_stats)  # type: ignore[union-attr]
    assert len(read["python"]) > 400
    assert read["native"] == read["python"]
    assert stats["native"]["c_written"] > 0.5 * len(read["python"]), stats["native"]
