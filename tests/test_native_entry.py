"""`entry` on the Unicorn hot path (`--engine native`, backends/entry_native.py and
native/entryprobe.c) against the Python reference (backends/entry.py).

* Differential, all ten ISAs: identical records (times, addresses, argument and return
  values), counters (probes, patches, traps, stepovers, simulated, functions), instruction
  counts, stop, open frames and exit status for `run`; identical uftrace directories for
  `record` and records of `run`'s spill file, which C's record writer writes.
  C takes the entry probes on every ISA — patch delivery (x86_64, i386, aarch64, arm in
  both instruction sets, ppc, ppc64le, s390x: C steps over the displaced instruction) and
  hook delivery (mips, mipsel, riscv64: the block hook sees a block start at a probe); the
  fib cell checks that C did finish most probe traps (`c_entries`).  Hook delivery's probes
  inside a block (riscv64's `__riscv_restore_N`, entered by falling through from the one
  before) become Python's code hooks when the block is first seen: `savres.Os.instr` on
  riscv64.
* The oracle (the program's own `-finstrument-functions` record under qemu-user) runs
  through the default engine, now the native one: tests/test_trace_oracle.py -k entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.session import Process, RunConfig
from emutrace.trace.spill import SpillSink
from emutrace.trace.uftrace_write import sink_for_image

from .conftest import ISAS, bin_path

# where C steps over the entry probes itself (entry_native.EntryProbesInC._probe_in_c)
C_PROBES = [isa for isa in ISAS if any(b.works for b in by_name(isa).breakpoints)]
# where C's block hook takes them (hook delivery: hooked_sites.every_site_hooked)
HOOKED_PROBES = [isa for isa in ISAS if not any(b.works for b in by_name(isa).breakpoints)]
CELLS = (("calls", ("tail",)), ("fib", ("12",)))  # (fib: only where C takes the probes)
ONCE_ISA = "x86_64"  # ISA-independent bookkeeping: a longjmp leaves frames without returns
ONCE_CELLS = (("calls", ("longjmp",)),)


def _process(isa: str, program: str, args: tuple[str, ...], engine: str) -> Process:
    return Process(RunConfig(str(bin_path(isa, program)), list(args), backend="entry",
                             engine=engine), warn=lambda m: None)


def _run(isa: str, program: str, args: tuple[str, ...], engine: str) -> tuple[Process, tuple]:
    process = _process(isa, program, args, engine)
    r = process.run()
    return process, (r.records, r.backend_stats, r.guest_insns, r.stop, r.open_frames,
                     r.exit_code)


def test_c_takes_the_probes_on_every_isa() -> None:
    assert set(C_PROBES) == {"x86_64", "i386", "aarch64", "arm", "ppc", "ppc64le", "s390x"}
    assert set(HOOKED_PROBES) == {"mips", "mipsel", "riscv64"}


@pytest.mark.parametrize("isa", ISAS)
def test_native_entry_equals_python(isa: str) -> None:
    cells = CELLS + (ONCE_CELLS if isa == ONCE_ISA else ())
    for program, args in cells:
        _, want = _run(isa, program, args, "python")
        process, got = _run(isa, program, args, "native")
        assert len(want[0]) > 100, (program, args)
        assert want[1]["traps"] > 100
        assert got == want, (program, args)
        stats = process.backend.native_stats  # type: ignore[union-attr]
        if isa in C_PROBES and program == "fib":
            # fib's calls are entry probes C finished: Python saw start-up, first calls of
            # libc code with string arguments, and syscalls
            assert stats["c_entries"] > 0.8 * want[1]["stepovers"], stats
        elif isa in HOOKED_PROBES and program == "fib":
            # (traps: the probe hits and the returns' hook hits, about as many)
            assert stats["c_entries"] > 0.8 * want[1]["traps"] / 2, stats


def test_hooked_probes_inside_a_block_become_python_hooks() -> None:
    """riscv64 -msave-restore: `__riscv_restore_4` falls through into `__riscv_restore_2`
    and `__riscv_restore_0`, whose probes lie inside the block that starts at the first
    (the block hook never sees a block start there): they are handed to Python as the
    reference's code hooks, the block translated again — the same records and counters
    as the reference, with C taking the other probes."""
    _, want = _run("riscv64", "savres.Os.instr", ("4",), "python")
    process, got = _run("riscv64", "savres.Os.instr", ("4",), "native")
    assert got == want
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert stats["probes_inside_blocks"] >= 2 and stats["c_entries"] > 100, stats


def _record(isa: str, program: str, args: tuple[str, ...], engine: str,
            out: Path) -> tuple[int, Process]:
    out.mkdir()
    process = _process(isa, program, args, engine)
    sink = sink_for_image(str(out), process.image, [program, *args])
    process.sink = sink
    status = process.run().exit_code
    sink.close(status)
    return sink.count, process


@pytest.mark.parametrize("isa", ["x86_64", "arm", "s390x", "riscv64"])
def test_native_entry_recording_equals_python(isa: str, tmp_path: Path) -> None:
    """`record`: C's record writer takes the calls C's probes record (hotpath.c entry_call)
    and the returns C finishes, as int3's; the directory is the reference's byte for byte
    (patch delivery in one instruction set and in two, hook delivery)."""
    want_n, _ = _record(isa, "calls", ("tail",), "python", tmp_path / "python")
    got_n, process = _record(isa, "calls", ("tail",), "native", tmp_path / "native")
    assert want_n > 100 and got_n == want_n
    want = {p.name: p.read_bytes() for p in sorted((tmp_path / "python").iterdir())}
    got = {p.name: p.read_bytes() for p in sorted((tmp_path / "native").iterdir())}
    assert got == want
    assert process.backend.native_stats["c_records"] > 0.3 * want_n  # type: ignore[union-attr]


@pytest.mark.parametrize("isa", ISAS)
def test_native_entry_run_records_equal_python(isa: str) -> None:
    """`run`'s spill file (as cli/run.py makes it): the records C's writer wrote read back
    equal to the reference's; on fib C wrote more than 40 % of them (the rest: the
    start-up's and libc's first calls, strings and struct values, the exit path)."""
    records = {}
    for engine in ("python", "native"):
        process = _process(isa, "fib", ("12",), engine)
        sink = SpillSink()
        process.sink = sink
        process.run()
        records[engine] = list(sink)
    assert len(records["python"]) > 500
    assert records["native"] == records["python"]
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert stats["c_records"] > 0.4 * len(records["python"]), stats


def test_auto_engine_is_native_for_entry() -> None:
    hello = str(bin_path("x86_64", "hello_fs"))
    assert Process(RunConfig(hello, [], backend="entry"), warn=lambda m: None).engine \
        == "native"


@pytest.mark.parametrize("isa", ["x86_64", "arm"])
def test_deep_recursion_hands_c_only_the_changed_frames(isa: str) -> None:
    """`calls deep` recurses 10,000 frames deep: the open frames cross between Python and C
    by the part that changed (WatchedList, ep_frames_splice/ep_low), a few frames per event
    (copying them all at every Python section, as before, made mips's run take 25 s: every
    probe there was Python's, 10^8 frames copied).  The same records, counters and open
    frames as the reference, which holds its frames in Python only (x86_64; and arm)."""
    _, want = _run(isa, "calls", ("deep",), "python")
    process, got = _run(isa, "calls", ("deep",), "native")
    assert got == want
    records = len(got[0])
    assert records > 20_000
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert 0 < stats["frames_copied"] <= 2 * records, (stats, records)
