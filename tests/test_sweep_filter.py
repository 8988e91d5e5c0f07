"""Each ISA's SweepFilter against its classifier, the reference: an instruction the filter
leaves out of a function's sweep must be one no site comes from (the classifier says NONE or
STOP, or a JUMP/BRANCH whose direct target is inside the function), on every instruction of
the ISA's test programs (C start-up, static glibc, -O0 to -O3 code, signals); and a sweep
with the filter finds exactly the functions a sweep without one finds.  The filter must
also leave out most instructions, or it would save nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emutrace.discover import Discovery, memo
from emutrace.discover.descent import descend
from emutrace.discover.functions import extent, from_symbol
from emutrace.discover.sites import resolve
from emutrace.discover.sweep import last_operand_number
from emutrace.elf import load_image
from emutrace.isa import by_name
from emutrace.isa.base import Cap, FlowKind
from tests.conftest import ISAS, bin_path

PROGRAMS = ("fib", "calls.O3.instr", "signals")
NO_SITE = (FlowKind.NONE, FlowKind.STOP)


def _discovery(isa: str, program: str) -> Discovery:
    memo._memo.clear()  # a fresh decoder: nothing from another test's sweeps
    return Discovery(load_image(str(bin_path(isa, program))))


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("isa", ISAS)
def test_what_the_filter_leaves_out_makes_no_site(isa: str, program: str) -> None:
    discovery = _discovery(isa, program)
    decoder, table = discovery.decoder, discovery.symbols
    rule = decoder.sweep_rule
    assert rule is not None, f"{isa}: no SweepFilter declared"
    code_address = discovery.image.isa.code_address
    swept = left_out = 0
    branches = jumps = calls = 0
    for sym in table.funcs:
        lo, hi = sym.start, extent(sym, table, decoder)
        for insn in decoder.linear(lo, hi, sym.alt):
            swept += 1
            target = rule.branch_target(insn)
            if target is not None:  # (descent's walk goes on past it: a conditional branch)
                branches += 1
                flow, executes = resolve(decoder, insn)
                assert flow.kind is FlowKind.BRANCH and flow.conditional, insn
                assert flow.target is not None and executes is None, insn
                assert code_address(flow.target) == code_address(target), insn
            target = rule.call_target(insn)
            if target is not None:  # (descent's walk goes on past it, hands it back)
                calls += 1
                flow, executes = resolve(decoder, insn)
                assert flow.kind is FlowKind.CALL and executes is None, insn
                assert flow.target is not None, insn
                assert code_address(flow.target) == code_address(target), insn
                assert rule.keeps(insn, lo, hi), insn  # (a sweep keeps every call)
            target = rule.jump_target(insn)
            if target is not None:  # (descent's walk follows it into the function)
                jumps += 1
                flow, executes = resolve(decoder, insn)
                assert flow.kind is FlowKind.JUMP and not flow.conditional, insn
                assert flow.target is not None and executes is None, insn
                assert code_address(flow.target) == code_address(target), insn
            if rule.keeps(insn, lo, hi):
                continue
            left_out += 1
            flow, executes = resolve(decoder, insn)
            if not rule.keeps(insn, 0, 0, stops=True):  # (descent's walk: what falls through)
                assert flow.kind is FlowKind.NONE, insn
            if flow.kind in NO_SITE:
                continue
            assert flow.kind in (FlowKind.JUMP, FlowKind.BRANCH) and executes is None, insn
            assert flow.target is not None and lo <= code_address(flow.target) < hi, insn
    assert swept > 20000
    assert left_out > swept // 2, f"{isa} {program}: only {left_out} of {swept} left out"
    # conditional branches are declared where descent walks (not ARM) and no delay slot is
    delay_slot = discovery.decoder.cls.delay_slot
    walks = discovery.decoder.cls.literal is None and not delay_slot
    assert (branches > 1000) is walks and (branches == 0 or not delay_slot), branches
    # so are unconditional direct jumps, where the ISA has them (not ARM, MIPS)
    assert (jumps > 100) is walks and (jumps == 0 or not delay_slot), jumps
    # and direct calls
    assert (calls > 100) is walks and (calls == 0 or not delay_slot), calls
    memo._memo.clear()


@pytest.mark.parametrize("isa", ISAS)
def test_a_filtered_sweep_finds_the_same_functions(isa: str) -> None:
    """from_symbol with the filter (in C where sweep.c is built) and without one."""
    for program in PROGRAMS[:2]:
        filtered = _discovery(isa, program)
        whole = _discovery(isa, program)
        whole.decoder.sweep_rule = None
        syms = filtered.symbols.funcs
        assert len(syms) > 300
        for sym in syms:
            want = from_symbol(sym, whole.symbols, whole.decoder)
            assert from_symbol(sym, filtered.symbols, filtered.decoder) == want, sym.name
    memo._memo.clear()


def test_every_isa_declares_a_filter() -> None:
    assert all(by_name(isa).classifiers.sweep is not None for isa in ISAS)  # type: ignore[union-attr]


def _known(asked: dict[int, bool], starts: set[int]) -> Callable[[int], bool]:
    """Function entries are the symbols' starts; each question noted (the first answer)."""
    def is_entry(addr: int) -> bool:
        return asked.setdefault(addr, addr in starts)
    return is_entry


@pytest.mark.parametrize("isa", ISAS)
def test_descent_walking_in_c_finds_the_same_functions(isa: str) -> None:
    """Recursive descent with its straight runs walked by sweep.c (Decoder.walk, where the
    ISA reads no literal pools or IT blocks; conditional branches into the function followed
    there) and one instruction at a time (the reference), from the entry of a stripped
    program and the callees found, and from every function symbol's start of static fib (up
    to 400 each): with no known function entry, and with every symbol's start known (a
    branch to one leaves the function: a site), asking the same questions in the same
    order."""
    descended = 0
    for program in ("calls.stripped", "fib"):
        walked = _discovery(isa, program)
        stepped = _discovery(isa, program)
        stepped.decoder.sweep_in_c = False
        starts = {walked.image.isa.code_address(s.start) for s in walked.symbols.funcs}
        entries = sorted({s.start for s in walked.symbols.funcs} | {walked.image.entry}) \
            if walked.symbols.funcs else []
        if not entries:  # stripped: the entry and the calls the descent finds from it
            entries = [walked.image.entry]
        assert len(entries) > 0
        seen: set[int] = set()
        while entries:
            entry = entries.pop()
            if entry in seen or len(seen) > 400:
                continue
            seen.add(entry)
            code, alt = walked.image.isa.entry_of(entry)
            want = descend(stepped.decoder, code, alt, lambda a: False)
            assert descend(walked.decoder, code, alt, lambda a: False) == want, hex(entry)
            asked: dict[str, dict[int, bool]] = {"walked": {}, "stepped": {}}
            assert descend(walked.decoder, code, alt, _known(asked["walked"], starts)) == \
                descend(stepped.decoder, code, alt, _known(asked["stepped"], starts)), \
                hex(entry)
            # (as Discovery._descend keeps them with the result: the first answers, in order)
            assert list(asked["walked"].items()) == list(asked["stepped"].items()), hex(entry)
            entries += [walked.image.isa.entry_of(site.target)[0] for site in want.calls
                        if site.target is not None and walked.decoder.in_code(
                            walked.image.isa.code_address(site.target))]
        descended += len(seen)
    assert descended > 100  # (stripped mips and arm call through registers: few found there)
    memo._memo.clear()


OPERANDS = st.lists(st.sampled_from(["r1", "#", "-", "0x", "0X", "0", "1", "9", "a", "F", "g",
                                     " ", "\t", ",", "[sp]", "#0x10", "-0x", "00", "_"]),
                    max_size=8).map("".join)
BIG = st.integers(-(1 << 70), 1 << 70).flatmap(
    lambda n: st.sampled_from([str(n), hex(n), f"#{hex(n)}", f"x, {n}"]))


@settings(max_examples=3000, deadline=None)
@given(st.one_of(OPERANDS, BIG))
def test_the_c_number_parser_equals_its_reference(text: str) -> None:
    """sweep.c's reading of a TARGET's last operand is last_operand_number's, where that
    is below 2^63 in magnitude (beyond, both leave the target unknown)."""
    from emutrace.native import disasmlib

    sweep = disasmlib._sweep()
    assert sweep is not None
    want = last_operand_number(text)
    if want is not None and abs(want) >= 1 << 63:
        want = None
    assert sweep[0].number(text) == want


# ---------------------------------------------------------------- the capability table
def _cap(cap: Cap) -> list[object]:
    out: list[object] = []
    for isa in ISAS:
        found = by_name(isa).capability(cap)
        out.append(pytest.param(isa, marks=() if found.works else pytest.mark.xfail(
            strict=True, reason=found.reason)))
    return out


def _sweep_stats() -> tuple[int, int]:
    from emutrace.native import disasmlib

    sweep = disasmlib._sweep()
    assert sweep is not None
    return sweep[0].stats()  # type: ignore[no-any-return]


@pytest.mark.parametrize("isa", _cap(Cap.SWEEP_DECODES_KEPT_ONLY))
def test_a_first_run_decodes_only_what_the_filter_keeps(isa: str) -> None:
    """Sweeping every function of fib, capstone decodes (in sweep.c) fewer than half the
    instructions the sweep goes through (those it keeps, and each function's last), where
    the capability table says so; elsewhere it decodes them all."""
    reference = _discovery(isa, "fib")
    reference.decoder.sweep_in_c = False
    table = reference.symbols
    swept = sum(len(reference.decoder.linear(s.start, extent(s, table, reference.decoder),
                                             s.alt)) for s in table.funcs)
    discovery = _discovery(isa, "fib")
    before, _ = _sweep_stats()
    for sym in discovery.symbols.funcs:
        from_symbol(sym, discovery.symbols, discovery.decoder)
    decoded = _sweep_stats()[0] - before
    assert swept > 20000 and decoded > 0
    assert decoded < swept // 2, f"{isa}: {decoded} of {swept} instructions decoded"
    memo._memo.clear()


@pytest.mark.parametrize("isa", _cap(Cap.DESCENT_WALK_NATIVE))
def test_descent_walks_straight_code_in_c(isa: str) -> None:
    """Recursive descent from every function of fib walks its straight runs in sweep.c,
    where the capability table says so; elsewhere it steps in Python."""
    discovery = _discovery(isa, "fib")
    _, before = _sweep_stats()
    for sym in discovery.symbols.funcs[:200]:
        descend(discovery.decoder, sym.start, sym.alt, lambda a: False)
    assert _sweep_stats()[1] - before > 200
    memo._memo.clear()
