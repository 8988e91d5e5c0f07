"""Shadow-stack policy 6 (emutrace/trace/shadow.py): exception frames.  Synthetic event
streams of a kernel whose handlers run on an interrupt stack *above* the interrupted frames
(a banked SP): without the barrier, rule 3 would take every call there for a longjmp out of
the interrupted frames."""

from __future__ import annotations

from emutrace.trace.canonical import canonical_text
from emutrace.trace.events import Call, Event, Return, TailCall, Trap, TrapReturn
from emutrace.trace.shadow import ShadowStack

NAMES = {0x100: "main", 0x200: "work", 0x300: "vector", 0x400: "handler", 0x500: "irq",
         0x600: "leaf"}
TASK_SP, IRQ_SP = 0x8000, 0xF000  # the interrupt stack lies above (shallower than) the task's


def canonical(events: list[Event]) -> tuple[str, ShadowStack]:
    stack = ShadowStack()
    records = [r for ev in events for r in stack.feed(ev)]
    records += stack.close_all(999)
    return canonical_text(records, lambda a: NAMES.get(a, hex(a))), stack


def test_exception_frame_nests_and_returns() -> None:
    """The handler's calls nest under the exception frame, on whatever stack; the exception
    return closes it (not unwound) and the interrupted frame goes on."""
    text, stack = canonical([
        Call(1, 0x10, 0x100, TASK_SP, 0x14),
        Call(2, 0x110, 0x200, TASK_SP - 0x40, 0x114),
        Trap(3, 0x300, IRQ_SP),
        Call(4, 0x310, 0x400, IRQ_SP, 0x314),  # shallower than `work`: no unwinding
        Return(5, 0x410, IRQ_SP - 8, None, 0x314),
        TrapReturn(6, 0x320),
        Return(7, 0x210, TASK_SP - 0x48, None, 0x114),
        Return(8, 0x120, TASK_SP - 8, None, 0x14),
    ])
    assert text == ("> main\n  > work\n    > vector\n      > handler\n      < handler\n"
                    "    < vector\n  < work\n< main\n")
    assert stack.unwound == 0 and stack.unmatched_returns == 0


def test_nested_interrupts_and_unfinished_handler_frames() -> None:
    """An interrupt inside a handler pushes a second exception frame; each exception return
    closes the innermost one, first closing (unwound) the frames its handler left open."""
    text, stack = canonical([
        Call(1, 0x10, 0x100, TASK_SP, 0x14),
        Trap(2, 0x300, IRQ_SP),
        Call(3, 0x310, 0x400, IRQ_SP, 0x314),
        Trap(4, 0x500, IRQ_SP - 0x100),  # a nested interrupt, in `handler`
        Call(5, 0x510, 0x600, IRQ_SP - 0x100, 0x514),
        TrapReturn(6, 0x520),  # `leaf` never returned (a handler that switched away)
        Return(7, 0x410, IRQ_SP - 8, None, 0x314),
        TrapReturn(8, 0x320),
    ])
    assert text == ("> main\n  > vector\n    > handler\n      > irq\n        > leaf\n"
                    "        <~ leaf\n      < irq\n    < handler\n  < vector\n<! main\n")
    assert stack.unwound == 2  # leaf, and main at the end


def test_exception_frame_is_a_barrier() -> None:
    """A return inside the handler that matches only a frame below the exception frame is
    unmatched (it does not close the interrupted frames); a tail frame above the exception
    frame closes alone; an exception return with no exception frame is unmatched."""
    text, stack = canonical([
        TrapReturn(0, 0x20),  # tracing began inside a handler
        Call(1, 0x10, 0x100, TASK_SP, 0x14),
        Trap(2, 0x300, IRQ_SP),
        Return(3, 0x330, IRQ_SP, None, 0x14),  # a `ret` in the vector code itself
        TailCall(4, 0x340, 0x400, IRQ_SP),  # the vector jumps to its handler
        Call(5, 0x410, 0x600, IRQ_SP - 0x20, 0x414),
        Return(6, 0x610, IRQ_SP - 0x28, None, 0x414),
        Return(7, 0x420, IRQ_SP - 8, None, None),  # the tail frame's return: alone
        TrapReturn(8, 0x350),
        Return(9, 0x120, TASK_SP - 8, None, 0x14),
    ])
    assert text == ("> main\n  > vector\n    > handler\n      > leaf\n      < leaf\n"
                    "    < handler\n  < vector\n< main\n")
    assert stack.unmatched_returns == 2
