"""Virtual breakpoints (backends/hooked_sites.py `virtual`): on the native engine, under lazy
cleanup, a patch site whose trap the reference simulates is watched by C's site table
instead of having its breakpoint written.  What must hold: nothing is written into the
guest's code, the trace and every counter are the patch reference's
(tests/test_native_engine.py compares them on the whole grid), and the clock counts every
instruction once — which the s390x trap path did not (Unicorn's block count leaves the
trapping 0x0001 out; `Breakpoint.counted`)."""

from __future__ import annotations

import pytest

from emutrace.backends.hooked_sites import virtual_breakpoints
from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.session import Process, RunConfig

from .conftest import ISAS, bin_path
from .test_native_engine import _stdout_to_devnull

VIRTUAL = [isa for isa in ISAS if virtual_breakpoints(by_name(isa))]


def _run(isa: str, backend: str, engine: str) -> Process:
    process = Process(RunConfig(str(bin_path(isa, "fib")), ["6"], backend=backend,
                                engine=engine), warn=lambda m: None)
    with _stdout_to_devnull():
        process.result = process.run()  # type: ignore[attr-defined]
    return process


def test_the_virtual_isas_are_the_patch_isas() -> None:
    """(MIPS and RISC-V hook every site anyway: no usable breakpoint trap.)"""
    assert set(VIRTUAL) == {"x86_64", "i386", "aarch64", "arm", "ppc", "ppc64le", "s390x"}


def _thumb(*halfwords: int) -> bytes:
    return b"".join(h.to_bytes(2, "little") for h in halfwords)


@pytest.mark.parametrize(("before", "outside"), [
    (b"", True),                                     # the start of the code
    (_thumb(0xB500, 0x4668, 0x2000), True),          # push {lr}; mov r0, sp; movs r0, #0
    (_thumb(0xBF08), False),                         # it eq: the site is its instruction
    (_thumb(0xBF0C, 0x2001), False),                 # ite eq; movs r0, #1: the site is the else
    (_thumb(0xBF00, 0xBF30), True),                  # nop; wfi: hints (mask 0000), no IT
    # an IT 14 bytes back (then three 32-bit instructions) may still cover the site
    (_thumb(0xBF01, 0xF8D0, 0x0000, 0xF8D0, 0x0000, 0xF8D0, 0x0000), False),
    # one 16 bytes back cannot (four instructions at least lie between)
    (_thumb(0xBF01, 0xF8D0, 0x0000, 0xF8D0, 0x0000, 0xF8D0, 0x0000, 0x2000), True),
    (b"\x08" + _thumb(0x2000), True),              # an odd start: whole halfwords only
])
def test_arm_virtual_site_outside_it_blocks(before: bytes, outside: bool) -> None:
    """ITSTATE can be non-zero at a Thumb site only when an IT (1011 1111 cond mask, mask
    not 0: Arm ARM A8.8.54) is among the four instructions before it; A32 has no IT."""
    from emutrace.isa.arm import outside_it_blocks_arm
    from emutrace.isa.base import Insn

    bx_lr = Insn(0x1000, 2, "bx", "lr", _thumb(0x4770), True)
    assert outside_it_blocks_arm(bx_lr, before) is outside
    a32 = Insn(0x1000, 4, "bx", "lr", bytes.fromhex("1eff2fe1"), False)
    assert outside_it_blocks_arm(a32, _thumb(0xBF08, 0xBF08)) is True


def test_arm_sites_in_it_blocks_keep_their_breakpoints() -> None:
    """On arm the Thumb sites an IT may cover are written (their trap may fall back),
    the others are the table's; the counters stay the reference's
    (tests/test_native_engine.py)."""
    from emutrace.isa.arm import outside_it_blocks_arm
    from emutrace.isa.base import VIRTUAL_LOOKBEHIND

    process = _run("arm", "int3", "native")
    backend = process.backend
    assert backend is not None
    kinds = {True: 0, False: 0}
    for armed in backend.armed.values():
        if armed.hook and not armed.virtual:
            continue  # (a site hook: code found by descent)
        insn = backend.decoder.insn_at(armed.site.addr, armed.site.alt_mode)
        assert insn is not None
        outside = outside_it_blocks_arm(
            insn, backend.decoder.bytes_before(insn.addr, VIRTUAL_LOOKBEHIND))
        if not outside:
            assert not armed.virtual
            assert process.cpu.mem_read(insn.addr, 2) == backend.breakpoint_bytes(armed.site)
        kinds[outside] += 1
    assert kinds[True] > 100 and kinds[False] > 0, kinds


@pytest.mark.parametrize("isa", VIRTUAL)
def test_no_breakpoint_is_written_and_the_sites_are_the_tables(isa: str) -> None:
    process = _run(isa, "int3", "native")
    backend = process.backend
    assert backend is not None
    virtual = [a for a in backend.armed.values() if a.virtual]
    assert len(virtual) > 10, len(virtual)
    # the guest's code at each site is the file's instruction (decoded from the ELF's bytes)
    for armed in virtual:
        insn = backend.decoder.insn_at(armed.site.addr, armed.site.alt_mode)
        assert insn is not None
        assert process.cpu.mem_read(armed.site.addr, insn.size) == insn.raw
    stats = process.result.backend_stats  # type: ignore[attr-defined]
    assert stats["traps"] > 100 and stats["hooks_added"] < 10, stats


def _step_clock(isa: str) -> object:
    cap = by_name(isa).capability(Cap.STEP_CLOCK)
    return pytest.param(isa, marks=() if cap.works else pytest.mark.xfail(
        strict=True, reason=cap.reason))


@pytest.mark.parametrize("isa", [_step_clock(isa) for isa in ISAS])
def test_int3_clock_counts_each_instruction_once(isa: str) -> None:
    """The guest instruction count under int3 (python reference, breakpoint traps) equals
    step's, which counts every instruction in its per-instruction hook — the block counts
    int3 relies on owe nothing to it."""
    assert _run(isa, "int3", "python").result.guest_insns == \
        _run(isa, "step", "python").result.guest_insns  # type: ignore[attr-defined]
