"""`emutrace record` on the native engine: C keeps the shadow stack's common case and writes
the uftrace records itself (native/ufwrite.c, backends/native_writer.py).

* Differential: the data directory the native engine writes (int3; step) equals the Python
  reference's byte for byte, every file, on all ten ISAs (fib: the hot path; calls tail:
  tail calls, which int3's C leaves to Python and step's C writes, beside C's records;
  typed: argument and return types, integer ones and strings in C, floats, structs in
  Python; a stripped program: code found by descent, its sites hooked, C writing most
  records), plus the ISA-independent unusual cases once (longjmp unwinding, a stripped
  program's `calls all`, `calls all`: C takes the calls nested past uftrace's 1024 levels
  and counts them as the reference does).  On a lowered ISA the fib cell checks that C
  wrote almost every record; `calls.O0.instr tail` (every ISA) that C wrote the `char *`
  values its recorder passes.
* Oracles: the canonical trace read back from a natively written directory equals what the
  `-finstrument-functions` build records about itself under qemu-user (x86_64, aarch64;
  the `calls` scenarios that nest less than 1024 deep; `step`: tail and recursion);
  Debian's uftrace replays a natively written directory and shows the program's functions
  entered as that record does.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from emutrace.backends import hooked_sites
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record
from emutrace.trace.uftrace_read import load_recording
from emutrace.trace.uftrace_write import sink_for_image

from .conftest import ISAS, bin_path, run_qemu
from .test_native_engine import _stdout_to_devnull, busybox_and_text
from .test_trace_oracle import namer

# C finishes traps: the ISA lowers its sites for C (patch delivery), or C's site table
# watches its site hooks (hook delivery: mips, mipsel, riscv64; backends/hooked_sites.py)
LOWERED = [isa for isa in ISAS if by_name(isa).lower is not None
           or hooked_sites.every_site_hooked(by_name(isa))]
# where strict cleanup's switches are C's (int3_native.StrictInC: a lowering or the site
# hooks C's table watches: every ISA, arm's two instruction sets too)
STRICT_IN_C = [isa for isa in ISAS if by_name(isa).lower is not None
               or hooked_sites.wanted(by_name(isa))]
CELLS = (("fib", ("18",)), ("calls", ("tail",)), ("typed", ()),
         # ppc, ppc64le, riscv64: calls before the frame (`bl _savegpr0_N`), tail jumps to
         # the restore routines
         ("savres.Os.instr", ("4",)))
# every ISA, lazy cleanup: code found by descent (its sites hooked, in C's site table)
STRIPPED_CELL = ("calls.stripped", ("recursion",))
ONCE_ISA = "x86_64"
@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`calls all` writes calls-out.txt where it runs: a test running it beside another one
    in the same directory (pytest-xdist) would read back the other's bytes and count other
    instructions (seen: one timestamp 3 instructions off)."""
    monkeypatch.chdir(tmp_path)


ONCE_CELLS = (("calls", ("longjmp",)), ("calls.stripped", ("all",)),
              ("calls", ("all",)))


def record(isa: str, program: str, args: tuple[str, ...], engine: str,
           out: Path, cleanup: str = "lazy", backend: str = "int3") -> tuple[Process, int]:
    """(the process, the records written) of one recording into out."""
    out.mkdir()
    process = Process(RunConfig(str(bin_path(isa, program)), list(args), backend=backend,
                                engine=engine, cleanup=cleanup), warn=lambda m: None)
    sink = sink_for_image(str(out), process.image, [program, *args])
    process.sink = sink
    status = process.run().exit_code
    sink.close(status)
    return process, sink.count


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("isa", ISAS)
def test_native_recording_equals_python(isa: str, tmp_path: Path) -> None:
    cells = (*CELLS, STRIPPED_CELL) + (ONCE_CELLS if isa == ONCE_ISA else ())
    for k, (program, args) in enumerate(cells):
        if not bin_path(isa, program).exists():
            continue
        want_dir, got_dir = tmp_path / f"py{k}", tmp_path / f"nat{k}"
        with _stdout_to_devnull():  # (the same stdout times for both: see there)
            _, records = record(isa, program, args, "python", want_dir)
            process, _ = record(isa, program, args, "native", got_dir)
        want, got = files(want_dir), files(got_dir)
        assert len(want["1.dat"]) > 100 * 16, (program, args)
        assert got.keys() == want.keys(), (program, args)
        for name in want:
            assert got[name] == want[name], (program, args, name)
        stats = process.backend.native_stats  # type: ignore[union-attr]
        if program == "fib" and isa in LOWERED:  # C wrote the records, Python almost none
            assert stats["c_records"] > 0.9 * records, (stats, records)
        if args == ("tail",) and isa in LOWERED:  # jumps to armed entries: C's too
            assert stats["c_tail_jumps"] > 0, stats
        if (program, args) == STRIPPED_CELL:  # most of them C's too
            assert stats["c_records"] > 0.5 * records, (stats, records)
        if (program, args) == ("calls", ("all",)):  # `deep` nests 10^4 calls: uftrace keeps
            # none past 1024 levels; C took those calls and returns, counting the entries
            deep = int(re.search(rb"not_recorded_deep:(\d+)", got["emutrace.txt"])[1])
            assert deep > 8000 and stats["c_records"] > 0.9 * (records + 2 * deep), stats


# a program whose functions take and return `char *` values over and over: calls.O0.instr's
# own recorder formats each record with put_hex(char *out, ...) (testbins/src/instr_sites.c)
STRING_CELL = ("calls.O0.instr", ("tail",))


@pytest.mark.parametrize("isa", ISAS)
def test_native_recording_writes_strings(isa: str, tmp_path: Path) -> None:
    """C copies a `char *` argument's or return value's string at the event
    (hotpath.c writer_strings) and writes it into the record as uftrace's `/s` text
    (ufwrite.c put_string: the bytes as UTF-8, `NULL`, `<0x...>`); the directory equals the
    reference's byte for byte and C wrote most of the strings copied."""
    program, args = STRING_CELL
    with _stdout_to_devnull():
        _, records = record(isa, program, args, "python", tmp_path / "py")
        process, _ = record(isa, program, args, "native", tmp_path / "nat")
    want, got = files(tmp_path / "py"), files(tmp_path / "nat")
    assert len(want["1.dat"]) > 100 * 16
    assert b"/s" in want["info"]  # string specs: the values are in the records
    assert got == want
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert stats["c_strings_written"] > 100 and stats["c_records"] > 0.5 * records, stats


# `step` (step.c): C offers the writer every call, return and tail call it finished, on every
# ISA
# (the reference is step.py; fib: C wrote almost every record, the rest being the first
# calls and libc's start-up)
STEP_CELLS = (("fib", ("15",)), ("calls", ("tail",)), ("typed", ()))


@pytest.mark.parametrize("isa", ISAS)
def test_native_step_recording_equals_python(isa: str, tmp_path: Path) -> None:
    for k, (program, args) in enumerate(STEP_CELLS):
        want_dir, got_dir = tmp_path / f"py{k}", tmp_path / f"nat{k}"
        reference, records = record(isa, program, args, "python", want_dir, backend="step")
        process, _ = record(isa, program, args, "native", got_dir, backend="step")
        want, got = files(want_dir), files(got_dir)
        assert len(want["1.dat"]) > 100 * 16, (program, args)
        assert got == want, (program, args)
        # the counters count the events C wrote too (calls, returns, steps)
        assert process.backend.stats == reference.backend.stats  # type: ignore[union-attr]
        stats = process.backend.native_stats  # type: ignore[union-attr]
        if program == "fib":
            assert stats["c_records"] > 0.8 * records, (stats, records)
        if args == ("tail",):  # C wrote tail calls (and the returns closing their chains)
            assert stats["c_tail_calls"] > 0, stats


# strict cleanup: C switches the armed function (strict.c) and the writer takes the records;
# the directory is the reference's all the same (ISAs without a lowering: Python's work)
@pytest.mark.parametrize("isa", LOWERED)
def test_native_strict_recording_equals_python(isa: str, tmp_path: Path) -> None:
    cells = CELLS[:2] + (ONCE_CELLS[:1] + ONCE_CELLS[2:] if isa == ONCE_ISA else ())
    for k, (program, args) in enumerate(cells):
        want_dir, got_dir = tmp_path / f"py{k}", tmp_path / f"nat{k}"
        _, records = record(isa, program, args, "python", want_dir, "strict")
        process, _ = record(isa, program, args, "native", got_dir, "strict")
        want, got = files(want_dir), files(got_dir)
        assert len(want["1.dat"]) > 100 * 16, (program, args)
        assert got == want, (program, args)
        if program == "fib" and isa in STRICT_IN_C:  # C switched and wrote almost all
            stats = process.backend.native_stats  # type: ignore[union-attr]
            assert stats["c_records"] > 0.9 * records, (stats, records)
            assert stats["c_switches"] > 0.45 * records, (stats, records)


# the scenarios of `calls` whose calls nest less than 1024 deep (a uftrace directory keeps
# no deeper record: `deep` is left out), each one recording
ORACLE_SCENARIOS = ("recursion", "fnptr", "qsort", "tail", "longjmp", "args9")


# `step`'s writer (tail calls and the returns closing their chains in C) on the scenarios
# whose calls it finishes in different ways: tail chains, recursion
STEP_ORACLE = [("step", "tail"), ("step", "recursion")]


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
@pytest.mark.parametrize(("backend", "scenario"),
                         [("int3", s) for s in ORACLE_SCENARIOS] + STEP_ORACLE)
def test_native_recording_equals_self_record(isa: str, backend: str, scenario: str,
                                             tmp_path: Path) -> None:
    instr = str(bin_path(isa, "calls.instr"))
    text = run_qemu(isa, instr, scenario).stderr.decode()
    instr_name = namer(instr)
    program_functions = {instr_name(addr) for _, addr in parse_instr_record(text)}
    want = canonical_from_instr(text, instr_name, program_functions)
    plain = str(bin_path(isa, "calls"))
    process, _ = record(isa, "calls", (scenario,), "native", tmp_path / "d", backend=backend)
    assert process.backend.native_stats["c_records"] > 0  # type: ignore[union-attr]
    records, _symbolize, _isa = load_recording(str(tmp_path / "d"))
    got = canonical_text(list(records), namer(plain), program_functions)
    assert got.count("\n") > 10
    assert got == want


# busybox gzip (a speed target): the hot path of a stripped third-party program is C's
BUSYBOX_ISAS = [pytest.param(isa, marks=[] if by_name(isa).capability(Cap.BUSYBOX).works
                             else [pytest.mark.xfail(reason=by_name(isa).capability(
                                 Cap.BUSYBOX).reason, strict=True)], id=isa)
                for isa in ("x86_64", "i386", "aarch64", "arm", "mipsel", "ppc64le", "s390x")]


@pytest.mark.busybox
@pytest.mark.parametrize("isa", BUSYBOX_ISAS)
def test_busybox_gzip_recorded_in_c(isa: str, tmp_path: Path) -> None:
    """`busybox gzip -c` of 4 KB, recorded natively: the compressed bytes are qemu-user's,
    and C wrote at least 97 % of the records (the rest: first calls, syscalls and libc's
    start-up).  Before tail jumps at hooked sites were C's, C wrote 95.8 % on aarch64 (4 KB
    of bench_targets' text); before the writer kept policy 3's call-before-frame exception,
    78.7 % on ppc64le (its `bl _savegpr0_N` at the caller's own sp)."""
    bb, text = busybox_and_text(isa, tmp_path, 4096)
    want = run_qemu(isa, bb, "gzip", "-c", str(text)).stdout
    out = tmp_path / "out.gz"
    saved, fd = os.dup(1), os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.dup2(fd, 1)
        d = tmp_path / "d"
        d.mkdir()
        process = Process(RunConfig(str(bb), ["gzip", "-c", str(text)], backend="int3",
                                    engine="native"), warn=lambda m: None)
        sink = sink_for_image(str(d), process.image, ["busybox", "gzip", "-c", str(text)])
        process.sink = sink
        status = process.run().exit_code
        sink.close(status)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
    assert status == 0 and want[:2] == b"\x1f\x8b"
    assert out.read_bytes() == want
    writer = process.backend.engine.writer  # type: ignore[union-attr]
    assert writer is not None and sink.count > 10_000, sink.count
    written = sum(writer.written.values())
    assert written >= 0.97 * sink.count, (written, sink.count)


def test_uftrace_replays_native_recording(tmp_path: Path) -> None:
    """Debian's uftrace reads a natively written directory: the program's functions it shows
    entered, in order, are those the `-finstrument-functions` build records entering."""
    isa, scenario = "x86_64", "recursion"
    instr = str(bin_path(isa, "calls.instr"))
    instr_name = namer(instr)
    pairs = parse_instr_record(run_qemu(isa, instr, scenario).stderr.decode())
    want = [instr_name(addr) for kind, addr in pairs if kind == ">"]
    process, _ = record(isa, "calls", (scenario,), "native", tmp_path / "d")
    assert process.backend.native_stats["c_records"] > 0  # type: ignore[union-attr]
    replay = subprocess.run(["uftrace", "replay", "--no-pager", "-d", str(tmp_path / "d")],
                            capture_output=True, text=True, check=True).stdout
    program = set(want)
    got = [name for name in re.findall(r"\|\s*([A-Za-z_][\w.]*)\(", replay) if name in program]
    assert len(want) > 20
    assert got == want
