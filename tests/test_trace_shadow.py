"""The shadow stack's policy (emutrace/trace/shadow.py docstring), on synthetic event streams
built by a small model of a downward-growing stack with x86-like call/return."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from emutrace.trace.events import Call, Entry, Event, Exit, Record, Return, TailCall
from emutrace.trace.shadow import STACK_SWITCH, ShadowStack

WORD = 8
FRAME = 0x20  # what every modelled function allocates below its return address


class Sim:
    """A downward-growing stack.  Times advance by 10 per event; every call site is unique.
    `call`/`ret`/`tail`/`longjmp` return the event a backend would report."""

    def __init__(self, sp: int = 0x80000, down: bool = True) -> None:
        self.t = 0
        self.sp = sp
        self.sign = -1 if down else 1
        self.frames: list[tuple[int, int]] = []  # (return address, sp at call)
        self.next_site = 0x1000

    def _tick(self) -> int:
        self.t += 10
        return self.t

    def _site(self) -> int:
        self.next_site += 0x10
        return self.next_site

    def call(self, func: int, *args: int, ret_addr: int | None = None) -> Call:
        site = self._site()
        ra = site + 5 if ret_addr is None else ret_addr
        ev = Call(self._tick(), site, func, self.sp, ra, args)
        self.frames.append((ra, self.sp))
        self.sp += self.sign * (WORD + FRAME)  # the pushed return address, then the frame
        return ev

    def ret(self, value: int | None = None, with_target: bool = True) -> Return:
        ra, sp0 = self.frames.pop()
        # at the ret instruction the frame is gone, the return address is still pushed
        ev = Return(self._tick(), self._site(), sp0 + self.sign * WORD, value,
                    ra if with_target else None)
        self.sp = sp0
        return ev

    def tail(self, func: int, *args: int) -> TailCall:
        ra, sp0 = self.frames[-1]
        # the caller has torn down its frame: sp points at its return address
        ev = TailCall(self._tick(), self._site(), func, sp0 + self.sign * WORD, args)
        self.sp = sp0 + self.sign * (WORD + FRAME)
        return ev

    def longjmp(self, frames: int) -> None:
        """Skip the innermost `frames` frames without return events."""
        for _ in range(frames):
            _, sp0 = self.frames.pop()
        self.sp = sp0  # back in the body of the function that made the outermost skipped call


def check_nesting(records: list[Record]) -> None:
    """Every Entry has one Exit, LIFO, at the same depth, of the same function, later."""
    open_: list[Entry] = []
    for r in records:
        if isinstance(r, Entry):
            assert r.depth == len(open_)
            open_.append(r)
        else:
            e = open_.pop()
            assert (r.depth, r.func) == (e.depth, e.func)
            assert r.duration == r.time - e.time >= 0
    assert not open_


def run(events: Sequence[Event], shadow: ShadowStack | None = None) -> list[Record]:
    shadow = shadow or ShadowStack()
    return list(shadow.process(events))


def test_plain_call_and_return() -> None:
    s = Sim()
    evs: list[Event] = [s.call(0xA, 1, 2), s.call(0xB), s.ret(7), s.ret(3)]
    recs = run(evs)
    assert recs == [
        Entry(10, 0, 0xA, (1, 2)),
        Entry(20, 1, 0xB, ()),
        Exit(30, 1, 0xB, 7, 10),
        Exit(40, 0, 0xA, 3, 30),
    ]


def test_tail_call_chain_nests_and_one_return_closes_all() -> None:
    main, start, mid, end, leaf = 1, 2, 3, 4, 5
    s = Sim()
    evs: list[Event] = [s.call(main), s.call(start, 5), s.tail(mid, 6), s.tail(end, 7),
                        s.tail(leaf, 8), s.ret(46), s.ret(0)]
    shadow = ShadowStack()
    recs = run(evs, shadow)
    check_nesting(recs)
    entries = [(r.func, r.depth) for r in recs if isinstance(r, Entry)]
    assert entries == [(main, 0), (start, 1), (mid, 2), (end, 3), (leaf, 4)]
    exits = [r for r in recs if isinstance(r, Exit)]
    assert [(x.func, x.retval, x.unwound) for x in exits] == [
        (leaf, 46, False), (end, 46, False), (mid, 46, False), (start, 46, False),
        (main, 0, False)]
    assert len({x.time for x in exits[:4]}) == 1  # the one return closes the whole chain
    assert shadow.unwound == shadow.unmatched_returns == 0


def test_tail_call_without_return_target() -> None:
    s = Sim()
    evs: list[Event] = [s.call(1), s.call(2), s.tail(3), s.ret(9, with_target=False),
                        s.call(4), s.ret(1), s.ret(0, with_target=False)]
    recs = run(evs)
    check_nesting(recs)
    assert [(r.func, r.depth) for r in recs if isinstance(r, Entry)] == [
        (1, 0), (2, 1), (3, 2), (4, 1)]
    assert not any(isinstance(r, Exit) and r.unwound for r in recs)


def test_ping_pong_tail_calls_through_a_pointer() -> None:
    s = Sim()
    evs: list[Event] = [s.call(1), s.call(10)]
    evs += [s.tail(11 if i % 2 == 0 else 10) for i in range(7)]
    evs += [s.ret(107), s.ret(0)]
    recs = run(evs)
    check_nesting(recs)
    assert max(r.depth for r in recs) == 8
    assert [r.retval for r in recs if isinstance(r, Exit)] == [107] * 8 + [0]


def test_recursion_10000_deep_is_iterative() -> None:
    n = 10_000
    s = Sim()
    evs: list[Event] = [s.call(1)]
    evs += [s.call(2, d) for d in range(n, -1, -1)]
    total = 0
    for d in range(0, n + 1):
        total += d
        evs.append(s.ret(total))
    evs.append(s.ret(0))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100)  # anything recursive per frame would fail here
    try:
        shadow = ShadowStack()
        recs = run(evs, shadow)
    finally:
        sys.setrecursionlimit(limit)
    check_nesting(recs)
    assert max(r.depth for r in recs) == n + 1
    exits = [r for r in recs if isinstance(r, Exit)]
    assert exits[-2].retval == n * (n + 1) // 2
    assert shadow.depth == 0 and shadow.unwound == 0


def longjmp_prefix(s: Sim) -> list[Event]:
    main, scen = 1, 2
    evs: list[Event] = [s.call(main), s.call(scen)]
    evs += [s.call(0x10 + level, level) for level in range(1, 6)]
    s.longjmp(5)
    return evs


def test_longjmp_out_of_five_frames_found_by_the_next_calls_sp() -> None:
    s = Sim()
    evs = longjmp_prefix(s)
    evs += [s.call(0x99), s.ret(20), s.ret(0), s.ret(0)]  # printf, then return to main
    shadow = ShadowStack()
    recs = run(evs, shadow)
    check_nesting(recs)
    call_time = evs[7].time
    unwound = [r for r in recs if isinstance(r, Exit) and r.unwound]
    assert [(r.func, r.depth, r.time) for r in unwound] == [
        (0x15, 6, call_time), (0x14, 5, call_time), (0x13, 4, call_time),
        (0x12, 3, call_time), (0x11, 2, call_time)]
    assert all(r.retval is None and not r.at_exit for r in unwound)
    assert [(r.func, r.depth) for r in recs if isinstance(r, Entry)][-1] == (0x99, 2)
    assert shadow.unwound == 5 and shadow.depth == 0


def test_longjmp_found_by_the_next_returns_sp() -> None:
    s = Sim()
    evs = longjmp_prefix(s) + [s.ret(0, with_target=False), s.ret(0)]
    recs = run(evs)
    check_nesting(recs)
    exits = [(r.func, r.unwound) for r in recs if isinstance(r, Exit)]
    assert exits == [(0x15, True), (0x14, True), (0x13, True), (0x12, True), (0x11, True),
                     (2, False), (1, False)]


def test_return_to_a_deeper_frames_return_address_unwinds_the_frames_above() -> None:
    s = Sim()
    evs = longjmp_prefix(s)
    scen_ret = s.frames[-1][0]
    # an sp below every open frame, so only the return address can tell
    evs.append(Return(1000, 0x5000, 0x10, 4, scen_ret))
    shadow = ShadowStack()
    recs = run(evs, shadow)
    exits = [(r.func, r.depth, r.unwound, r.retval) for r in recs if isinstance(r, Exit)]
    assert exits == [(0x15, 6, True, None), (0x14, 5, True, None), (0x13, 4, True, None),
                     (0x12, 3, True, None), (0x11, 2, True, None), (2, 1, False, 4)]
    assert shadow.depth == 1


def test_stack_growing_up() -> None:
    s = Sim(sp=0x1000, down=False)
    evs = longjmp_prefix(s) + [s.call(0x99), s.ret(1), s.ret(0), s.ret(0)]
    shadow = ShadowStack(grows_down=False)
    recs = run(evs, shadow)
    check_nesting(recs)
    assert shadow.unwound == 5
    # read with the wrong direction, every call would look like an unwind of its caller
    wrong = ShadowStack(grows_down=True)
    list(wrong.process(evs))
    assert wrong.unwound > 5


def test_exit_with_open_frames() -> None:
    s = Sim()
    evs = [s.call(f) for f in (1, 2, 3, 4, 5)]
    shadow = ShadowStack()
    recs = run(evs, shadow)
    tail = shadow.close_all(500)
    assert [(r.func, r.depth, r.duration) for r in tail if isinstance(r, Exit)] == [
        (5, 4, 450), (4, 3, 460), (3, 2, 470), (2, 1, 480), (1, 0, 490)]
    assert all(isinstance(r, Exit) and r.unwound and r.at_exit and r.retval is None
               for r in tail)
    check_nesting(recs + tail)
    assert shadow.close_all(600) == []


def qsort_events(trace_libc: bool) -> tuple[list[Event], Sim]:
    """main → scenario_qsort → qsort (libc) → msort (libc) → compare_ints ×3; when libc is
    not traced, its calls are simply not reported (the stack still moves)."""
    main, scen, qsort, msort, cmp = 1, 2, 0x100, 0x101, 3
    s = Sim()
    evs: list[Event] = [s.call(main), s.call(scen)]
    libc: list[Event] = [s.call(qsort), s.call(msort)]
    body: list[Event] = []
    for i in range(3):
        body += [s.call(cmp, 0x7000 + i, 0x7004 + i), s.ret(-1 & 0xFFFFFFFFFFFFFFFF)]
    libc_ret: list[Event] = [s.ret(None), s.ret(None)]
    evs += (libc if trace_libc else []) + body + (libc_ret if trace_libc else [])
    evs += [s.ret(None), s.ret(0)]
    return evs, s


def test_qsort_callback_every_function_traced() -> None:
    evs, _ = qsort_events(trace_libc=True)
    recs = run(evs)
    check_nesting(recs)
    assert [(r.func, r.depth) for r in recs if isinstance(r, Entry)] == [
        (1, 0), (2, 1), (0x100, 2), (0x101, 3), (3, 4), (3, 4), (3, 4)]


def test_qsort_callback_only_program_functions_traced() -> None:
    evs, _ = qsort_events(trace_libc=False)
    shadow = ShadowStack()
    recs = run(evs, shadow)
    check_nesting(recs)
    assert [(r.func, r.depth) for r in recs if isinstance(r, Entry)] == [
        (1, 0), (2, 1), (3, 2), (3, 2), (3, 2)]
    assert shadow.unwound == shadow.unmatched_returns == 0


def test_unmatched_returns_are_ignored_and_counted() -> None:
    shadow = ShadowStack()
    assert shadow.feed(Return(5, 0x10, 0x8000, 1, 0x20)) == []
    s = Sim()
    recs = run([s.call(1)], shadow)
    # a return (with a target) of a function whose call was never reported
    assert shadow.feed(Return(100, 0x30, s.sp - 0x100, 1, 0xDEAD)) == []
    assert shadow.unmatched_returns == 2 and shadow.depth == 1
    recs += shadow.feed(s.ret(0))
    check_nesting(recs)


def test_link_register_isa_return_at_the_calls_sp_is_a_normal_return() -> None:
    """ARM/RISC-V/…: nothing is pushed by the call, so a function returns at exactly the sp
    of its call (not unwound); a new call at an open frame's sp means that frame is gone."""
    shadow = ShadowStack()
    recs = shadow.feed(Call(0, 0x10, 1, 0x8000, 0x14))
    recs += shadow.feed(Call(1, 0x20, 2, 0x7FF0, 0x24))  # main allocated 16 bytes first
    recs += shadow.feed(Return(2, 0x30, 0x7FF0, 5, None))
    assert recs[-1] == Exit(2, 1, 2, 5, 1)
    recs += shadow.feed(Call(3, 0x40, 3, 0x7FF0, 0x44))
    recs += shadow.feed(Call(4, 0x40, 4, 0x7FF0, 0x44))  # 3 never returned (longjmp)
    assert recs[-2:] == [Exit(4, 1, 3, None, 1, unwound=True), Entry(4, 1, 4)]


def test_a_frame_deeper_than_the_switch_distance_is_no_context_switch() -> None:
    """Policy 8: a function whose locals take more than STACK_SWITCH bytes calls far below
    its own sp; the stack it calls on is its own (left with no frame open), so the records
    are those of a shadow stack that knows no context switches: nothing unwound, nothing
    returned early."""
    top = 0x7F0000000
    events: list[Event] = [
        Call(1, 0, 0x10, top, 0x1), Call(2, 0x10, 0x20, top - 16, 0x11),
        Call(3, 0x20, 0x30, top - 5_000_000, 0x21),  # f's 5 MB of locals below it
        Return(4, 0x30, top - 5_000_000, target=0x21),
        Call(5, 0x20, 0x40, top - 100, 0x22),  # its locals gone (a VLA's scope ended)
        Return(6, 0x40, top - 100, target=0x22),
        Return(7, 0x20, top - 16, target=0x11), Return(8, 0x10, top, target=0x1)]
    switching = list(ShadowStack(stack_switch=STACK_SWITCH).process(events))
    assert switching == list(ShadowStack().process(events))
    assert not any(isinstance(r, Exit) and r.unwound for r in switching)
