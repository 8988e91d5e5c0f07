"""The shadow stack: turns raw events (`Call`, `TailCall`, `Return`) into properly nested
`Entry`/`Exit` records, reconciling everything that is not a plain call/return.

A frame holds the function's address, the return address of its call, the stack pointer at
the call (before the call instruction ran) and the entry time.  Everything is iterative: a
10 000-deep recursion is 10 000 list entries, never Python recursion.

Policy (what is not a plain call/return)
========================================

Stack direction.  "Deeper" means lower addresses when the stack grows down (all ten ISAs we
run), higher when `grows_down=False`.  Below, "deeper than" is in that sense.

1. Tail call (a backend reports `TailCall`: a jump from the current function to the start of
   another one).  The tail-called function is shown *nested one level below* the function
   that jumped, and its return closes both: one `Return` emits the callee's `Exit` and then
   the caller's `Exit`, same time, same return value, neither marked unwound.  Chains
   (`a` jumps to `b` jumps to `c`) nest and close together.  Why nesting rather than
   replacing the frame at the same depth: the `-finstrument-functions` oracle (testbins
   `calls.instr`) can only show sibling calls as nested calls, and the canonical trace of a
   run with real tail jumps must equal the oracle's; nesting keeps every `Entry`'s caller
   visible (`tail_dispatch` → `op_mul`), which is also what a source reader expects.  The
   tail frame inherits the caller's return address and stack pointer (the caller's frame is
   gone; the callee returns where the caller would have).

2. Recursion.  Nothing special; frames are a Python list, so depth is unbounded.

3. Non-local exit (longjmp, C++ unwinding, signal frames that do not return).  Before an
   event is applied, every open frame the event's stack pointer shows to be finished is
   closed with an `Exit(unwound=True, retval=None)` at the event's time, innermost first:
     * `Call` at sp S: frames whose recorded sp is deeper than *or equal to* S are finished
       (code running inside a frame calls with a strictly deeper sp, since every ISA either
       pushes the return address or must allocate a frame to save its link register first);
       except a call marked `before_frame` (through an alternate link register, which
       leaves the usual one intact: RISC-V `jal t0, __riscv_save_N` in a prologue), where
       only strictly deeper frames are finished; and the innermost frame is never finished
       by a call at its own sp while it has had no callee yet: that is the function itself
       calling before it allocates its frame (ppc `mflr r0; bl _savegpr0_N; stdu r1,…`,
       GCC's out-of-line register saves), never a finished frame (a frame left by longjmp
       has made at least that call) — unless the call returns where that frame's call
       returns (its caller calling again: the frame is gone);
     * `Return`/`TailCall` at sp S: frames whose recorded sp is strictly deeper than S are
       finished (a function's own return runs at an sp no shallower than its call's sp).
   Then a `Return` whose `target` (where it returns to) is known and differs from the top
   frame's return address is matched against deeper frames, innermost first: the frames
   above the matching one are closed as unwound, the matching one returns normally.  A
   `Return` matching no open frame (a return from a function whose call was not reported,
   e.g. tracing started inside it) is ignored and counted in `unmatched_returns`; with an
   empty shadow stack every `Return` is unmatched.  Without a `target`, a `Return` closes
   the top frame (after the sp rule).

4. Calls from untraced code back into traced code (libc's `qsort` calling a comparator).
   When every function is traced, nothing is special.  When a backend reports only some
   functions, only reported calls make frames: the comparator is one level below the
   nearest reported caller, its `Exit` comes at its own return, and depth stays consistent
   because an unreported function never pushes or pops.  Backends must not report a
   `Return` for a function whose `Call` they did not report (with a `target` such returns
   are recognised and ignored, see 3).

5. Program exit with frames open (`exit()` deep in the call tree, a fatal signal).
   `close_all(time)` closes every open frame innermost first with
   `Exit(unwound=True, at_exit=True, retval=None)`.

6. Exceptions (kernel images: `Trap` / `TrapReturn`).  An exception entering the guest's
   vector pushes an *exception frame* for the vector, like a signal frame: its `Entry` is
   nested under the interrupted frame, the handler's calls nest under it, and an exception
   return (`eret`, `mret`, `sret`, `iret`) closes the frames above the innermost exception
   frame as unwound and then the exception frame itself (not unwound).  Exceptions nest
   (an interrupt in a handler pushes another exception frame).  An exception frame is a
   barrier: the handler may run on another stack (banked SP, an interrupt stack), so the
   sp rule (3) never closes it or the frames below it, a `Return` never matches a frame
   below it (one that would is unmatched), and a tail frame above it closes alone.  An
   exception frame that never returns (a context switch) stays open until `close_all`.

7. Signal handlers (Linux programs: `Trap` with a `handler_stack`).  Delivery pushes a
   *signal frame* for the handler, nested under the interrupted frame, and the handler's
   return reaching `rt_sigreturn` (`TrapReturn`) closes it, as policy 6 — with one
   difference: a handler may leave by a non-local jump (`siglongjmp` out of a SIGSEGV
   handler), and then no `TrapReturn` ever comes.  So a signal frame is a barrier (as an
   exception frame) only while events happen on the handler's stack: the addresses below
   the interrupted stack pointer, or the sigaltstack the handler runs on.  The first event
   whose sp lies outside that range (the stack pointer came back above the signal frame,
   as after `siglongjmp`) closes the frames above the signal frame and the signal frame
   itself as unwound, at that event's time; then rule 3 goes on below it.  The range, not
   the sp rule's ordering, decides, because a sigaltstack may lie anywhere in memory.

8. Context switches (`swapcontext`/`setcontext`, coroutines: a stack of their own in one
   thread).  With `stack_switch` set (Linux programs: STACK_SWITCH), the shadow stack keeps
   one *segment* per stack the thread has run on: an event whose sp lies more than
   `stack_switch` bytes from the running segment's (from its top frame's sp, or the sp it
   began at while empty) switched stacks — Valgrind's rule (`--max-stackframe`, 2,000,000
   bytes by default: a larger sp change is a stack switch).  Unless a signal or exception
   frame is open (policies 6 and 7 own the handler's stack):
     * to a stack a suspended segment ran on (within `stack_switch` of its top frame's sp):
       the running segment is suspended — its frames, innermost first, are closed as
       unwound (they did not return) and kept —, and that segment's frames are entered
       again above the frame below the running segment (`Entry.entered` "resumed"),
       so that its calls nest under their own callers and its returns close their frames;
     * to the stack of the segment below the running one: the running segment is
       suspended, and the one below runs on;
     * to any other stack: a new segment begins, nested above the running frame (the
       frame that switched: `swapcontext`'s); its first frame is its own (a function
       entered by `makecontext`'s jump, not the switching frame's tail call).
   A frame entered by a jump onto an empty segment (no call, no return address: the
   context's function) returns wherever it returns (a return no frame above it matches is
   its own), also by a jump to a function's entry at its entry's sp (`makecontext` makes
   it return to `__start_context`'s entry).  A suspended
   segment that never runs again stays suspended (its exits were written).

Limits: one shadow stack per thread of control (the session keeps one per guest thread);
without `stack_switch` (kernel images, where the exception frames own the stacks) a switch
to another stack looks like an unwind by rule 3.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from emutrace.trace.events import (
    Call,
    Entry,
    Event,
    Exit,
    Record,
    Return,
    TailCall,
    Trap,
    TrapReturn,
)
from emutrace.trace.values import Value

# policy 8: an sp change larger than this is a switch to another stack (Valgrind's
# --max-stackframe default)
STACK_SWITCH = 2_000_000
ENTRY_MARGIN = 16  # (ShadowStack._entry_margin)


@dataclass(slots=True)
class Frame:
    func: int
    return_addr: int | None  # None: unknown (a tail call with no traced caller)
    sp: int
    entry_time: int
    tail: bool = False  # entered by a tail call: closes together with the frame below
    called: bool = False  # a frame was pushed above it (it has made a call)
    exception: bool = False  # an exception frame (policy 6): a barrier to rules 1 and 3
    # a signal frame (policy 7): the handler's stack, [lo, hi); None for other frames
    handler_stack: tuple[int, int] | None = None


class ShadowStack:
    def __init__(self, grows_down: bool = True, tid: int = 0,
                 stack_switch: int | None = None) -> None:
        self.grows_down = grows_down
        self.tid = tid  # the thread whose calls these are (written into every record)
        self.frames: list[Frame] = []
        self.unmatched_returns = 0
        self.unwound = 0
        self.exceptions: list[int] = []  # the indices of the open exception frames
        # policy 8: the running segments, each (index of its first frame, the sp it began
        # at), outermost first (empty: one segment, not yet begun), and the suspended ones
        self.stack_switch = stack_switch
        self.segments: list[tuple[int, int]] = []
        self.suspended: list[list[Frame]] = []

    @property
    def depth(self) -> int:
        return len(self.frames)

    def process(self, events: Iterable[Event]) -> Iterator[Record]:
        """All records of a stream of events (without `close_all`)."""
        for ev in events:
            yield from self.feed(ev)

    def feed(self, ev: Event) -> list[Record]:
        out: list[Record] = []
        if self.stack_switch is not None and isinstance(ev, (Call, TailCall, Return)) \
                and not self.exceptions:
            self._switch_stacks(ev.sp, ev.time, out, by_return=isinstance(ev, Return))
        if isinstance(ev, Call):
            self._unwind_by_sp(ev.sp, ev.time, inclusive=not ev.before_frame, out=out,
                               return_addr=ev.return_addr)
            self._push(Frame(ev.target, ev.return_addr, ev.sp, ev.time), ev.args, out)
        elif isinstance(ev, TailCall):
            self._context_left(ev.sp, ev.time, out)
            self._unwind_by_sp(ev.sp, ev.time, inclusive=False, out=out)
            if self.frames and len(self.frames) > self._base():
                top = self.frames[-1]
                frame = Frame(ev.target, top.return_addr, top.sp, ev.time, tail=True)
            elif self.segments and len(self.segments) > 1:
                # a context's function (policy 8), entered by a jump: its sp as a call's,
                # above the entry's (by more than a return address slot), so that neither
                # its own calls at its entry sp nor its return finish it by rule 3
                frame = Frame(ev.target, None, ev.sp + self._entry_margin(), ev.time)
            else:
                frame = Frame(ev.target, None, ev.sp, ev.time)
            self._push(frame, ev.args, out)
        elif isinstance(ev, Return):
            self._return(ev, out)
        elif isinstance(ev, Trap):
            self._push(Frame(ev.vector, None, ev.sp, ev.time, exception=True,
                             handler_stack=ev.handler_stack), ev.args, out)
        elif isinstance(ev, TrapReturn):
            self._trap_return(ev, out)
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"not an event: {ev!r}")
        return out

    def close_all(self, time: int) -> list[Record]:
        """Close every open frame, innermost first, as still open at program exit."""
        out: list[Record] = []
        while self.frames:
            self._pop(time, None, out, unwound=True, at_exit=True)
        return out

    # -- internals ------------------------------------------------------------------------

    def _base(self) -> int:
        """The index of the running segment's first frame (policy 8)."""
        return self.segments[-1][0] if self.segments else 0

    def _context_entry(self) -> bool:
        """Is the top frame a context's function, entered by a jump as the first frame of
        a segment of its own (policy 8: it returns wherever it returns)?"""
        return len(self.segments) > 1 and self.frames[-1].return_addr is None \
            and len(self.frames) - 1 == self.segments[-1][0]

    def _context_left(self, sp: int, time: int, out: list[Record]) -> None:
        """Policy 8: a jump from a context's function, at the sp it was entered with (within
        a return address slot: ISAs report a return's sp before or after it pops), to a
        function's entry is its return (`makecontext` makes the function return to the
        entry of `__start_context`)."""
        if self.frames and self._context_entry() and not self._deeper(
                sp + 2 * self._entry_margin(), self.frames[-1].sp, inclusive=False):
            self._pop(time, None, out, unwound=False)

    def _entry_margin(self) -> int:
        """How far above its entry sp a context's function's frame records its sp: 16
        bytes, more than the return address slot a return pops on any ISA (x86's)."""
        return ENTRY_MARGIN if self.grows_down else -ENTRY_MARGIN

    def _near(self, sp: int, ref: int) -> bool:
        assert self.stack_switch is not None
        return abs(sp - ref) <= self.stack_switch

    def _switch_stacks(self, sp: int, time: int, out: list[Record], by_return: bool) -> None:
        """Policy 8: the running segment follows the stack sp lies on.  Back on a stack it
        left, the frame that switched (`swapcontext`, the top one) returns: by the event,
        when it is a return; already, when the event is a call or jump (a context restored
        by a jump, MIPS's, reports no return)."""
        if not self.segments:
            if not self.frames:
                return  # (the first segment begins with its first frame)
            self.segments.append((0, self.frames[0].sp))
        for k in range(len(self.segments) - 1, -1, -1):  # the running ones, innermost first
            base, began = self.segments[k]
            end = self.segments[k + 1][0] if k + 1 < len(self.segments) else len(self.frames)
            if self._near(sp, self.frames[end - 1].sp if end > base else began):
                if len(self.segments) > k + 1:
                    left = len(self.frames) > self.segments[k + 1][0]
                    while len(self.segments) > k + 1:  # those above it are suspended
                        self._suspend(time, out)
                    if left:  # (a stack left with no frame open was a deep stack frame's)
                        self._switcher_returned(by_return, time, out)
                return
        for i in range(len(self.suspended) - 1, -1, -1):
            frames = self.suspended[i]
            if self._near(sp, frames[-1].sp):  # resumed above the running frame
                del self.suspended[i]
                self.segments.append((len(self.frames), frames[0].sp))
                for frame in frames:
                    self._push(Frame(frame.func, frame.return_addr, frame.sp, time,
                                     frame.tail, frame.called), (), out, entered="resumed")
                self._switcher_returned(by_return, time, out)
                return
        self.segments.append((len(self.frames), sp))  # a new stack, nested as well

    def _switcher_returned(self, by_return: bool, time: int, out: list[Record]) -> None:
        """The running segment's top frame (with the tail chain that closes with it) has
        returned, unless the event is its return."""
        if by_return or len(self.frames) <= self._base():
            return
        frame = self._pop(time, None, out, unwound=False)
        while frame.tail and len(self.frames) > self._base():
            frame = self._pop(time, None, out, unwound=False)

    def _suspend(self, time: int, out: list[Record]) -> None:
        """The innermost running segment's frames closed (innermost first, unwound) and
        kept."""
        base, _began = self.segments.pop()
        frames = self.frames[base:]
        while len(self.frames) > base:
            self._pop(time, None, out, unwound=True)
        if frames:
            self.suspended.append(frames)

    def _push(self, frame: Frame, args: tuple[Value | int, ...], out: list[Record],
              entered: str = "") -> None:
        if self.frames:
            self.frames[-1].called = True
        entered = entered or "call" if not frame.exception else \
            "trap" if frame.handler_stack is None else "signal"
        out.append(Entry(frame.entry_time, len(self.frames), frame.func, args, self.tid,
                         entered))
        if frame.exception:
            self.exceptions.append(len(self.frames))
        self.frames.append(frame)

    def _pop(self, time: int, retval: Value | int | None, out: list[Record], *, unwound: bool,
             at_exit: bool = False) -> Frame:
        frame = self.frames.pop()
        if frame.exception:
            self.exceptions.pop()
        if unwound:
            self.unwound += 1
        out.append(Exit(time, len(self.frames), frame.func, retval, time - frame.entry_time,
                        unwound, at_exit, self.tid))
        return frame

    def _deeper(self, a: int, b: int, inclusive: bool) -> bool:
        """Is stack address a deeper than b (or equal, when inclusive)?"""
        if a == b:
            return inclusive
        return a < b if self.grows_down else a > b

    def _unwind_by_sp(self, sp: int, time: int, *, inclusive: bool, out: list[Record],
                      return_addr: int | None = None) -> None:
        self._leave_signal_frames(sp, time, out)
        top = self.frames[-1] if self.frames else None
        if inclusive and top is not None and top.sp == sp and not top.called \
                and return_addr is not None and return_addr != top.return_addr:
            return  # the function calls before allocating its frame (see the policy, 3)
        while self.frames and not self.frames[-1].exception \
                and self._deeper(self.frames[-1].sp, sp, inclusive):
            self._pop(time, None, out, unwound=True)

    def _leave_signal_frames(self, sp: int, time: int, out: list[Record]) -> None:
        """Policy 7: close every innermost signal frame whose handler's stack sp lies
        outside of (with the frames above it), as unwound."""
        while self.exceptions:
            i = self.exceptions[-1]
            stack = self.frames[i].handler_stack
            if stack is None or stack[0] <= sp < stack[1]:
                return
            while len(self.frames) > i:
                self._pop(time, None, out, unwound=True)

    def _returning_frame(self, target: int) -> int | None:
        """The index of the innermost frame below the top that returns to target, above
        any exception frame (policy 6); None if there is none."""
        base = self._base() if len(self.segments) > 1 else -1
        for i in range(len(self.frames) - 2, -1, -1):
            if self.frames[i].exception:
                return None
            if self.frames[i].return_addr == target \
                    or (i == base and self.frames[i].return_addr is None):
                return i  # (or a context's function: policy 8, it returns anywhere)
        return None

    def _trap_return(self, ev: TrapReturn, out: list[Record]) -> None:
        for i in range(len(self.frames) - 1, -1, -1):
            if self.frames[i].exception:
                break
        else:
            self.unmatched_returns += 1  # no exception frame open (tracing began in one)
            return
        while len(self.frames) > i + 1:
            self._pop(ev.time, None, out, unwound=True)
        self._pop(ev.time, None, out, unwound=False)

    def _return(self, ev: Return, out: list[Record]) -> None:
        self._unwind_by_sp(ev.sp, ev.time, inclusive=False, out=out)
        if not self.frames or self.frames[-1].exception:
            self.unmatched_returns += 1
            return
        if ev.target is not None and self.frames[-1].return_addr != ev.target \
                and not self._context_entry():
            i = self._returning_frame(ev.target)
            if i is None:
                self.unmatched_returns += 1
                return
            while len(self.frames) > i + 1:
                self._pop(ev.time, None, out, unwound=True)
        frame = self._pop(ev.time, ev.retval, out, unwound=False)
        while frame.tail and self.frames and not self.frames[-1].exception:
            frame = self._pop(ev.time, ev.retval, out, unwound=False)
