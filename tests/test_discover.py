"""Function discovery (emutrace.discover) against independent oracles: the self-recorded call
sequence of `calls.instr` under qemu-user, the call graph testbins/README.md documents, the
C sources, the unstripped twin of a stripped binary, and the per-ISA edge programs."""

from __future__ import annotations

import re
import subprocess
from functools import cache

import pytest

from emutrace.discover import Discovery, Function, SiteKind
from emutrace.discover.decode import Decoder
from emutrace.discover.functions import (
    MAX_TAIL_INSNS,
    _falls_through,
    code_limit,
    extent,
    from_symbol,
)
from emutrace.discover.model import Site
from emutrace.discover.sites import site_for
from emutrace.discover.symbols import FuncSymbol, SymbolTable, read_symbols
from emutrace.elf import load_image
from tests.conftest import ISAS, TESTBINS, bin_path, qemu_binary


@cache
def discovery(isa: str, prog: str) -> Discovery:
    return Discovery(load_image(str(bin_path(isa, prog))))


def callee_names(d: Discovery, f: Function, kind: SiteKind) -> set[str | None]:
    return {d.function_at(s.target).name for s in f.sites
            if s.kind is kind and s.target is not None}


# ------------------------------------------------ (1) the program's own call record

HOOKS = ("__cyg_profile_func_enter", "__cyg_profile_func_exit")


def instr_edges(isa: str, scenario: str) -> set[tuple[int, int]]:
    """(caller, callee) global entries as `calls.instr` records them (README format)."""
    proc = subprocess.run([qemu_binary(isa), str(bin_path(isa, "calls.instr")), scenario],
                          capture_output=True, timeout=120, env={"LC_ALL": "C"})
    assert proc.returncode == 0, proc.stderr[-500:]
    stack: list[int] = []
    edges = set()
    for line in proc.stderr.decode().splitlines():
        m = re.fullmatch(r"([<>]) (0x[0-9a-f]+)", line)
        if not m:
            continue
        addr = int(m.group(2), 16)
        if m.group(1) == ">":
            if stack:
                edges.add((stack[-1], addr))
            stack.append(addr)
        else:
            assert stack and stack[-1] == addr
            stack.pop()
    assert edges
    return edges


@pytest.mark.parametrize("scenario", ["recursion", "fnptr", "qsort", "tail"])
@pytest.mark.parametrize("isa", ISAS)
def test_instr_record_edges_are_explained(isa: str, scenario: str) -> None:
    d = discovery(isa, "calls.instr")
    instrumented = {d.function_at(caller).start for caller, _ in instr_edges(isa, "recursion")}
    for caller_entry, callee_entry in instr_edges(isa, scenario):
        caller = d.function_at(caller_entry)
        callee = d.function_at(callee_entry)
        assert caller.entry == caller_entry and callee.entry == callee_entry
        direct = {d.function_at(s.target).start for s in caller.sites
                  if s.kind in (SiteKind.CALL, SiteKind.TAIL) and s.target is not None}
        if callee.start in direct:
            continue  # a direct call (ppc64le: to the callee's local entry)
        if any(s.indirect for s in caller.calls):
            continue  # through a pointer
        # the callee was called back from an uninstrumented function (libc qsort, bsearch)
        # that the caller calls directly; the profiling hooks do not count: every function
        # calls them, and they call nothing of the program
        via = {d.function_at(s.target) for s in caller.calls if s.target is not None}
        assert any(f.name not in HOOKS and f.start not in instrumented for f in via), \
            (caller.name, callee.name)
        assert scenario == "qsort", (caller.name, callee.name)


# ------------------------------------------------ (2) the documented call graph

@pytest.mark.parametrize("isa", ISAS)
def test_documented_sites(isa: str) -> None:
    d = discovery(isa, "calls")
    fn = d.function_by_name
    assert "fact" in callee_names(d, fn("fact"), SiteKind.CALL)
    assert "is_odd" in callee_names(d, fn("is_even"), SiteKind.CALL)
    assert "is_even" in callee_names(d, fn("is_odd"), SiteKind.CALL)
    # README `tail`: jumps in `calls` on every ISA
    for src, dst in [("tail_chain_start", "tail_chain_mid"), ("tail_chain_mid", "tail_chain_end"),
                     ("tail_chain_end", "tail_leaf"), ("tail_ping", "tail_pong"),
                     ("tail_pong", "tail_ping")]:
        f = fn(src)
        assert dst in callee_names(d, f, SiteKind.TAIL), (src, f.sites)
        assert dst not in callee_names(d, f, SiteKind.CALL)
    dispatch = fn("tail_dispatch")
    # ...except ppc64le's tail_dispatch, a real `bctrl` (ELFv2 restores r2 after it)
    kind = SiteKind.CALL if isa == "ppc64le" else SiteKind.TAIL
    assert [s.indirect is not None for s in dispatch.sites if s.kind is kind] == [True]
    assert fn("tail_leaf").returns and not fn("tail_leaf").calls


# ------------------------------------------------ (3) every function of calls.c ends

# end in longjmp() / exit() (declared noreturn), or only call such a function: gcc -O1
# infers noreturn for those (ipa-pure-const) and emits no return after the call
NORETURN = {"jump_level1", "jump_level2", "jump_level3", "jump_level4", "jump_level5",
            "exit_inner", "exit_outer", "scenario_exit42"}


def calls_c_functions() -> list[str]:
    src = (TESTBINS / "src" / "calls.c").read_text()
    return re.findall(r"^(?:static )?[a-z][\w ]*?[ *](\w+)\([^;]*?\)\s*(?:\{|$)", src, re.M)


def test_calls_c_function_list() -> None:
    names = calls_c_functions()
    assert {"fact", "main", "scenario_crash", "op_xor", "exit_inner"} <= set(names)
    assert len(names) > 50


@pytest.mark.parametrize("isa", ISAS)
def test_every_function_returns_or_tails(isa: str) -> None:
    d = discovery(isa, "calls")
    for name in calls_c_functions():
        f = d.function_by_name(name)
        assert f.end > f.start
        if name in NORETURN:
            assert not f.returns, name
        else:
            assert f.returns or f.tails, name


# ------------------------------------------------ (4) stripped: recursive descent

@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["main", "scenario_recursion", "fact", "run_scenario"])
def test_descent_on_stripped_matches_symbols(isa: str, name: str) -> None:
    plain = discovery(isa, "calls").function_by_name(name)
    stripped = Discovery(load_image(str(bin_path(isa, "calls.stripped"))))
    assert not stripped.symbols.funcs
    found = stripped.function_at(plain.entry)
    assert found.start == plain.start and found.end <= plain.end
    assert [s.addr for s in found.calls] == [s.addr for s in plain.calls]
    assert [s.target for s in found.calls] == [s.target for s in plain.calls]
    assert {s.addr for s in found.returns} <= {s.addr for s in plain.returns}
    assert found.returns


# ------------------------------------------------ (5) edge programs

def test_s390x_exrl_calls() -> None:
    d = discovery("s390x", "edge_exrl")
    basr = d.function_by_name("ex_call_basr").calls
    assert [(s.indirect, s.executes is not None) for s in basr] == [("r1", True)]
    brasl = d.function_by_name("ex_call_brasl").calls
    assert [d.function_at(s.target).name for s in brasl if s.target] == ["ex_add_ten"]
    assert brasl[0].executes is not None and brasl[0].size == 6  # the EXRL itself


@pytest.mark.parametrize("isa", ["mips", "mipsel"])
def test_mips_delay_slots(isa: str) -> None:
    d = discovery(isa, "edge_delay")
    sites = [s for n in ("md_call_jal", "md_call_bal", "md_call_jalr", "md_add_one")
             for s in d.function_by_name(n).sites]
    assert sites and all(s.delay_slot for s in sites)
    assert "md_add_one" in callee_names(d, d.function_by_name("md_call_jal"), SiteKind.CALL)
    assert "md_add_one" in callee_names(d, d.function_by_name("md_call_bal"), SiteKind.CALL)
    assert [s.indirect for s in d.function_by_name("md_call_jalr").calls] != [None]


def test_riscv_compressed() -> None:
    d = discovery("riscv64", "edge_compressed")
    fn = d.function_by_name
    assert [(s.kind, s.size) for s in fn("rc_add_one").sites] == [(SiteKind.RETURN, 2)]
    assert [(s.size, s.indirect) for s in fn("rc_call_compressed").calls] == [(2, "0(x5)")]
    assert [s.size for s in fn("rc_call_compressed").returns] == [2]
    assert [s.size for s in fn("rc_call_full").calls] == [4]
    assert [(s.size, s.indirect) for s in fn("rc_tail_compressed").tails] == [(2, "0(x5)")]
    jump = fn("rc_jump_compressed").tails
    assert [(s.size, s.target is not None) for s in jump] == [(2, True)]


def test_x86_64_call_through_memory() -> None:
    d = discovery("x86_64", "edge_callmem")
    for name in ("call_table_indexed", "call_through_pointer", "call_rip_relative",
                 "call_stack_slot"):
        calls = d.function_by_name(name).calls
        assert len(calls) == 1 and calls[0].indirect and "ptr [" in calls[0].indirect, name


def test_arm_interworking() -> None:
    d = discovery("arm", "edge_interwork")
    fn = d.function_by_name
    assert not fn("arm_square").alt_mode and fn("thumb_add3").alt_mode
    assert fn("asm_thumb_leaf").alt_mode and not fn("asm_arm_blx_thumb").alt_mode
    for caller, callee in [("arm_calls_thumb", "thumb_add3"), ("thumb_calls_arm", "arm_square"),
                           ("asm_arm_blx_thumb", "thumb_add3"),
                           ("asm_thumb_blx_arm", "arm_square")]:
        targets = [s.target for s in fn(caller).calls if s.target is not None]
        assert fn(callee).entry in targets, (caller, [hex(t) for t in targets])
    for name in ("arm_call_ptr", "thumb_call_ptr"):
        assert [s.indirect is not None for s in fn(name).calls] == [True]
    for name in ("arm_square", "thumb_add3", "asm_thumb_leaf", "arm_calls_thumb",
                 "thumb_calls_arm"):
        assert fn(name).returns, name


def test_ppc64le_local_entry() -> None:
    d = discovery("ppc64le", "edge_localentry")
    acc, scale = d.function_by_name("le_accumulate"), d.function_by_name("le_scale")
    assert acc.local_offset == 8 and scale.local_offset == 0
    main = d.function_by_name("main")
    targets = {s.target for s in main.calls if s.target is not None}
    assert acc.local_entry in targets and acc.start not in targets
    assert d.function_at(acc.local_entry) is acc
    assert [s.indirect for s in d.function_by_name("le_call_ptr").calls] == ["ctr"]


# ------------------------------------------------ the sweep in stretches = one at a time

def _sweep_one_by_one(sym: FuncSymbol, table: SymbolTable, decoder: Decoder) -> Function:
    """The linear sweep as discovery did it before stretches (the reference): one
    `insn_at` per instruction, `$d` data skipped by the instruction alignment, continued
    one instruction at a time past the symbol's end while the code falls through."""
    end = extent(sym, table, decoder)
    limit = code_limit(sym, table, decoder)
    sites: list[Site] = []
    last: int | None = None
    addr, tail = sym.start, 0

    def inside(a: int) -> bool:
        return sym.start <= a < end

    while addr < end:
        insn = None if table.in_data(addr) else decoder.insn_at(addr, sym.alt)
        if insn is None:
            last = None
            addr += decoder.align(sym.alt)
        else:
            site = site_for(decoder, insn, inside)
            if site is not None:
                sites.append(site)
            last = addr
            addr += insn.size
        if addr >= end and last is not None and tail < MAX_TAIL_INSNS and addr < limit \
                and not decoder.cls.delay_slot and _falls_through(decoder, last, sym.alt):
            end = addr + 1
            tail += 1
    end = max(end, addr) if tail else end
    return Function(sym.name, sym.start, end, tuple(sites), sym.alt, sym.local_offset)


# x86_64: variable length; arm: `$d` literal pools and Thumb; s390x: EXRL, 2-6 byte insns
@pytest.mark.parametrize("isa", ["x86_64", "arm", "s390x"])
def test_stretch_sweep_equals_one_by_one(isa: str) -> None:
    """Every sixth function symbol of static `fib` (glibc: ~180 functions, ~20,000
    instructions; all of them: 7-14 s) read by from_symbol (stretches of code decoded in
    one capstone call, each instruction classified once) is the function the
    one-at-a-time sweep reads, each with a decoder of its own."""
    image = load_image(str(bin_path(isa, "fib")))
    table = read_symbols(image)
    fast, slow = Decoder(image), Decoder(image)
    fast.instructions, slow.instructions = {}, {}  # (not the process memo's)
    for sym in table.funcs[::6]:
        assert from_symbol(sym, table, fast) == _sweep_one_by_one(sym, table, slow), sym.name
    # and the instructions both decoded (what the backends read at sites) are the same
    # (from_symbol's sweep keeps only those its SweepFilter keeps: decode.Decoder.scan)
    both = fast.instructions.keys() & slow.instructions.keys()
    assert len(both) > 1_000
    assert all(fast.instructions[k] == slow.instructions[k] for k in both)


def test_thumb_stretches_decode_as_each_instruction_alone() -> None:
    """Thumb code decoded in stretches (decode.py: each ends at an IT instruction) reads as
    capstone reads each instruction alone, in a call of its own: an IT block's instructions
    without the condition the IT gives them (`mov`, never `moveq`).  Every Thumb function of
    arm `fib` (static glibc: hundreds of IT blocks)."""
    import capstone

    image = load_image(str(bin_path("arm", "fib")))
    table = read_symbols(image)
    decoder = Decoder(image)
    decoder.instructions = {}  # (not the process memo's)
    alone = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB)
    blocks = checked = 0
    for sym in [s for s in table.funcs if s.alt]:
        for insn in decoder.linear(sym.start, extent(sym, table, decoder), True):
            base, data = next((b, d) for b, d in decoder.code_ranges()
                              if b <= insn.addr < b + len(d))
            off = insn.addr - base
            first = next(alone.disasm_lite(data[off:off + 16], insn.addr, 1))
            assert first == (insn.addr, insn.size, insn.mnemonic, insn.op_str), first
            assert insn.raw == data[off:off + insn.size]
            blocks += insn.mnemonic.startswith("it")
            checked += 1
    assert blocks > 100 and checked > 10_000
