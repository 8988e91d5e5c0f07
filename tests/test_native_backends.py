"""`bts` and `btf` on the native hot path (emutrace/native/branch.c,
backends/branch_native.py) against the Python reference (backends/bts.py, btf.py).

* Differential: on every ISA, for both backends, the committed test programs traced by the
  two engines give identical records (times, addresses, argument and return values,
  unwinding), counters (bts: records, interrupts, drained; btf: traps; both: calls,
  returns, tail_calls), instruction counts, stop and open frames.  The cells cover direct,
  indirect and tail calls, longjmp, a crash with records still buffered, typed values C
  leaves to Python (strings, structs, floats), a stripped binary, and each ISA's own edge
  program (delay slots, Thumb, compressed calls, local entries, EXRL).  bts also runs with
  buffers of 1 and 7 records (an interrupt per record) and one larger than C's own buffer
  (records handed to Python undecoded until the interrupt).  Signal handlers (Trap frames
  between buffered records; the program forks, so it runs in a process of its own):
  tests/test_signal_traces.py, against the program's own record.
* Oracle: the native engine's trace of `calls all` equals what the `-finstrument-functions`
  build records about itself under qemu-user (bts on x86_64, btf on aarch64; the
  differential ties the other cells to the reference, which tests/test_branch_backends.py
  and test_mechanisms.py check against step and the records).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.backends import NATIVE_BACKENDS
from emutrace.benchgrid.spec import parse_spec
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import ISAS, bin_path, run_qemu
from .test_trace_oracle import namer

BRANCH_BACKENDS = ("bts", "btf")
# every ISA: small arguments (the suite's budget), what the two paths do differently
CELLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("calls", ("tail",)), ("fib", ("12",)), ("typed", ()),
)
# once (ISA-independent bookkeeping): longjmp, a crash with records buffered, a stripped
# binary, libc callbacks, a fault's stop, freestanding code, the smallest program, x86_64's
# memory-operand calls
ONCE_ISA = "x86_64"
ONCE_CELLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("calls", ("longjmp",)), ("calls", ("crash",)), ("calls.stripped", ("tail",)),
    ("calls", ("qsort",)), ("isadep", ("same",)), ("hard_faults", ("div",)),
    ("hello_fs", ()), ("counts", ()), ("edge_callmem", ()),
)
# each ISA's own edge program (testbins/README.md)
EDGE_CELLS = {"i386": (("edge_pcthunk", ()),), "arm": (("edge_interwork", ()),),
              "mips": (("edge_delay", ()),), "mipsel": (("edge_delay", ()),),
              "riscv64": (("edge_compressed", ()),), "ppc64le": (("edge_localentry", ()),),
              "s390x": (("edge_exrl", ()),)}


def _run(isa: str, program: str, args: tuple[str, ...], backend: str, engine: str,
         bts_buffer: int = 4096) -> tuple[Process, tuple]:
    process = Process(RunConfig(str(bin_path(isa, program)), list(args), backend=backend,
                                engine=engine, bts_buffer=bts_buffer), warn=lambda m: None)
    r = process.run()
    return process, (r.records, r.backend_stats, r.guest_insns, r.stop, r.open_frames,
                     r.exit_code)


def test_branch_backends_are_native() -> None:
    assert set(BRANCH_BACKENDS) <= set(NATIVE_BACKENDS)


@pytest.mark.parametrize("backend", BRANCH_BACKENDS)
@pytest.mark.parametrize("isa", ISAS)
def test_native_branch_backend_equals_python(isa: str, backend: str) -> None:
    cells = (*CELLS, *EDGE_CELLS.get(isa, ()), *(ONCE_CELLS if isa == ONCE_ISA else ()))
    for program, args in cells:
        _, want = _run(isa, program, args, backend, "python")
        process, got = _run(isa, program, args, backend, "native")
        assert process.engine == "native"
        assert len(want[0]) > 4, (program, args)
        assert got == want, (program, args)
        if backend == "btf" and program == "fib":  # C snapshotted most events
            stats = process.backend.native_stats  # type: ignore[union-attr]
            assert stats["buffered"] > 3 * stats["live"], stats


# (program, args, --bts-buffer): an interrupt per record; every 7; more records (fib 22:
# ~87,000) than C's own buffer holds (65,536) in a BTS buffer that never fills
# (x86_64 only: the mechanism is ISA-independent)
BUFFER_CELLS = [(isa, program, args, buffer) for isa in ("x86_64", "mips")
                for program, args in (("calls", ("crash",)), ("fib", ("17",)))
                for buffer in (1, 7, 100_000)] + [("x86_64", "fib", ("22",), 100_000)]


@pytest.mark.parametrize(("isa", "program", "args", "buffer"), BUFFER_CELLS)
def test_native_bts_buffer_sizes(isa: str, program: str, args: tuple[str, ...],
                                 buffer: int) -> None:
    """Interrupt counting, a crash with records in the buffer, and a buffer larger than
    C's (records handed over in parts, decoded at the interrupt or the end)."""
    _, want = _run(isa, program, args, "bts", "python", buffer)
    _, got = _run(isa, program, args, "bts", "native", buffer)
    assert got == want
    stats = want[1]
    assert stats["interrupts"] == stats["records"] // buffer
    # (what is left at the end: the records since the last interrupt; how many depends on
    # the environment's size — glibc's start-up walks argv and envp — so it may be 0)
    assert stats["drained"] == stats["records"] % buffer
    if args == ("22",):
        assert stats["records"] > 65536


@pytest.mark.oracle
@pytest.mark.parametrize(("isa", "backend"), [("x86_64", "bts"), ("aarch64", "btf")])
def test_native_branch_trace_equals_self_record(isa: str, backend: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # `calls all` writes calls-out.txt where it runs
    instr = str(bin_path(isa, "calls.instr"))
    record = run_qemu(isa, instr, "all").stderr.decode()
    instr_name = namer(instr)
    program_functions = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, program_functions)
    plain = str(bin_path(isa, "calls"))
    result = Process(RunConfig(plain, ["all"], backend=backend, engine="native"),
                     warn=lambda m: None).run()
    got = canonical_text(result.records, namer(plain), program_functions)
    assert got.count("\n") > 100
    assert got == want


def test_bench_specs_name_the_native_engine() -> None:
    """`emutrace bench --backend bts:native,btf:native` runs them on the native engine."""
    assert parse_spec("bts:native").engine == parse_spec("btf:native").engine == "native"
    assert parse_spec("bts").engine == parse_spec("btf").engine == "python"
