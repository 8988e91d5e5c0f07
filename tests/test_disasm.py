"""Discovery's decoding in C (emutrace/native/disasm.c: capstone's C library called from the
native library) against its reference, capstone's Python binding: the same instructions
(address, size, mnemonic, operands) over the code of a static glibc program on every ISA,
and in Thumb on ARM; the same answer where nothing decodes.

The sweep below drives both decoders the same way (a window of code per call, the next call
where the last decoded instruction ends, the ISA's alignment past bytes that do not decode),
so any difference is the decoders'."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import pytest

from emutrace.discover import Discovery, memo
from emutrace.discover.decode import binding_engine, engine
from emutrace.elf import PF_X, load_image
from emutrace.isa import by_name
from emutrace.native.disasmlib import NativeDisassembler, disassembler
from tests.conftest import BUSYBOX, ISAS, bin_path

WINDOW = 1024  # bytes per call: never more than disasmlib.MAX_INSNS instructions
SPAN = 96 * 1024  # bytes of the executable segment swept (C start-up, main, much of libc)
THUMB_BATCH = 16  # as decode.py: capstone keeps an IT block's state within one call


def sweep(decoder: Any, data: bytes, base: int, count: int, align: int) -> list[object]:
    out: list[object] = []
    off = 0
    while off < len(data):
        got = list(decoder.disasm_lite(data[off:off + WINDOW], base + off, count))
        if not got:
            out.append(("undecodable", base + off))
            off += align
            continue
        out += got
        last_addr, last_size = got[-1][0], got[-1][1]
        off = last_addr + last_size - base
    return out


def code_of(isa: str) -> tuple[int, bytes]:
    image = load_image(str(bin_path(isa, "fib")))
    seg = next(s for s in image.segments if s.flags & PF_X)
    return seg.vaddr, bytes(seg.data[:SPAN])


def modes(isa: str) -> list[tuple[str, tuple[str, ...], int, int]]:
    """(label, capstone modes, instructions per call, alignment) of the ISA's decoders."""
    spec = by_name(isa)
    cls = spec.classifiers
    assert cls is not None
    out = [("main", spec.engines.cs_mode, 0, cls.insn_align)]
    if cls.alt_mode:
        out.append(("alt", cls.alt_mode, THUMB_BATCH, cls.alt_insn_align))
    return out


@pytest.mark.parametrize("isa", ISAS)
def test_native_decoding_equals_the_binding(isa: str) -> None:
    base, data = code_of(isa)
    arch = by_name(isa).engines.cs_arch
    for label, cs_modes, count, align in modes(isa):
        native = disassembler(arch, cs_modes)
        assert native is not None, "the native library decodes (built with capstone's header)"
        want = sweep(binding_engine(arch, cs_modes), data, base, count, align)
        got = sweep(native, data, base, count, align)
        assert len(want) > 5000, label
        assert got == want, label


def test_the_decoder_uses_the_native_path() -> None:
    assert isinstance(engine("CS_ARCH_X86", ("CS_MODE_64",)), NativeDisassembler)


def test_a_stretch_stops_where_decoding_stops() -> None:
    """Bytes that do not decode end a stretch, as in the binding: `nop; nop; ud2`-free junk
    (0xff 0xff is no x86 instruction)."""
    native = disassembler("CS_ARCH_X86", ("CS_MODE_64",))
    assert native is not None
    code = b"\x90\x90\xff\xff\x90"
    want = list(binding_engine("CS_ARCH_X86", ("CS_MODE_64",)).disasm_lite(code, 0x1000))
    assert list(native.disasm_lite(code, 0x1000)) == want == [
        (0x1000, 1, "nop", ""), (0x1001, 1, "nop", "")]
    assert list(native.disasm_lite(b"\xff\xff", 0x1000)) == []


# ---------------------------------------------------------------- the sweep loop in C
@contextlib.contextmanager
def fib_discovery(isa: str, in_c: bool = True) -> Iterator[Discovery]:
    """Discovery of the ISA's fib with a decoder of its own (an empty instruction table, not
    the in-process memo's), sweeping in C (sweep.c) or with the Python loops."""
    memo._memo.clear()
    try:
        discovery = Discovery(load_image(str(bin_path(isa, "fib"))))
        discovery.decoder.sweep_in_c = in_c
        discovery.decoder.instructions = {}
        yield discovery
    finally:
        memo._memo.clear()


def swept_tables(isa: str, in_c: bool) -> tuple[dict[object, object], list[object]]:
    """Every function of the ISA's fib swept by a Decoder (the sweep loop in sweep.c, or its
    Python reference), Thumb ones in Thumb; its instruction table and each sweep's result."""
    with fib_discovery(isa, in_c) as discovery:
        decoder = discovery.decoder
        runs: list[object] = []
        for sym in discovery.symbols.funcs:
            if sym.size:
                runs.append(decoder.linear(sym.start, sym.start + sym.size, sym.alt))
        # undecodable bytes: a stretch that ends there, and one that starts there
        lo, data = decoder.code_ranges()[0]
        runs.append([decoder.insn_at(lo + len(data) - 1, False)])
        return decoder.instructions, runs


@pytest.mark.parametrize("isa", ISAS)
def test_the_sweep_in_c_equals_its_python_reference(isa: str) -> None:
    """Same Insn tuples (type and fields), the same table of instructions and undecodable
    places, the same stretches, from sweep.c as from Decoder._decode_stretch's loop."""
    want_table, want_runs = swept_tables(isa, False)
    got_table, got_runs = swept_tables(isa, True)
    assert len(want_table) > 5000
    assert got_runs == want_runs
    assert got_table == want_table
    assert list(got_table) == list(want_table)  # kept in the same order
    assert {type(i) for i in got_table.values()} == {type(i) for i in want_table.values()}
    if by_name(isa).classifiers.alt_mode:  # type: ignore[union-attr]
        assert any(key[1] for key in got_table)  # Thumb code was swept too


def test_the_decoder_sweeps_in_c() -> None:
    """Where sweep.c is built, a Decoder uses it (not a silent fallback to the loop)."""
    from emutrace.native import disasmlib

    assert disasmlib._sweep() is not None


def scans(isa: str, in_c: bool) -> list[object]:
    """Decoder.scan over every function of the ISA's fib (Thumb ones in Thumb), from the
    start of its symbol to its end and from its middle, with that extent as the function."""
    with fib_discovery(isa, in_c) as discovery:
        decoder = discovery.decoder
        out: list[object] = []
        for sym in discovery.symbols.funcs:
            end = sym.start + max(sym.size, 64)
            for start in (sym.start, sym.start + sym.size // 2 // 4 * 4):
                out.append(decoder.scan(start, end, sym.alt, sym.start, end))
        lo, data = decoder.code_ranges()[0]
        out.append(decoder.scan(lo + len(data) - 2, lo + len(data) + 8, False, lo, lo + 1))
        return out


@pytest.mark.parametrize("isa", ISAS)
def test_the_scan_in_c_equals_its_python_reference(isa: str) -> None:
    """sweep.c's scan keeps the same instructions as Decoder.scan's Python loop (the ISA's
    SweepFilter applied to `linear`), stops at the same place with the same last one."""
    want = scans(isa, False)
    got = scans(isa, True)
    kept = sum(len(k) for k, _, _ in want)  # type: ignore[misc]
    swept = sum(1 for _ in want)
    assert swept > 500 and kept > 1000
    assert got == want


@pytest.mark.parametrize("isa", ISAS)
def test_block_counts_in_c_equal_their_python_reference(isa: str) -> None:
    """Decoder.block_count by sweep.c equals len(insn_starts) (the reference) on blocks of
    every ISA's fib: at each function's start and middle, of several sizes, one reaching
    past the code, in each mode (undecodable spots count one and skip the alignment);
    with the sizes decoded by the count itself, read back from the size map, and noted by
    a sweep of every function."""
    with fib_discovery(isa) as discovery:
        decoder = discovery.decoder
        lo, data = decoder.code_ranges()[0]
        blocks = [(sym.start + skip, size, sym.alt) for sym in discovery.symbols.funcs
                  for skip in (0, sym.size // 2) for size in (1, 7, 40, 333)]
        blocks.append((lo + len(data) - 6, 64, False))
        decoder.instructions = {}
        decoder._size_maps.clear()
        decoded = [decoder._count(*block) for block in blocks]  # sizes decoded and noted
        noted = [decoder._count(*block) for block in blocks]  # sizes read from the map
        decoder.instructions = {}
        want = [len(decoder.insn_starts(*block)) for block in blocks]
        assert len(blocks) > 1000 and sum(want) > 50000
        assert decoded == want and noted == want
        # and the sizes a sweep notes (scan, walk) are what a count decodes
        decoder._size_maps.clear()
        for sym in discovery.symbols.funcs:
            decoder.scan(sym.start, sym.start + sym.size, sym.alt, sym.start,
                         sym.start + sym.size)
        assert any(any(m) for m in decoder._size_maps.values())
        assert [decoder._count(*block) for block in blocks] == want


def _length_programs() -> list[Any]:
    out = [pytest.param(isa, str(bin_path(isa, name)), id=f"{isa}-{name}")
           for isa in ("x86_64", "i386", "s390x") for name in ("fib", "calls.O3.instr", "threads")]
    for isa in ("x86_64", "s390x"):
        busybox = BUSYBOX / isa / "busybox"  # (fetched by set-up)
        if busybox.exists():
            out.append(pytest.param(isa, str(busybox), id=f"{isa}-busybox"))
    return out


@functools.cache
def _encodings_checked(isa: str) -> set[bytes]:
    """The encodings test_length_decoders_agree_with_capstone has checked on an ISA (its
    programs share most of their code, a static glibc)."""
    return set()


@pytest.mark.parametrize(("isa", "path"), _length_programs())
def test_length_decoders_agree_with_capstone(isa: str, path: str) -> None:
    """A sweep filter's length decoder in C (`SweepFilter.lengths`: native/x86len.c,
    native/s390len.c), where it gives a length, gives capstone's (the binding's) for the
    instruction decoded alone there, and that instruction is one the filter leaves out
    (SweepRule.keeps false even for recursive descent, which keeps every STOP and TARGET) —
    at every offset of the executable segments the ISA's alignment allows, instruction
    starts or not, so that invalid and odd encodings are held to it too; and it gives one for
    most of the instructions a linear sweep decodes that the filter leaves out (what spares
    the sweep capstone).

    Each encoding (the bytes the C decoder measured) is checked once per ISA: capstone
    decodes an x86 or s390x instruction from its own bytes alone (an x86 decoder reads
    prefixes, opcode, ModRM, SIB, displacement and immediate in turn and nothing after; an
    s390x length is the first opcode byte's top two bits), and the filter's verdict reads
    the bytes, mnemonic and operand text, where an address shows only as a branch's target,
    and a branch is kept at any address (recursive descent keeps every TARGET)."""
    from emutrace.discover.sweep import SweepRule
    from emutrace.isa.base import Insn
    from emutrace.native.disasmlib import _sweep

    found = _sweep()
    assert found is not None
    isa_obj = by_name(isa)
    cls = isa_obj.classifiers
    assert cls is not None and cls.sweep is not None and cls.sweep.lengths
    rule = SweepRule(cls.sweep, isa_obj.identity.endian, isa_obj.code_mask)
    cs = binding_engine(isa_obj.engines.cs_arch, isa_obj.engines.cs_mode)
    image = load_image(path)
    checked = _encodings_checked(isa)
    plain = covered = 0
    for seg in image.segments:
        if not seg.flags & PF_X:
            continue
        data = bytes(seg.data)
        lengths = found[0].lengths(data, rule, Insn)
        for off in range(0, len(data), cls.insn_align):
            length = lengths[off]
            if not length or data[off:off + length] in checked:
                continue
            at = seg.vaddr + off
            got = next(cs.disasm_lite(data[off:off + 15], at, 1), None)
            assert got is not None and got[1] == length, (hex(at), data[off:off + 15].hex(),
                                                          length, got)
            insn = Insn(at, got[1], got[2], got[3], data[off:off + got[1]], False)
            assert not rule.keeps(insn, 0, 0, True), (hex(at), got)
            checked.add(insn.raw)
        for at, size, mnemonic, op_str in _linear(cs, data, seg.vaddr, cls.insn_align):
            off = at - seg.vaddr
            if not rule.keeps(Insn(at, size, mnemonic, op_str, data[off:off + size], False),
                              0, 0, True):
                plain += 1
                covered += lengths[off] == size
    assert covered > plain * 3 // 4, (covered, plain)


def _linear(cs: Any, data: bytes, base: int, align: int) -> Iterator[tuple[int, int, str, str]]:
    """A linear sweep by the binding, past undecodable bytes by the alignment."""
    off = 0
    while off < len(data):
        got = list(cs.disasm_lite(data[off:off + 4096], base + off))
        if not got:
            off += align
            continue
        yield from got
        off = got[-1][0] + got[-1][1] - base
