"""`step` on the native hot path (emutrace/native/step.c, backends/step_native.py) against
the Python reference (backends/step.py).

* Differential: the cells tests/test_native_engine.py runs for int3, on every ISA, plus
  step's own ISA cases (delay slots, Thumb, riscv64's alternate link register) and the
  typed-values program once (strings, structs and floats: values C leaves to Python):
  identical records (times, addresses, values, unwinding), counters, instruction counts,
  stop and open frames.  On fib, C finished almost every transfer.
* A second run of the same file in the process starts with C's flow table filled by the
  first (`_preload`): no address goes to Python, and the run is still the reference's.
* `auto` picks the native step engine for every program, threaded ones too
  (tests/test_native_threads.py holds those to the reference).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.cli.main import main
from emutrace.discover.memo import file_key, forget
from emutrace.session import Process, RunConfig

from .conftest import ISAS, bin_path
from .test_native_engine import LOWERED, LOWERED_CELLS, ONCE_CELLS, ONCE_ISA, OTHER_CELLS

# values C does not snapshot (char *, structs, floats) go through Python: checked once
TYPED_CELL = (("typed", ()),)
# step's own ISA cases where int3's differential runs only hello_fs: delay slots (mips),
# Thumb interworking (arm), calls and returns through t0 (riscv64 `maybe_return`)
STEP_CELLS = {"mips": (("fib", ("15",)),), "arm": (("calls", ("tail",)),),
              "riscv64": (("calls", ("tail",)),)}


def _run(isa: str, program: str, args: tuple[str, ...], engine: str) -> tuple[Process, tuple]:
    process = Process(RunConfig(str(bin_path(isa, program)), list(args), backend="step",
                                engine=engine), warn=lambda m: None)
    r = process.run()
    return process, (r.records, r.backend_stats, r.guest_insns, r.stop, r.open_frames,
                     r.exit_code)


@pytest.mark.parametrize("isa", ISAS)
def test_native_step_equals_python(isa: str) -> None:
    cells = (*(LOWERED_CELLS if isa in LOWERED else OTHER_CELLS), *STEP_CELLS.get(isa, ()))
    if isa == ONCE_ISA:
        cells = (*cells, *ONCE_CELLS, *TYPED_CELL)
    for program, args in cells:
        _, want = _run(isa, program, args, "python")
        process, got = _run(isa, program, args, "native")
        assert len(want[0]) > 100, (program, args)
        assert want[1]["steps"] == want[2] > 1000  # the counter counts every instruction
        assert got == want, (program, args)
        if program == "fib":  # the hot path is C: Python saw first calls only
            stats = process.backend.native_stats  # type: ignore[union-attr]
            assert 10 * stats["python_transfers"] < stats["c_transfers"], stats


@pytest.mark.parametrize("isa", ["x86_64", "mips"])
def test_preloaded_flows_equal_python(isa: str) -> None:
    """The flow words a first native run decoded, handed to C before a second run of the
    same file: nothing is decoded during it, and its records and counters are the
    reference's (mips: delay slots; ARM, whose mode is chosen at run time, never preloads)."""
    image = Process(RunConfig(str(bin_path(isa, "calls")), ["tail"], backend="step",
                              engine="native"), warn=lambda m: None).image
    forget("step_flows", file_key(image.path, image.bias))  # (an earlier test's run)
    _, want = _run(isa, "calls", ("tail",), "python")
    first, got_first = _run(isa, "calls", ("tail",), "native")
    second, got_second = _run(isa, "calls", ("tail",), "native")
    assert first.backend.native_stats["python_decodes"] > 100  # type: ignore[union-attr]
    assert second.backend.native_stats["python_decodes"] == 0  # type: ignore[union-attr]
    assert got_first == want
    assert got_second == want


def test_auto_engine_for_step() -> None:
    hello = str(bin_path("x86_64", "hello_fs"))
    threads = str(bin_path("x86_64", "threads"))
    assert Process(RunConfig(hello, [], backend="step"), warn=lambda m: None).engine == "native"
    assert Process(RunConfig(threads, [], backend="step"),
                   warn=lambda m: None).engine == "native"


def test_native_step_traces_threads(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "trace"
    code = main(["run", "--engine", "native", "--backend", "step", "-o", str(out),
                 str(bin_path("x86_64", "threads"))])
    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    assert [line for line in text.splitlines() if line.startswith("# thread")] == [
        f"# thread {n}" for n in range(4)]
