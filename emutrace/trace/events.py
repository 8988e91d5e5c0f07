"""The event model: what a backend reports (raw events) and what the shadow stack makes of
them (records).

Raw events (backend → `trace.shadow.ShadowStack`):

* `Call` — a call instruction is about to execute at `site_addr`, going to `target`.
* `TailCall` — a jump that leaves the current function for the start of another one (a
  sibling call): the current function's frame is reused by `target`.
* `Return` — a return instruction is about to execute at `site_addr`.
* `Trap` — an exception (a system call such as `svc`/`ecall`, an undefined instruction, an
  interrupt) entered the guest's own vector at `vector` (kernel images, `--machine`); or a
  signal handler was entered at `vector` (Linux programs: `handler_stack` says where the
  handler's stack lies, shadow-stack policy 7).
* `TrapReturn` — an exception return (`eret`, `mret`, `sret`, `iret`) is about to execute
  at `site_addr`: it ends the innermost `Trap`'s frame (for a signal handler: the
  `rt_sigreturn` its return reaches, at the signal trampoline).

Conventions every backend keeps (the shadow stack's non-local-exit rules rely on them):

* `time` is the number of guest instructions executed before the event's instruction: a
  deterministic timestamp, the same on every host and every rerun.
* `sp` is the stack pointer *before* the event's instruction executes (on x86 before `call`
  pushes and before `ret` pops the return address; on MIPS before a delay slot that pops).
* `return_addr` of a `Call` is where the callee will return to (the instruction after the
  call, or after its delay slot).  `target` of a `Return`, when the backend knows it (the
  link register or the word at sp), is where that return goes; `None` when unknown.
* `args` are the call's arguments as `trace.values.Value`s, captured by the backend at the
  event (`backends/args.py`): typed by the callee's prototype (DWARF, else the bundled libc
  table) where there is one, else the first N integer argument words (`auto`; N = 4 or
  `-A FUNC@argN`).  `retval` is the result as a `Value` (`None`: not read, or the function
  returns void).  Tests and older producers may still put plain `int` words here;
  `values.as_value` reads both.

Records (shadow stack → formatters): `Entry` and `Exit`, properly nested — every `Entry` has
exactly one later `Exit` at the same depth, and depth 0 is the outermost traced frame.
A program with threads has one shadow stack per thread: its records carry the thread's
number (`tid`: 0 the main thread, n the n-th thread created, whose Linux tid is the pid
+ n: machine/linux/threads.py), the same in every rerun; nesting holds within each
thread's records.
"""

from __future__ import annotations

from dataclasses import dataclass

from emutrace.trace.values import Value


@dataclass(frozen=True, slots=True)
class Call:
    time: int
    site_addr: int
    target: int
    sp: int
    return_addr: int
    args: tuple[Value | int, ...] = ()
    # made through an alternate link register before the caller set up its frame (RISC-V
    # `jal t0, __riscv_save_N` as the first instruction): its sp may equal the caller's
    before_frame: bool = False


@dataclass(frozen=True, slots=True)
class TailCall:
    time: int
    site_addr: int
    target: int
    sp: int
    args: tuple[Value | int, ...] = ()


@dataclass(frozen=True, slots=True)
class Return:
    time: int
    site_addr: int
    sp: int
    retval: Value | int | None = None
    target: int | None = None


@dataclass(frozen=True, slots=True)
class Trap:
    time: int
    vector: int
    sp: int  # the handler's stack pointer at the vector
    # a signal handler's frame: the stack addresses [lo, hi) its run uses (below the
    # interrupted stack pointer, or the sigaltstack); an event whose sp lies outside them
    # was made after the handler was left by a non-local jump (shadow-stack policy 7)
    handler_stack: tuple[int, int] | None = None
    # a signal handler's arguments, read at its entry as a call's are (the signal number,
    # and siginfo and ucontext pointers for an SA_SIGINFO handler), as far as its prototype
    # says; an exception vector has none
    args: tuple[Value | int, ...] = ()


@dataclass(frozen=True, slots=True)
class SignalDelivery:
    """What the Linux layer tells a backend when it enters a signal handler: where the
    interrupted code resumes (the saved PC) and the handler's stack (`Trap.handler_stack`)."""

    resume: int
    stack: tuple[int, int]


@dataclass(frozen=True, slots=True)
class TrapReturn:
    time: int
    site_addr: int


Event = Call | TailCall | Return | Trap | TrapReturn


@dataclass(frozen=True, slots=True)
class Entry:
    time: int
    depth: int
    func: int
    args: tuple[Value | int, ...] = ()
    tid: int = 0  # the guest thread's number: 0 the main thread, n the n-th one created
    # how the frame was entered: "call" (or a tail call), "signal" (a signal handler the
    # kernel ran, shadow-stack policy 7), "trap" (an exception vector, policy 6); a viewer's
    # "before" (replay -r: entered before the range shown, its line not shown, its exit is)
    entered: str = "call"


@dataclass(frozen=True, slots=True)
class Exit:
    """The end of a frame.  `unwound`: the frame did not return by its own return
    instruction (skipped by longjmp/unwinding, or still open at program exit); then `retval`
    is None.  `at_exit`: closed by `ShadowStack.close_all` (the program ended with it open);
    `at_exit` implies `unwound`."""

    time: int
    depth: int
    func: int
    retval: Value | int | None
    duration: int
    unwound: bool = False
    at_exit: bool = False
    tid: int = 0  # the guest thread, as Entry.tid


Record = Entry | Exit


# A record as the text formatter reads it (trace/format.py), a plain tuple: an entry
# (False, func, args, entered), an exit (True, func, retval, duration, unwound, at_exit).
# The spill file (trace/spill.py) reads C's records straight into rows, their values as the
# text they render to: building an `Entry`, `Exit` or `Value` costs more than formatting.
Row = tuple


def row_of(rec: Record) -> Row:
    if isinstance(rec, Entry):
        return (False, rec.func, rec.args, rec.entered)
    return (True, rec.func, rec.retval, rec.duration, rec.unwound, rec.at_exit)
