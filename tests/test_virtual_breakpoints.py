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


def test_the_virtual_isas_are_the_patch_isas_but_arm() -> None:
    """arm keeps its breakpoints: whether its trap is simulated depends on ITSTATE then."""
    assert set(VIRTUAL) == {"x86_64", "i386", "aarch64", "ppc", "ppc64le", "s390x"}


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
