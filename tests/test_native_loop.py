"""The native target's run loop in C (native/ploop.c, `--target native --engine native`, the
default) against the Python loop (target/ptrace_run.py alone, `--engine python`).

* Differential: on x86_64 and i386, for int3 lazy (C finishes the traps at armed sites),
  int3 strict (C arms and disarms too), entry (C records at probes and steps over their
  instructions) and the other backends (C only resumes and waits; every trap is Python's),
  the two loops give identical records (times, addresses, argument and return values),
  counters, stop, exit status and open frames.  A native run is not quite reproducible:
  the kernel's AT_RANDOM bytes (the stack canary, the pointer guard) differ per run and
  reach some argument registers; every run here starts with the same fixed bytes instead
  (`_fix_at_random`), so the two loops' runs compare as they are.  Should they still
  differ, the values that differ between two runs of the Python loop are masked
  (`same_trace`), and must be few.
  (Programs whose signals come from timers, signals and sigctx, are left out: where
  SIGALRM lands depends on speed, and two runs of one loop differ.)
* Oracle: the C loop's trace of `calls all` equals what the `-finstrument-functions` build
  records about itself, run directly on this host (as tests/test_native_target.py checks
  the Python loop).
* The C loop does the work it claims: on the fib cells, all but the first traps of each site
  are finished in C (C's counter, checked against the trap count the Python loop takes for
  the same run), with int3 lazy and strict and with entry; for `step`, C takes most hooks;
  for hwbp most debug-register hits and for btf most block-step stops (BTF degraded here:
  one instruction each) are finished in C, with records and counters equal on every cell.
  (Each share is asserted in the differential cell of the same run: fib 15, whose Python
  run takes more than 2,000 stops.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from emutrace import native_session
from emutrace.isa import by_name
from emutrace.native import ploop
from emutrace.native_session import NativeProcess
from emutrace.session import RunConfig
from emutrace.trace.canonical import canonical_from_instr, canonical_text, parse_instr_record

from .conftest import ENV, bin_path, shell_status
from .test_native_target import namer


def test_ptrace_loop_is_built() -> None:
    assert ploop.available(), "the native library lacks ploop.c (python setup.py build_ext)"


AT_RANDOM = 25  # <linux/auxvec.h>: the address of 16 random bytes on the initial stack
FIXED_RANDOM = bytes(range(0x41, 0x51))


def _fix_at_random(pid: int, word: int) -> None:
    """The 16 AT_RANDOM bytes the kernel put on the stopped child's stack (glibc's stack
    canary and pointer guard come from them, and reach argument registers) overwritten
    with FIXED_RANDOM: two runs of one program then see the same values (the layout is
    already fixed: ADDR_NO_RANDOMIZE), and same_trace can compare them as they are."""
    auxv = Path(f"/proc/{pid}/auxv").read_bytes()
    pairs = struct.iter_unpack("<QQ" if word == 8 else "<II", auxv)
    where = next(value for key, value in pairs if key == AT_RANDOM)
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
        mem.seek(where)
        mem.write(FIXED_RANDOM)


@contextlib.contextmanager
def _fixed_random(isa: str) -> Iterator[None]:
    """NativeProcess's children, while inside, start with FIXED_RANDOM as AT_RANDOM."""
    spawn = native_session.spawn
    word = by_name(isa).identity.word_size

    def spawn_fixed(*args: Any) -> int:
        pid = spawn(*args)
        _fix_at_random(pid, word)
        return pid
    native_session.spawn = spawn_fixed  # type: ignore[assignment]
    try:
        yield
    finally:
        native_session.spawn = spawn  # type: ignore[assignment]


def _run(isa: str, program: str, args: list[str], engine: str, backend: str = "int3",
         cleanup: str = "lazy") -> tuple[NativeProcess, tuple]:
    """One run of program; its AT_RANDOM bytes fixed (_fix_at_random), so that the Python
    and the C loop's runs differ only if the loops do (same_trace's rerun is then needed
    only for other host randomness)."""
    with _fixed_random(isa):
        process = NativeProcess(RunConfig(str(bin_path(isa, program)), args,
                                          backend=backend, cleanup=cleanup, engine=engine))
    r = process.run()
    return process, (r.records, r.backend_stats, r.stop, r.exit_code, r.open_frames,
                     r.guest_insns)


def _leaves(value: Any) -> list[Any]:
    """A record as its flat list of fields (nested values, argument tuples spread)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: list[Any] = [type(value).__name__]
        for f in dataclasses.fields(value):
            out += _leaves(getattr(value, f.name))
        return out
    if isinstance(value, (tuple, list)):
        out = [len(value)]
        for v in value:
            out += _leaves(v)
        return out
    return [value]


def same_trace(got: tuple, want: tuple, rerun: Callable[[], tuple]) -> None:
    """got == want, field for field, except the fields in which two Python-loop runs (want,
    and again = rerun(), made only when got and want differ) differ themselves (host
    randomness); every other result equal as it is."""
    if got == want:
        return
    again = rerun()
    assert got[1:] == want[1:] == again[1:]
    assert len(got[0]) == len(want[0]) == len(again[0])
    masked = total = 0
    for i, (g, w, a) in enumerate(zip(got[0], want[0], again[0], strict=True)):
        lg, lw, la = _leaves(g), _leaves(w), _leaves(a)
        assert len(lg) == len(lw) == len(la), (i, g, w)
        for x, y, z in zip(lg, lw, la, strict=True):
            total += 1
            if y != z:
                masked += 1
            else:
                assert x == y, (i, g, w)
    assert masked <= total // 100, (masked, total)


# (isa, program, args): direct, indirect and tail calls, qsort's callbacks into the program,
# longjmp, a crash (the guest's SIGSEGV handed back by C), typed values,
# site hooks beside C's traps (a stripped binary: code found by descent), a static PIE,
# calls through memory (Python's: C lowers no memory operand), a PC thunk (i386), a crash
# by signal on i386 (isadep)
CELLS = [
    ("x86_64", "calls", ["tail"]), ("x86_64", "calls", ["qsort"]),
    ("x86_64", "calls", ["longjmp"]), ("x86_64", "calls", ["crash"]),
    ("x86_64", "calls", ["args9"]), ("x86_64", "fib", ["15"]), ("x86_64", "calls", ["fnptr"]),
    ("x86_64", "typed", []), ("x86_64", "calls.stripped", ["tail"]),
    ("x86_64", "calls.pie", ["tail"]), ("x86_64", "edge_callmem", []),
    ("i386", "calls", ["tail"]), ("i386", "calls", ["recursion"]),
    ("i386", "calls", ["args9"]), ("i386", "fib", ["15"]), ("i386", "typed", []),
    ("i386", "edge_pcthunk", []), ("i386", "isadep", []),
]


# the backends whose traps C finishes: int3 lazy (simulated calls, returns, jumps), int3
# strict (the same, arming and disarming as well), entry (probes stepped over, returns);
# entry refuses a binary without a symbol table on every target (it probes every function
# up front), so the stripped cell is not one of its cells
TRAP_CELLS = [(backend, cleanup, *cell)
              for backend, cleanup in (("int3", "lazy"), ("int3", "strict"), ("entry", "lazy"))
              for cell in CELLS if not (backend == "entry" and cell[1].endswith(".stripped"))]


@pytest.mark.parametrize(("backend", "cleanup", "isa", "program", "args"), TRAP_CELLS)
def test_c_loop_equals_python_loop_traps(backend: str, cleanup: str, isa: str, program: str,
                                         args: list[str]) -> None:
    """Every cell: the same records, counters, stop, status and open frames as the Python
    loop.  fib 15: the Python loop takes T traps; with the C loop the backend counts the
    same T (the counters are equal), and C finished all but the ones Python must see (a
    first call into a function: discovery; start-up code; the exit path; strict: a function
    C may not write, a call chain without the caller; entry: the process entry) — at
    least 90% of them.  Counting a trap C did not take as C's is ruled out: the counts are
    the Python loop's.  typed: C copied the strings of `char *` values at the traps it
    finished (core.c string_put through the ptrace port), values equal to the Python
    loop's."""
    _p, want = _run(isa, program, args, "python", backend=backend, cleanup=cleanup)
    process, got = _run(isa, program, args, "native", backend=backend, cleanup=cleanup)
    assert len(want[0]) > 4
    same_trace(got, want,
               lambda: _run(isa, program, args, "python", backend=backend, cleanup=cleanup)[1])
    assert process.target.c_loop is not None
    stats = process.backend.native_stats  # type: ignore[union-attr]
    if program in ("fib", "calls"):
        assert stats["c_traps"] > 0
    if program == "typed":
        assert stats["c_strings"] > 0
    if program == "fib":
        traps = want[1]["traps"]
        assert traps > 2000
        assert stats["c_traps"] >= 0.9 * traps
        assert stats["python_stops"] < 0.1 * traps


# btf: C only block-steps over the stops whose walk crosses no taken branch (ploop.c
# pl_block); every event, and every value in it, is made by the same Python decoder in both
# loops.  So the cells that differ from the others only in the values recorded (args9,
# typed) or in which indirect calls and callbacks are taken (qsort, fnptr, recursion: the
# walk stops at any taken transfer alike) check nothing more of C's part, and each costs
# ~8 s of single steps (BTF is degraded here): btf runs the cells that differ in control
# flow (direct, indirect and tail calls, longjmp, a crash by signal, descent, PIE, a call
# through memory, the PC thunk, i386's ISA-dependent code, fib).  hwbp, whose hits C
# finishes with their values, runs every cell.  (CI time.)
VALUES_ONLY = {("x86_64", "calls", ("qsort",)), ("x86_64", "calls", ("args9",)),
               ("x86_64", "calls", ("fnptr",)), ("x86_64", "typed", ()),
               ("i386", "calls", ("recursion",)), ("i386", "calls", ("args9",)),
               ("i386", "typed", ())}
HWBP_BTF_CELLS = [("hwbp", *cell) for cell in CELLS] + [
    ("btf", *cell) for cell in CELLS if (cell[0], cell[1], tuple(cell[2])) not in VALUES_ONLY]


@pytest.mark.parametrize(("backend", "isa", "program", "args"), HWBP_BTF_CELLS)
def test_c_loop_equals_python_loop_hwbp_btf(isa: str, program: str, args: list[str],
                                            backend: str) -> None:
    """hwbp (C finishes the debug-register hits whose decision it holds, switching the
    slots itself) and btf (C block-steps over the stops that cross no taken branch): the
    same records, counters, stop and open frames as the Python loop, on every cell; on fib
    and calls C finished some of the stops, and on calls C switched the debug registers
    from one function to another itself.  fib 15: the Python loop takes N debug-register
    hits (hwbp) or block-step stops (btf); the C loop's backend counts the same N (the
    counters are equal), of which C finished at least 70% (hwbp: all but first calls,
    libc's stepped functions and start-up/exit; btf: all but the taken branches and the
    instructions walked for the first time)."""
    _p, want = _run(isa, program, args, "python", backend=backend)
    process, got = _run(isa, program, args, "native", backend=backend)
    assert len(want[0]) > 4
    same_trace(got, want, lambda: _run(isa, program, args, "python", backend=backend)[1])
    assert process.target.c_loop is not None
    stats = process.backend.native_stats  # type: ignore[union-attr]
    counter, finished = ("hits", "c_hits") if backend == "hwbp" else ("stops", "c_stops")
    if program in ("fib", "calls"):
        assert stats[finished] > 0
    if program == "calls" and backend == "hwbp":  # C moved the slots between functions
        assert stats["c_slot_writes"] > 0
    if program == "fib":
        n = want[1][counter]
        assert n > 2000 and stats[finished] >= 0.7 * n, (stats, n)


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
@pytest.mark.parametrize("backend", ["none", "step"])
def test_c_loop_equals_python_loop_other_backends(isa: str, backend: str) -> None:
    """step's quiet steps C may finish; `none` only resumes and waits.  (hwbp and btf on
    this program, `calls tail`, are cells of the test above.)"""
    _p, want = _run(isa, "calls", ["tail"], "python", backend=backend)
    _r, got = _run(isa, "calls", ["tail"], "native", backend=backend)
    same_trace(got, want, lambda: _run(isa, "calls", ["tail"], "python", backend=backend)[1])
    assert got[3] == 0


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_c_loop_step_takes_most_steps(isa: str) -> None:
    """step on fib 10: the same records and counters as the Python loop, and C took the
    hook at at least 70% of the steps (all but calls, returns, jumps that may be tail calls
    and code stepped for the first time)."""
    _p, want = _run(isa, "fib", ["10"], "python", backend="step")
    process, got = _run(isa, "fib", ["10"], "native", backend="step")
    same_trace(got, want, lambda: _run(isa, "fib", ["10"], "python", backend="step")[1])
    steps = want[1]["steps"]
    assert steps > 10000 and want[1]["calls"] > 100
    assert process.backend.native_stats["c_steps"] >= 0.7 * steps  # type: ignore[union-attr]


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
def test_c_loop_trace_equals_own_record(isa: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # (the fileio scenario writes a file)
    instr = str(bin_path(isa, "calls.instr").resolve())
    direct = subprocess.run([instr, "all"], capture_output=True, timeout=120, env=ENV,
                            cwd=tmp_path)
    record = direct.stderr.decode()
    instr_name = namer(instr)
    keep = {instr_name(addr) for _, addr in parse_instr_record(record)}
    want = canonical_from_instr(record, instr_name, keep)
    process = NativeProcess(RunConfig(str(bin_path(isa, "calls")), ["all"], backend="int3",
                                      engine="native"))
    got = process.run()
    assert got.exit_code == shell_status(direct.returncode)
    text = canonical_text(got.records, namer(str(bin_path(isa, "calls"))), keep)
    assert text.count("\n") > 50
    assert text == want
    assert process.backend.native_stats["c_traps"] > 0  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["int3", "step"])
def test_c_loop_interrupt_while_c_finishes_every_stop(backend: str, tmp_path: Path) -> None:
    """SIGINT while C takes every stop itself (fib 30: millions of traps or steps, none
    Python's): C comes back within its batch (MAX_STOPS stops), Python's handler ends the
    run as interrupted (128 + 2, one line) and the child is killed."""
    proc = subprocess.Popen([sys.executable, "-m", "emutrace", "run", "--target", "native",
                             "--unconfined", "--backend", backend, "-o",
                             str(tmp_path / "trace"), str(bin_path("x86_64", "fib")), "30"],
                            env=ENV, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _child_ticks(proc.pid) < 20 and time.monotonic() < deadline:
        time.sleep(0.1)  # until the child has run 0.2 s of CPU: deep in fib, under C
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert err.decode().startswith("emutrace: interrupted at pc "), err


def _child_ticks(parent: int) -> int:
    """CPU clock ticks (user + system) of parent's first child, 0 while there is none."""
    try:
        kids = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        fields = Path(f"/proc/{kids[0]}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime (proc(5): fields 14, 15)


@pytest.mark.parametrize("isa", ["x86_64", "i386"])
@pytest.mark.parametrize(("backend", "cleanup"), [("int3", "lazy"), ("int3", "strict"),
                                                  ("step", "lazy")])
def test_both_loops_report_signal_handlers_alike(isa: str, backend: str,
                                                 cleanup: str) -> None:
    """sigctx's handlers (target/ptrace_signals.py: C hands the signal-delivery-stop back,
    Python steps into the handler): the canonical trace of the program's own functions is
    the same with either loop, and holds every handler (the names from its C source).
    (Not the records: where SIGALRM lands depends on speed.)"""
    from .test_native_agreement import source_functions

    texts = []
    for engine in ("python", "native"):
        process, _ = _run(isa, "sigctx", [], engine, backend=backend, cleanup=cleanup)
        keep = source_functions("sigctx")
        texts.append(canonical_text(process.records, namer(process.config.program), keep))
    assert texts[0] == texts[1]
    for handler in ("on_usr1", "on_usr2", "on_segv", "on_alarm"):
        assert f"> {handler}" in texts[0]
