"""The canonical form, its normaliser, the -finstrument-functions oracle parser, and the
oracle on real data: `calls.instr` of all ten ISAs under qemu-user gives the same canonical
trace for every scenario, and `recursion`/`deep` have the structure calls.c implies."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from emutrace.elf import load_image
from emutrace.isa import by_name
from emutrace.trace.canonical import (
    canonical_from_instr,
    canonical_lines,
    instr_records,
    parse_instr_record,
    trace_key,
)
from emutrace.trace.events import Call, Entry, Event, Exit, Record, Return
from emutrace.trace.shadow import ShadowStack
from tests.conftest import ENV, ISAS, bin_path, qemu_binary

NAMES = {1: "main", 2: "scenario_qsort", 3: "qsort", 4: "msort_with_tmp", 5: "compare_ints",
         6: "__memcpy_avx_unaligned", 7: "jump_level1", 8: "jump_level2"}


def sym(addr: int) -> str:
    return NAMES[addr]


def test_canonical_lines_and_normaliser() -> None:
    recs: list[Record] = [
        Entry(0, 0, 1), Entry(1, 1, 2), Entry(2, 2, 6), Exit(3, 2, 6, 0, 1),
        Entry(4, 2, 3), Entry(5, 3, 4), Entry(6, 4, 5), Exit(7, 4, 5, 1, 1),
        Exit(8, 3, 4, None, 3), Exit(9, 2, 3, None, 5), Exit(10, 1, 2, None, 9),
        Exit(11, 0, 1, 0, 11)]
    assert canonical_lines(recs, sym) == [
        "> main", "  > scenario_qsort", "    > __memcpy_avx_unaligned",
        "    < __memcpy_avx_unaligned", "    > qsort", "      > msort_with_tmp",
        "        > compare_ints", "        < compare_ints", "      < msort_with_tmp",
        "    < qsort", "  < scenario_qsort", "< main"]
    program = {"main", "scenario_qsort", "compare_ints"}
    expected = ["> main", "  > scenario_qsort", "    > compare_ints", "    < compare_ints",
                "  < scenario_qsort", "< main"]
    assert canonical_lines(recs, sym, program) == expected
    assert canonical_lines(recs, sym, program.__contains__) == expected


def test_oracle_parser_reconciles_longjmp_and_exit() -> None:
    text = "> 0x1\n> 0x2\n> 0x7\n> 0x8\n< 0x2\n> 0x5\n\n"
    pairs = parse_instr_record(text)
    assert pairs == [(">", 1), (">", 2), (">", 7), (">", 8), ("<", 2), (">", 5)]
    recs = instr_records(pairs)
    assert [r for r in recs if isinstance(r, Exit)][:3] == [
        Exit(4, 3, 8, None, 1, unwound=True), Exit(4, 2, 7, None, 2, unwound=True),
        Exit(4, 1, 2, None, 3)]
    assert canonical_lines(recs, sym) == [
        "> main", "  > scenario_qsort", "    > jump_level1", "      > jump_level2",
        "      <~ jump_level2", "    <~ jump_level1", "  < scenario_qsort", "  > compare_ints",
        "  <! compare_ints", "<! main"]


def test_oracle_parser_rejects_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_instr_record("> 0x1\n> 1234\n")
    with pytest.raises(ValueError, match="not open"):
        instr_records([(">", 1), ("<", 2)])


def test_shadow_stack_and_oracle_agree_on_a_longjmp() -> None:
    """The same run seen by a tracer (calls and returns with sp) and by the self-record."""
    down = [0x8000 - 0x40 * i for i in range(6)]
    events: list[Event] = [Call(0, 0, 1, down[0], 0x100), Call(1, 0, 2, down[1], 0x200),
              Call(2, 0, 7, down[2], 0x300), Call(3, 0, 8, down[3], 0x400),
              # longjmp back into scenario_qsort's body; it calls memcpy (libc), returns
              Call(4, 0, 6, down[2], 0x310), Return(5, 0, down[2] - 8, 0, 0x310),
              Return(6, 0, down[1] - 8, 0, 0x200)]
    shadow = ShadowStack()
    recs = list(shadow.process(events)) + shadow.close_all(7)
    program = {"main", "scenario_qsort", "jump_level1", "jump_level2"}
    oracle = "> 0x1\n> 0x2\n> 0x7\n> 0x8\n< 0x2\n"
    assert "".join(line + "\n" for line in canonical_lines(recs, sym, program)) \
        == canonical_from_instr(oracle, sym, program)


# -- real data: calls.instr under qemu-user ------------------------------------------------

SCENARIOS = ("recursion", "fnptr", "qsort", "varargs", "struct", "args9", "longjmp",
             "fileio", "heap", "float", "tail", "deep", "exit42", "crash", "all")


@cache
def symbolizer(isa: str) -> Callable[[int], str]:
    image = load_image(str(bin_path(isa, "calls.instr")))
    mask = by_name(isa).code_mask  # Thumb: &f has bit 0 set, st_value too

    def symbolize(addr: int) -> str:
        return image.symbolize(addr & mask)
    return symbolize


def oracle_canonical(isa: str, scenario: str, workdir: str) -> str:
    out = Path(workdir) / f"{isa}.{scenario}.rec"
    subprocess.run([qemu_binary(isa), str(bin_path(isa, "calls.instr")), scenario],
                   cwd=workdir, env={**ENV, "CALLTRACE_OUT": str(out)},
                   capture_output=True, timeout=120, check=False)
    text = out.read_text()
    canon = canonical_from_instr(text, symbolizer(isa))
    assert canon, f"{isa} {scenario}: empty record"
    return canon


@cache
def oracle_key(isa: str, scenario: str, workdir: str) -> str:
    """oracle_canonical as trace_key keeps it (deep's 200 MB text: a digest), made once."""
    return trace_key(oracle_canonical(isa, scenario, workdir))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("instr"))


@pytest.mark.oracle
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_instr_canonical_is_the_same_on_all_isas(scenario: str, workdir: str) -> None:
    first_text = oracle_canonical(ISAS[0], scenario, workdir)
    assert "+0x" not in first_text and "??" not in first_text  # every name a function start
    del first_text
    traces = {isa: oracle_key(isa, scenario, workdir) for isa in ISAS}
    first = traces[ISAS[0]]
    differing = [isa for isa, t in traces.items() if t != first]
    assert not differing, f"{scenario}: canonical trace differs on {differing}"


def call_tree(name: str, children: list[str]) -> list[str]:
    """Canonical lines of a frame whose children's lines are given (unindented)."""
    return [f"> {name}", *("  " + c for c in children), f"< {name}"]


def fact_lines(n: int) -> list[str]:
    return call_tree("fact", [] if n <= 1 else fact_lines(n - 1))


def fib_lines(n: int) -> list[str]:
    return call_tree("fib", [] if n < 2 else fib_lines(n - 1) + fib_lines(n - 2))


def parity_lines(name: str, n: int) -> list[str]:
    other = "is_odd" if name == "is_even" else "is_even"
    return call_tree(name, [] if n == 0 else parity_lines(other, n - 1))


def fib_calls(n: int) -> int:
    """C(n) = 1 + C(n-1) + C(n-2) for n >= 2, else 1: the recurrence of calls.c's fib."""
    a, b = 1, 1  # C(0), C(1)
    for _ in range(n - 1):
        a, b = b, 1 + a + b
    return b if n >= 1 else a


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ISAS)
def test_recursion_structure_follows_calls_c(isa: str, workdir: str) -> None:
    canon = oracle_canonical(isa, "recursion", workdir)
    body = (fact_lines(10) + fib_lines(12) + parity_lines("is_even", 10)
            + parity_lines("is_odd", 7))
    expected = call_tree("main", call_tree("run_scenario", call_tree("scenario_recursion",
                                                                     body)))
    assert canon.splitlines() == expected
    assert canon.count("> fib\n") == fib_calls(12) == len(fib_lines(12)) // 2
    assert fib_calls(2) == 3 and fib_calls(3) == 5  # fib(2) → fib(1), fib(0)


@pytest.mark.oracle
@pytest.mark.parametrize("isa", ["x86_64", "s390x"])
def test_deep_recursion_structure(isa: str, workdir: str) -> None:
    lines = oracle_canonical(isa, "deep", workdir).splitlines()
    n = 10_000  # calls.c: deep_recurse ARG deep, default 10000; depth 0 is a call too
    assert [line.strip() for line in lines[:3]] == ["> main", "> run_scenario",
                                                    "> scenario_deep"]
    assert lines.count(" " * 6 + "> deep_recurse") == 1
    assert sum(line.strip() == "> deep_recurse" for line in lines) == n + 1
    assert lines[3 + n] == "  " * (3 + n) + "> deep_recurse"
    assert len(lines) == 2 * (3 + n + 1)


@pytest.mark.oracle
def test_longjmp_and_exit_frames_in_the_record(workdir: str) -> None:
    lj = oracle_canonical("x86_64", "longjmp", workdir).splitlines()
    assert [line.strip() for line in lj if line.strip().startswith("<~")] == [
        f"<~ jump_level{i}" for i in (5, 4, 3, 2, 1)]
    ex = oracle_canonical("x86_64", "exit42", workdir).splitlines()
    assert [line.strip() for line in ex if line.strip().startswith("<")] == [
        f"<! {f}" for f in ("exit_inner", "exit_outer", "scenario_exit42", "run_scenario",
                            "main")]
