"""`emutrace diff`'s rules against false differences (trace/diff.py `normalise`), each with
a case that differs without it.

* Threads compare apart, matched by their order of creation.  Oracle: `threads`'s own
  `-finstrument-functions` record under qemu-user, per thread (ranked by tid: creation
  order), is the same call sequence on every ISA compared — so the traces are equal;
  their interleaving is not (the scheduler switches after a number of instructions, which
  differ by ISA), so a comparison of one merged stream differs.
* A GCC part (`f.cold`, `f.part.N`) is its function; a `void` function's return carries
  no value (its DWARF prototype, or a frame closed together with the function it
  tail-called).  The two sides are what two ISAs' compilers make of one C function (split
  or not, a tail jump or a call); the expected verdict, equal, is the C source's.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from emutrace.elf import load_image
from emutrace.trace.diff import first_divergence, function_of, normalise
from emutrace.trace.events import Entry, Exit, Record
from emutrace.trace.uftrace_read import load_recording
from emutrace.trace.values import Value

from .conftest import ENV, bin_path, qemu_binary, run_emutrace
from .test_threads import PROGRAM_FUNCS, _oracle_by_thread

THREAD_ISAS = ("x86_64", "aarch64", "s390x")


def own_calls_per_thread(isa: str, tmp_path: Path) -> list[list[str]]:
    """Each thread's entries of the program's own functions, from its self-record."""
    program = bin_path(isa, "threads")
    record = tmp_path / f"record.{isa}"
    subprocess.run([qemu_binary(isa), str(program)], check=True, capture_output=True,
                   timeout=120, env={**ENV, "CALLTRACE_OUT": str(record)})
    image = load_image(str(program))
    out = []
    for events in _oracle_by_thread(record.read_text()):
        names = [image.symbolize(addr).split("+")[0] for kind, addr in events if kind == ">"]
        out.append([n for n in names if n in PROGRAM_FUNCS])
    return out


@pytest.mark.oracle
def test_threads_compare_apart_matched_by_creation(tmp_path: Path) -> None:
    oracle = {isa: own_calls_per_thread(isa, tmp_path) for isa in THREAD_ISAS}
    assert len(oracle["x86_64"]) == 4
    assert all(calls == oracle["x86_64"] for calls in oracle.values())  # so: equal
    dirs = []
    for isa in THREAD_ISAS:
        out = tmp_path / isa
        proc = run_emutrace("record", "-d", out, bin_path(isa, "threads"))
        assert proc.returncode == 0, proc.stderr.decode()[-500:]
        dirs.append(out)
    got = run_emutrace("diff", *dirs)
    assert got.returncode == 0, got.stdout.decode() + got.stderr.decode()
    assert got.stdout.decode().startswith("equal: 3 traces")
    # without the rule: the tasks' records in time order, as one stream, differ
    merged = []
    for out in dirs:
        records, symbolize, _isa = load_recording(str(out))
        merged.append(normalise([replace(r, tid=0) for r in records], symbolize,
                                PROGRAM_FUNCS.__contains__))
    assert first_divergence(merged[0], merged[1]) is not None


def _trace(events: list[tuple[str, str, int, int | None]]) -> tuple[list[Record], dict]:
    """Records from (kind `>`/`<`, name, time, return value) with depths and durations as
    the shadow stack makes them; the names' addresses made up."""
    addrs: dict[str, int] = {}
    records: list[Record] = []
    open_: list[tuple[int, int]] = []
    for kind, name, time, value in events:
        addr = addrs.setdefault(name, 0x1000 + 0x10 * len(addrs))
        if kind == ">":
            records.append(Entry(time, len(open_), addr, (Value("int", 32, 1),)))
            open_.append((addr, time))
        else:
            func, start = open_.pop()
            assert func == addr
            ret = None if value is None else Value("int", 32, value)
            records.append(Exit(time, len(open_), addr, ret, time - start))
    return records, {a: n for n, a in addrs.items()}


def _tokens(events: list[tuple[str, str, int, int | None]], **kw: object) -> object:
    records, names = _trace(events)
    return normalise(records, names.__getitem__, lambda n: not n.startswith("lib"), None,
                     **kw)  # type: ignore[arg-type]


def test_function_of_a_part() -> None:
    assert [function_of(n) for n in ("main.cold", "f.cold.1", "f.part.0", "f.part.0.cold",
                                     "f", ".cold", "f.constprop.0", "part.0")] == [
        "main", "f", "f", "f", "f", ".cold", "f.constprop.0", "part.0"]


@pytest.mark.parametrize("split", [
    # main's unlikely path moved to main.cold, entered from main's frame
    [(">", "main", 0, None), (">", "main.cold", 2, None), (">", "report", 3, None),
     ("<", "report", 5, 2), ("<", "main.cold", 6, 0), ("<", "main", 7, 0)],
    # main.cold reached after main's frame ended (a tracer that saw a tail jump)
    [(">", "main", 0, None), ("<", "main", 2, 5), (">", "main.cold", 2, None),
     (">", "report", 3, None), ("<", "report", 5, 2), ("<", "main.cold", 7, 0)],
    # main.cold calls a further part of main (main.part.0): both are main's
    [(">", "main", 0, None), (">", "main.cold", 1, None), (">", "main.part.0", 2, None),
     (">", "report", 3, None), ("<", "report", 5, 2), ("<", "main.part.0", 6, 0),
     ("<", "main.cold", 6, 0), ("<", "main", 7, 0)],
    # foo's head inlined into main, its body foo.part.0 called from there
    [(">", "main", 0, None), (">", "foo.part.0", 1, None), (">", "report", 3, None),
     ("<", "report", 5, 2), ("<", "foo.part.0", 6, 0), ("<", "main", 7, 0)],
])
def test_a_gcc_part_is_its_function(split: list) -> None:
    whole = [(">", "main", 0, None), (">", "report", 3, None), ("<", "report", 5, 2),
             ("<", "main", 7, 0)]
    if split[1][1] == "foo.part.0":
        whole = [(">", "main", 0, None), (">", "foo", 1, None), (">", "report", 3, None),
                 ("<", "report", 5, 2), ("<", "foo", 6, 0), ("<", "main", 7, 0)]
    a, b = _tokens(whole), _tokens(split)
    assert first_divergence(a, b) is None, (a, b)  # type: ignore[arg-type]


def test_a_void_function_returns_no_value() -> None:
    """`log_it` is void: one ISA's register holds a leftover value at its return (the
    recorder reads it where it knows no prototype), the other's none."""
    left = [(">", "main", 0, None), (">", "log_it", 1, None), ("<", "log_it", 4, 77),
            ("<", "main", 6, 0)]
    right = [(">", "main", 0, None), (">", "log_it", 1, None), ("<", "log_it", 5, None),
             ("<", "main", 6, 0)]
    void = {"log_it": False, "main": True}
    assert first_divergence(_tokens(left, returns=void), _tokens(right, returns=void)) is None
    typed = {"log_it": True, "main": True}  # a function that returns something: compared
    assert first_divergence(_tokens(left, returns=typed),
                            _tokens(right, returns=typed)) == 2


def test_a_tail_call_lends_no_value_to_its_caller() -> None:
    """`finish` is void and ends in a call of `count`.  One ISA's compiler made that call a
    jump, so `finish`'s frame closes with `count`'s, at the same time, and the recording
    gives it `count`'s value; the other's returns by itself, later, with no value (the
    recorder knew its prototype).  Compared without the program at hand (no DWARF: a
    recording whose program moved), the value lent by the tail call does not count."""
    jump = [(">", "main", 0, None), (">", "finish", 1, None), (">", "count", 2, None),
            ("<", "count", 5, 12), ("<", "finish", 5, 12), ("<", "main", 9, 0)]
    call = [(">", "main", 0, None), (">", "finish", 1, None), (">", "count", 2, None),
            ("<", "count", 5, 12), ("<", "finish", 7, None), ("<", "main", 9, 0)]
    jumped = _tokens(jump)
    assert first_divergence(jumped, _tokens(call)) is None  # type: ignore[arg-type]
    assert jumped.tokens[4].values == ()  # type: ignore[attr-defined]
    # a function whose prototype returns something returns its callee's value: kept
    kept = _tokens(jump, returns={"finish": True})
    assert kept.tokens[4].values == ("12",)  # type: ignore[attr-defined]
    assert first_divergence(kept, _tokens(call, returns={"finish": True})) == 4  # type: ignore


def test_constructors_are_compared_as_returning_nothing() -> None:
    """arm's DWARF says geo::Rect::Rect and ~Rect return a pointer (the Arm C++ ABI returns
    `this`); every other ISA's says void: diff compares them all as void, and keeps an
    ordinary member function's result."""
    from emutrace.cli.diff import _types
    from emutrace.discover.prototypes import read_prototypes

    arm = read_prototypes(str(bin_path("arm", "cxx")))
    assert arm.by_name["_ZN3geo4RectC2Eill"].ret.kind == "ptr"  # (what DWARF says there)
    _own, returns = _types(str(bin_path("arm", "cxx")), "simple")
    assert returns["geo::Rect::Rect"] is False and returns["geo::Rect::~Rect"] is False
    assert returns["geo::Rect::area"] is True
