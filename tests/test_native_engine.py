"""The native hot path (`--engine native`, emutrace/native) against the Python reference.

* Differential: on every ISA the two engines give identical records (times, addresses,
  argument and return values, unwinding), counters, instruction counts, stop and open
  frames.  On ISAs whose description lowers calls and returns for C (`Isa.lower`: x86_64,
  i386, aarch64, arm, ppc, ppc64le, s390x) or whose site hooks C's site table watches (hook
  delivery with `Classifiers.sp_effect`: mips, mipsel, riscv64) the cells exercise what C
  finishes itself (direct, indirect and tail calls, conditional and internal jumps, longjmp),
  and the fib cell checks that C did finish at least 90 % of the traps (every ISA lowers or
  hooks today; OTHER_CELLS, a small freestanding program, is for one that does not).  arm's
  fib is Thumb code; its A32 and interworking calls and returns are checked on
  edge_interwork, per instruction set, against the traps the Python engine takes there.  On
  every ISA a stripped program (code found by descent: site hooks, which C's site table
  watches under lazy cleanup, backends/hooked_sites.py) is traced identically, C finishing
  most site hits.
* `char *` values: C copies the string at the event; calls with string
  arguments and returns of strings are C's, equal to the reference on every ISA under int3
  lazy and strict and entry (`test_strings_copied_by_c_equal_python`).
* Oracle (x86_64, aarch64, and mips, mipsel, riscv64, whose site hooks C watches): the
  native engine's trace of `calls all` equals what the `-finstrument-functions` build
  records about itself under qemu-user; on every ISA the native trace of the stripped
  program (`calls.stripped recursion`, named by its unstripped twin: same addresses) equals
  that record too.
* hwbp (backends/hwbp_native.py): native == python on every ISA (records, counters, counts),
  C's share of the hits and switches on mips fib, and the self-record oracle on x86_64 and
  mips; `auto` keeps the Python engine for it.
* Without the library, `--engine native` is one clear line and exit 69.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from emutrace import native
from emutrace.backends import NATIVE_BACKENDS, hooked_sites
from emutrace.backends.int3_python import Int3Backend
from emutrace.cli.main import main
from emutrace.errors import EXIT_UNSUPPORTED, UsageError
from emutrace.isa import by_name
from emutrace.mechanisms import BACKENDS
from emutrace.mechanisms.settings import Descriptor
from emutrace.session import Process, RunConfig
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import BUSYBOX, ISAS, bin_path, run_qemu
from .test_trace_oracle import namer

# no skip when the library is missing: `make setup` installs the compiler and builds it, so a
# missing library is a set-up failure the tests must show


def test_native_library_is_built() -> None:
    assert native.available(), "the native library is not built (pip install -e .)"

# C finishes traps: the ISA lowers its sites for C (patch delivery), or C's site table
# watches its site hooks (hook delivery: mips, mipsel, riscv64; backends/hooked_sites.py)
LOWERED = [isa for isa in ISAS if by_name(isa).lower is not None
           or hooked_sites.every_site_hooked(by_name(isa))]
# where strict cleanup's switches are C's (int3_native.StrictInC: a lowering or the site
# hooks C's table watches: every ISA, arm's two instruction sets too)
STRICT_IN_C = [isa for isa in ISAS if by_name(isa).lower is not None
               or hooked_sites.wanted(by_name(isa))]

# (program, args): what C finishes on a lowered ISA; a smaller set elsewhere (slow path)
LOWERED_CELLS = (("calls", ("tail",)), ("fib", ("15",)))
OTHER_CELLS = (("hello_fs", ()),)
# every ISA: code found by descent (a stripped binary), whose sites are hooked, in C's site
# table (under strict too, where strict.c switches them); its tail
# jumps to armed entries, C's at the hooked sites too
STRIPPED_CELL = ("calls.stripped", ("recursion",))
STRIPPED_TAIL_CELL = ("calls.stripped", ("tail",))
# ISA-independent bookkeeping, checked once: the shadow stack's unwinding after a longjmp
# fed from C's buffer
ONCE_ISA = "x86_64"
ONCE_CELLS = (("calls", ("longjmp",)),)
# the self-record oracle on the two ISAs the issue starts with and the three whose site hooks
# C watches (the differential test ties the others to the Python engine, which
# tests/test_trace_oracle.py checks on every ISA)
ORACLE_ISAS = ("x86_64", "aarch64", "mips", "mipsel", "riscv64")


@contextlib.contextmanager
def _stdout_to_devnull() -> Iterator[None]:
    """The guest's stdout on /dev/null, whose times never change: a stripped function's
    "auto" arguments are whatever its argument registers hold — on arm, a leftover of the
    statx glibc's start-up makes of stdout (st_mtime's nanoseconds of pytest's capture file
    change with every write)."""
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _run(isa: str, program: str, args: tuple[str, ...], engine: str,
         cleanup: str = "lazy", backend: str = "int3") -> tuple[Process, tuple]:
    process = Process(RunConfig(str(bin_path(isa, program)), list(args), backend=backend,
                                engine=engine, cleanup=cleanup), warn=lambda m: None)
    r = process.run()
    return process, (r.records, r.backend_stats, r.guest_insns, r.stop, r.open_frames,
                     r.exit_code)


@pytest.mark.parametrize("isa", ISAS)
def test_native_equals_python(isa: str) -> None:
    cells = LOWERED_CELLS if isa in LOWERED else OTHER_CELLS
    cells = (*cells, STRIPPED_CELL, STRIPPED_TAIL_CELL)
    if isa == ONCE_ISA:  # ISA-independent bookkeeping: checked once
        cells = (*cells, *ONCE_CELLS)
    for program, args in cells:
        with _stdout_to_devnull():
            _, want = _run(isa, program, args, "python")
            process, got = _run(isa, program, args, "native")
        assert len(want[0]) > 100, (program, args)
        assert got == want, (program, args)
        assert process.backend is not None
        slow = process.backend.native_stats["python_traps"]  # type: ignore[attr-defined]
        if program == "fib":  # the hot path is C: Python saw first calls and syscalls only
            assert 10 * slow < got[1]["traps"], (slow, got[1]["traps"])
        if args == ("tail",) and (isa in LOWERED or program == STRIPPED_TAIL_CELL[0]):
            # jumps to armed entries recorded by C (TailCall when TailRule.is_tail holds)
            tails = process.backend.native_stats["c_tail_jumps"]  # type: ignore[attr-defined]
            assert tails > 0, (program, args)
        if program == STRIPPED_CELL[0]:  # no patch: every trap a site hit, most of them C's
            assert got[1]["patches"] == 0 and got[1]["hooks_added"] > 0, got[1]
            assert 2 * slow < got[1]["traps"], (slow, got[1]["traps"])


# strict cleanup (disarm on leaving): on a lowered ISA, and at the site hooks C's table
# watches (hook delivery; code found by descent), C switches the armed function itself
# (strict.c) at calls and returns into functions it knows, and Python replays each switch on
# its own state (arm too, in both instruction sets)
@pytest.mark.parametrize("isa", sorted({*LOWERED, "arm"}))
def test_native_equals_python_under_strict_cleanup(isa: str) -> None:
    cells = LOWERED_CELLS if isa in LOWERED else LOWERED_CELLS[:1]
    if isa in STRICT_IN_C:  # code found by descent: its site hooks switched by C too
        cells = (*cells, STRIPPED_CELL)
    if isa == ONCE_ISA:  # longjmp (chain cut by a non-local return)
        cells = (*cells, *ONCE_CELLS)
    for program, args in cells:
        with _stdout_to_devnull():
            _, want = _run(isa, program, args, "python", "strict")
            process, got = _run(isa, program, args, "native", "strict")
        assert len(want[0]) > 100, (program, args)
        assert want[1]["patches"] > want[1]["functions"]  # strict re-armed functions
        assert got == want, (program, args)
        if program != "calls" and isa in STRICT_IN_C:
            # the switches were C's: Python saw first calls, syscalls and start-up only
            # (fib: a tenth of the traps; the stripped program: its hooked sites' first
            # hits, descents and stale extents are Python's)
            stats = process.backend.native_stats  # type: ignore[union-attr]
            share = 10 if program == "fib" else 2
            assert share * stats["python_traps"] < got[1]["traps"], (stats, got[1]["traps"])
            assert 2 * stats["c_switches"] > got[1]["traps"], (stats, got[1]["traps"])


# busybox (stripped: every site found by descent and hooked) under strict cleanup: C switches
# at the hooked sites of the patch-delivery ISAs too, and at jumps into other functions
# (tail calls recorded, then switched: strict.c ns_jump); arm's too (A32 and Thumb)
STRICT_BUSYBOX_ISAS = [isa for isa in ("x86_64", "i386", "aarch64", "arm", "mipsel", "ppc64le",
                                       "s390x") if isa in STRICT_IN_C]


def busybox_and_text(isa: str, tmp_path: Path, size: int) -> tuple[Path, Path]:
    """The ISA's Debian busybox and `size` bytes of text for its gzip, in tmp_path."""
    bb = BUSYBOX / isa / "busybox"
    if not bb.exists():
        pytest.fail(f"{bb} missing: run `make setup` (fetches busybox-static with apt)")
    words = [f"w{(i * 7919) % 613:x}" for i in range(900)]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(words[j:j + 9]) for j in range(0, 900, 9))[:size])
    return bb, text


@pytest.mark.busybox
@pytest.mark.parametrize("isa", STRICT_BUSYBOX_ISAS)
def test_busybox_gzip_strict_native_equals_python(isa: str, tmp_path: Path) -> None:
    bb, text = busybox_and_text(isa, tmp_path, 3000)
    # gzip stats its input, and a stripped function's "auto" arguments show whatever is in
    # its registers and stack: an access time after the change time is one the first read
    # leaves alone (relatime), so both runs see the same times
    os.utime(text, (2_000_000_000, 1_000_000_000))
    runs = {}
    with _stdout_to_devnull():
        for engine in ("python", "native"):
            process = Process(RunConfig(str(bb), ["gzip", "-c", str(text)], backend="int3",
                                        engine=engine, cleanup="strict"), warn=lambda m: None)
            r = process.run()
            runs[engine] = (r.records, r.backend_stats, r.guest_insns, r.exit_code)
    want, got = runs["python"], runs["native"]
    assert want[3] == 0 and len(want[0]) > 10_000, (want[3], len(want[0]))
    assert want[1]["patches"] > 10 * want[1]["functions"]  # strict re-armed functions
    assert got == want
    stats = process.backend.native_stats  # type: ignore[union-attr]
    # the switches were C's: Python saw first calls, descents and syscalls (before C took
    # the hooked sites of descent-found code under strict, every busybox trap on a
    # patch-delivery ISA was Python's; before ns_jump, a tail call's on aarch64, mipsel, s390x)
    assert 20 * stats["python_traps"] < got[1]["traps"], (stats, got[1]["traps"])
    assert 2 * stats["c_switches"] > got[1]["traps"], (stats, got[1]["traps"])


# hwbp (strict by design, hook delivery: nothing written): its address slots are entries of
# C's site table and strict.c switches them, counting slots as SlotDelivery does; stepped
# spans (more sites than slots) and range slots (s390x) are C code hooks over the span (its
# sites entries of the table); every slot on arm (Thumb: no strict.c) stays the reference's
# Python hooks (backends/hwbp_native.py).  Every ISA, a small program;
# fib on mips, whose 4 address slots cover fib's sites: C finishes nearly every hit there
HWBP_CELLS = (("calls", ("tail",)),)
HWBP_C_ISA, HWBP_C_CELL = "mips", ("fib", ("16",))
# hwbp's native trace against the self-record: its table entries (mips) and x86_64
HWBP_ORACLE_ISAS = ("x86_64", "mips")


@pytest.mark.parametrize("isa", ISAS)
def test_hwbp_native_equals_python(isa: str) -> None:
    cells = HWBP_CELLS
    if isa == ONCE_ISA:  # longjmp (a chain cut by a non-local return); descent's sites
        cells = (*cells, *ONCE_CELLS, STRIPPED_CELL)
    if isa == HWBP_C_ISA:
        cells = (*cells, HWBP_C_CELL)
    in_c = not by_name(isa).thumb_bit
    for program, args in cells:
        _, want = _run(isa, program, args, "python", backend="hwbp")
        process, got = _run(isa, program, args, "native", backend="hwbp")
        assert len(want[0]) > 100, (program, args)
        assert want[1]["slot_writes"] > want[1]["functions"]  # strict re-armed functions
        assert got == want, (program, args)
        stats = process.backend.native_stats  # type: ignore[union-attr]
        if not in_c:  # every slot a Python hook (declared in hwbp_native.py)
            assert stats["slot_entries"] == stats["c_switches"] == 0, stats
            continue
        assert stats["slot_entries"] > 0 and stats["c_switches"] > 0, stats
        # stepped spans and range slots: C's code hooks count what the reference's do, all
        # but a few (sites C's table cannot watch: Python's for every function)
        assert got[1]["stepped"] == stats["c_stepped"] + stats["python_stepped"], stats
        assert stats["c_slot_hooks"] > 0 and 10 * stats["python_stepped"] < got[1]["stepped"]
        assert 10 * stats["python_slot_hits"] < got[1]["hits"], (stats, got[1])
        if (program, args) == HWBP_C_CELL:  # C finished the hits and switched fib
            assert 10 * stats["python_slot_hits"] < got[1]["hits"], (stats, got[1])
            assert 2 * stats["c_switches"] > got[1]["hits"], (stats, got[1])


def test_hwbp_native_shared_and_python_sites_equal_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """hwbp's sites two functions share (x86_64's `frame_dummy`, whose extent descent runs
    into `fib`, shares fib's sites: C counts each owner's hits with a code hook per owner) and
    sites C's table cannot watch (made so here for a third of them: Python's hooks then cover
    the address for every function, dropping another's table entry there) give what the
    reference gives."""
    _, want = _run("x86_64", "fib", ("12",), "python", backend="hwbp")
    process, got = _run("x86_64", "fib", ("12",), "native", backend="hwbp")
    assert got == want
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert stats["c_shared_sites"] > 0 and stats["python_slot_hits"] == 0, stats
    watchable = hooked_sites.HookedSites.can_watch
    monkeypatch.setattr(hooked_sites.HookedSites, "can_watch",
                        lambda self, site: site.addr % 3 != 0 and watchable(self, site))
    process, got = _run("x86_64", "fib", ("12",), "native", backend="hwbp")
    assert got == want
    stats = process.backend.native_stats  # type: ignore[union-attr]
    assert stats["python_slot_hits"] > 0 and stats["python_stepped"] > 0, stats
    assert stats["c_slot_hooks"] > 0 and stats["c_stepped"] > 0, stats


def test_auto_engine_is_native_where_it_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default engine: native for every backend when the library is built (hwbp too:
    faster natively on every ISA, bench/results/native-hwbp.md), and python (no error)
    when the library is missing."""
    hello = str(bin_path("x86_64", "hello_fs"))
    for backend in NATIVE_BACKENDS:
        process = Process(RunConfig(hello, [], backend=backend), warn=lambda m: None)
        assert process.engine == "native", backend
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "library_path", lambda: None)
    process = Process(RunConfig(hello, [], backend="int3"), warn=lambda m: None)
    assert process.engine == "python"
    assert process.run().exit_code == 7


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ORACLE_ISAS)
def test_native_trace_equals_self_record(isa: str) -> None:
    """int3 and hwbp on the native engine: `calls all` traced as the `-finstrument-functions`
    build records itself."""
    instr = str(bin_path(isa, "calls.instr"))
    record = run_qemu(isa, instr, "all").stderr.decode()
    instr_name = namer(instr)
    program_functions = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, program_functions)
    plain = str(bin_path(isa, "calls"))
    for backend in ("int3", "hwbp") if isa in HWBP_ORACLE_ISAS else ("int3",):
        result = Process(RunConfig(plain, ["all"], backend=backend, engine="native"),
                         warn=lambda m: None).run()
        got = canonical_text(result.records, namer(plain), program_functions)
        assert got.count("\n") > 100
        assert got == want, backend


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_native_stripped_trace_equals_self_record(isa: str) -> None:
    """Code found by descent, its sites in C's site table: the stripped program's native
    trace, named by the unstripped twin (strip keeps every address), is the
    `-finstrument-functions` build's own record of the same scenario."""
    scenario = "recursion"
    instr = str(bin_path(isa, "calls.instr"))
    record = run_qemu(isa, instr, scenario).stderr.decode()
    instr_name = namer(instr)
    # (main is left out: on aarch64 and s390x descent does not see libc's start code call
    # it, through a register — the Python reference neither; the differential ties them)
    program_functions = {instr_name(addr) for _, addr in parse_instr_record(record)} - {"main"}
    want = canonical_from_instr(record, instr_name, program_functions)
    process = Process(RunConfig(str(bin_path(isa, "calls.stripped")), [scenario],
                                backend="int3", engine="native"), warn=lambda m: None)
    result = process.run()
    assert result.backend_stats["patches"] == 0  # every site hooked: descent found it
    got = canonical_text(result.records, namer(str(bin_path(isa, "calls"))),
                         program_functions)
    assert got.count("\n") > 100
    assert got == want


def test_engine_native_without_library(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "library_path", lambda: None)
    code = main(["run", "--engine", "native", str(bin_path("x86_64", "hello_fs"))])
    err = capsys.readouterr().err
    assert code == EXIT_UNSUPPORTED
    assert err.count("\n") == 1 and "native library is not built" in err
    # the Python engine does not need it
    assert main(["run", "--engine", "python", "-o", "/dev/null",
                 str(bin_path("x86_64", "hello_fs"))]) == 7


def test_engine_native_other_backend_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backend has a native path now: one registered without (a test's) is refused
    with a usage error before the program runs."""
    fake = Descriptor(name="fake", help="a test's", settings=(), counters=(),
                      main_event="traps")
    monkeypatch.setitem(BACKENDS, "fake", fake)
    hello = str(bin_path("x86_64", "hello_fs"))
    with pytest.raises(UsageError, match="no native path"):
        Process(RunConfig(hello, [], backend="fake", engine="native"), warn=lambda m: None)


def _python_traps_by_mode(monkeypatch: pytest.MonkeyPatch,
                          engine: str) -> tuple[Counter[str], tuple]:
    """edge_interwork's run, and per (instruction set, site kind) the traps the Python code
    finished (Int3Backend.on_trap: every trap on the Python engine; on the native one,
    those C passed on)."""
    seen: Counter[str] = Counter()
    on_trap = Int3Backend.on_trap

    def counting(self: Int3Backend, intno: int) -> bool:
        armed = self.armed.get(self.cpu.pc)
        if armed is not None:
            seen[f"{'thumb' if armed.site.alt_mode else 'a32'} {armed.site.kind.name}"] += 1
        return on_trap(self, intno)

    monkeypatch.setattr(Int3Backend, "on_trap", counting)
    _, result = _run("arm", "edge_interwork", (), engine)
    monkeypatch.undo()
    return seen, result


def test_arm_traps_finished_in_c_in_both_instruction_sets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """edge_interwork: A32 and Thumb functions calling each other (BL, BLX imm and BLX Rm
    across states, returns by BX LR and POP {..., pc} to the other state).  The engines agree
    (records, counters, counts); the Python engine's traps per instruction set and site kind
    are the oracle of what there was to finish: C finished every return in both sets and the
    calls to callees Python had already entered once."""
    want, want_run = _python_traps_by_mode(monkeypatch, "python")
    got, got_run = _python_traps_by_mode(monkeypatch, "native")
    assert got_run == want_run
    for kind in ("a32 CALL", "a32 RETURN", "thumb CALL", "thumb RETURN"):
        assert want[kind] > 0, want
    assert got["a32 RETURN"] == got["thumb RETURN"] == 0, (got, want)
    assert got["a32 CALL"] < want["a32 CALL"] and got["thumb CALL"] < want["thumb CALL"], \
        (got, want)


def _run_writing(isa: str, program: str, args: tuple[str, ...], engine: str, cleanup: str,
                 backend: str, out: Path) -> tuple[Process, tuple]:
    """_run, for an `.instr` program: its own record goes to out (CALLTRACE_OUT), the same
    path for both engines (it is an argument of the calls traced)."""
    process = Process(RunConfig(str(bin_path(isa, program)), list(args), backend=backend,
                                engine=engine, cleanup=cleanup,
                                env={"CALLTRACE_OUT": str(out)},
                                allow_write=[str(out.parent)]), warn=lambda m: None)
    r = process.run()
    return process, (r.records, r.backend_stats, r.guest_insns, r.stop, r.open_frames,
                     r.exit_code)


# `char *` values: calls's printf wrappers (varargs: format strings as arguments), and the
# self-recording runtime of the -O0 `.instr` build (`put_hex(char *out, ...)` returns its
# `char *` and is called twice per record)
STRING_CELLS = (("calls", ("varargs",)), ("calls.O0.instr", ("tail",)))


@pytest.mark.parametrize("isa", ISAS)
def test_strings_copied_by_c_equal_python(isa: str, tmp_path: Path) -> None:
    """A call or return whose values include a `char *` is C's where C finishes its site
    (hotpath.c copies the string at the event, as ArgReader.string reads it: chunks that
    stay within a page, up to the NUL or 65 bytes, NULL or unreadable: none): int3 lazy and
    strict, and entry's probes where C takes them, give the Python reference's records,
    counters and counts, with C copying hundreds of strings."""
    out = tmp_path / "self.rec"
    for program, args in STRING_CELLS:
        for backend, cleanup in (("int3", "lazy"), ("int3", "strict"), ("entry", "lazy")):
            with _stdout_to_devnull():
                _, want = _run_writing(isa, program, args, "python", cleanup, backend, out)
                process, got = _run_writing(isa, program, args, "native", cleanup, backend,
                                            out)
            texts = [v for r in want[0] for v in getattr(r, "args", ()) or ()
                     if getattr(v, "kind", "") in ("str", "buf")]
            assert len(texts) > 40, (program, backend)
            assert got == want, (program, backend, cleanup)
            stats = process.backend.native_stats  # type: ignore[union-attr]
            if backend == "int3":
                assert stats["c_strings"] > 40, (program, cleanup, stats)
