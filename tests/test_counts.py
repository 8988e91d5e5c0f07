"""Exact mechanism counts on a program whose call graph is known: `testbins/x86_64/counts`
(source `testbins/src/counts_x86_64.S`).  Every expected number below is derived by hand
from that listing; nothing was copied from a run.

The program::

    _start: call main | mov | mov | syscall(exit)           sites: call main
    main:   push | call leaf | call mid | pop | xor | ret   sites: call leaf, call mid, ret
    mid:    push | call leaf | pop | ret                    sites: call leaf, ret
    leaf:   ret                                             sites: ret

Run order (16 instructions): call main; push, call leaf; ret(leaf); call mid; push,
call leaf; ret(leaf); pop, ret(mid); pop, xor, ret(main); mov, mov, syscall.
Transfers: 4 calls (main, leaf, mid, leaf) and 4 returns (leaf, leaf, mid, main) = 8, all
taken, no other branch.
"""

from __future__ import annotations

import pytest

from emutrace.session import Process, RunConfig, RunResult
from emutrace.trace.events import Entry

from .conftest import TESTBINS

PROGRAM = str(TESTBINS / "x86_64" / "counts")


def run(backend: str, **options: object) -> RunResult:
    result = Process(RunConfig(PROGRAM, [], backend=backend, **options),  # type: ignore[arg-type]
                     warn=lambda m: None).run()
    assert result.exit_code == 0
    # every mechanism sees the same 4 calls: main, leaf, mid, leaf
    assert sum(isinstance(r, Entry) for r in result.records) == 4
    return result


def test_step_counts_every_instruction() -> None:
    r = run("step")
    assert r.backend_stats == {"steps": 16, "calls": 4, "returns": 4, "tail_calls": 0}
    assert r.guest_insns == 16


def test_int3_lazy() -> None:
    """Traps: the 8 transfers, each a breakpoint (all simulated: call/ret).
    Patches: each function's sites are written once, when it is first entered:
    _start 1 (at start) + main 3 + leaf 1 + mid 2 = 7; lazy never removes one."""
    s = run("int3").backend_stats
    assert (s["traps"], s["simulated"], s["fallbacks"]) == (8, 8, 0)
    assert (s["patches"], s["cache_removals"], s["functions"]) == (7, 7, 4)


def test_int3_strict() -> None:
    """Strict: at each event the function left is disarmed and the one entered armed
    (sites: _start 1, main 3, mid 2, leaf 1):
      start: arm _start                              1
      call main:  disarm _start 1 + arm main 3        4
      call leaf:  disarm main 3 + arm leaf 1          4
      ret leaf:   disarm leaf 1 + arm main 3          4
      call mid:   disarm main 3 + arm mid 2           5
      call leaf:  disarm mid 2 + arm leaf 1           3
      ret leaf:   disarm leaf 1 + arm mid 2           3
      ret mid:    disarm mid 2 + arm main 3           5
      ret main:   disarm main 3 + arm _start 1        4
    total 33 writes, each followed by one cache removal."""
    s = run("int3", cleanup="strict").backend_stats
    assert (s["traps"], s["patches"], s["cache_removals"]) == (8, 33, 33)


def test_hwbp_four_slots() -> None:
    """x86: 4 slots, every function fits (at most 3 sites).  Only the current function is
    armed, one slot write per site at each arming: _start 1, main 3, leaf 1, main 3, mid 2,
    leaf 1, mid 2, main 3, _start 1 = 17.  Hits: the 8 transfers."""
    s = run("hwbp").backend_stats
    assert s == {"hits": 8, "slot_writes": 17, "fallbacks": 0, "stepped": 0,
                 "max_slots": 3, "functions": 4}


def test_hwbp_one_slot_falls_back_to_stepping() -> None:
    """One slot: _start and leaf (1 site) get it; main (3 sites) and mid (2) are stepped
    across the span of their sites, one range each time they are armed.
    Armings: _start, main, leaf, main, mid, leaf, mid, main, _start = 9 slot writes;
    fall-backs: main 3 times + mid 2 times = 5.
    Stepped (non-site instructions run inside an armed span): main's span is
    call leaf .. ret, so push (before it) is never trapped; pop and xor run once while main
    is armed = 2.  mid's span call leaf .. ret holds pop, run once = 1.  Total 3."""
    s = run("hwbp", hw_slots=1).backend_stats
    assert s == {"hits": 8, "slot_writes": 9, "fallbacks": 5, "stepped": 3,
                 "max_slots": 1, "functions": 4}


@pytest.mark.parametrize(("buffer", "interrupts", "drained"), [
    (4096, 0, 8),  # 8 records never fill the default buffer: all drained at the end
    (3, 2, 2),  # full after records 3 and 6 (2 interrupts), 2 left for the end
    (1, 8, 0),  # every record fills it
    (8, 1, 0),  # exactly full once, at the last branch
])
def test_bts_records_and_interrupts(buffer: int, interrupts: int, drained: int) -> None:
    """Records: the 8 taken branches (4 calls, 4 returns), nothing else branches."""
    s = run("bts", bts_buffer=buffer).backend_stats
    assert (s["records"], s["interrupts"], s["drained"]) == (8, interrupts, drained)
    assert (s["calls"], s["returns"], s["tail_calls"]) == (4, 4, 0)


def test_btf_traps_on_every_taken_branch() -> None:
    s = run("btf").backend_stats
    assert s == {"traps": 8, "calls": 4, "returns": 4, "tail_calls": 0}


def test_entry_probes() -> None:
    """Probes written at start-up: an entry probe per function and one per return, where
    leaf's entry *is* its return (one probe): _start 1 + main 2 + mid 2 + leaf 1 = 6.
    Traps: _start's entry (the process starts there: a trap, but no call) 1, main entry 1,
    leaf 2 (entry = return), mid entry 1, mid ret 1, main ret 1 = 7.
    Step-overs: the probes over `push` (main, mid entries) re-run it in place = 2; the other
    5 hits are a call or a return, simulated.  Instructions stay 16: a step-over does not
    count the displaced instruction twice."""
    r = run("entry")
    assert r.backend_stats == {"probes": 6, "patches": 6, "traps": 7, "stepovers": 2,
                               "simulated": 5, "functions": 4}
    assert r.guest_insns == 16
