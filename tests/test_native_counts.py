"""Block counts on the native hot path (hotpath.c `block_count_of`): the instruction count
of a block seen for the first time comes from its size where every instruction has the
ISA's one size (aarch64, MIPS, POWER), from discovery's size maps where they know every
instruction of the block (the other ISAs, hotpath.c `count_from_map`), else from Python.
Every count the run kept equals the reference, `Decoder.insn_starts` (capstone's decode of
the block's bytes, one instruction at a time, in Python); the ones C read from the maps go
into the decoder's table for the store; and C did read most of them.  A later run (the
store warm, no size maps: it sweeps nothing) has the stored counts in C's tables from the
start (`nt_counts_preload`) and asks Python for none of the blocks the first run ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from emutrace.backends.int3_native import fixed_insn_size
from emutrace.discover import memo
from emutrace.isa import by_name
from emutrace.session import Process, RunConfig

from .conftest import ISAS, bin_path
from .test_native_engine import _stdout_to_devnull


@pytest.mark.parametrize("isa", ISAS)
def test_block_counts_in_c_are_the_references(isa: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """(A first run: a run whose functions come from the store sweeps nothing, so there are
    no size maps; its block counts come from the store through Python.)"""
    monkeypatch.setenv("EMUTRACE_CACHE", "off")
    memo._memo.clear()  # (a fresh decoder: its size maps and counts are this run's)
    process = Process(RunConfig(str(bin_path(isa, "fib")), ["5"], backend="int3",
                                engine="native"), warn=lambda m: None)
    with _stdout_to_devnull():
        process.run()
    backend = process.backend
    assert backend is not None
    decoder = backend.decoder
    counts = dict(decoder.block_counts)
    for (addr, size, alt), count in counts.items():
        assert count == len(decoder.insn_starts(addr, size, alt)), (hex(addr), size, alt)
    learned = backend.native_stats["c_block_counts"]  # type: ignore[attr-defined]
    if fixed_insn_size(by_name(isa)):
        assert learned == 0  # (counted from the size alone: nothing to learn)
    else:
        assert len(counts) > 500 and learned > len(counts) // 2, (learned, len(counts))
    memo._memo.clear()


def _run(isa: str) -> Process:
    process = Process(RunConfig(str(bin_path(isa, "fib")), ["5"], backend="int3",
                                engine="native"), warn=lambda m: None)
    with _stdout_to_devnull():
        process.result = process.run()  # type: ignore[attr-defined]
    return process


@pytest.mark.parametrize("isa", ["x86_64", "arm", "s390x", "riscv64"])
def test_a_later_run_has_its_block_counts_in_c(isa: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from emutrace.discover import store

    monkeypatch.setenv("EMUTRACE_CACHE", "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    memo._memo.clear()
    first = _run(isa)
    store.write_pending()  # (what the process writes at its exit)
    memo._memo.clear()  # (the next process: nothing kept in memory)
    later = _run(isa)
    for process in (first, later):
        assert process.backend is not None
    assert later.result.guest_insns == first.result.guest_insns  # type: ignore[attr-defined]
    assert later.result.backend_stats == first.result.backend_stats  # type: ignore[attr-defined]
    stats = later.backend.native_stats  # type: ignore[union-attr]
    assert stats["c_block_counts"] == 0  # (no size maps: nothing swept)
    assert stats.get("python_counts", 0) <= len(later.backend.decoder.block_counts) // 20, \
        stats  # type: ignore[union-attr]
    memo._memo.clear()
