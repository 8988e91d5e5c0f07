"""The gdb-remote run loop: the program in the stub driven to its end, the target protocol's
hooks called at the stops it takes (the stub's counterpart of target/ptrace_run.py).

Each turn: the hooks of the instruction the program stands at (block hooks when one was
wanted, code hooks over a range, hooks on that address), then the trap of a breakpoint the
backend placed there, else the program resumed — one instruction (``vCont;s``) while a
range hook is installed, a hook wants the next block entry (`want_blocks`) or a hooked
instruction must run as itself, otherwise ``vCont;c`` — and its stop reply awaited:

* a SIGTRAP stop at a placed breakpoint stands before its instruction (Z0): the backend's
  `on_trap` gets the ISA's trap number with the PC `pc_after` past the site, as the trap
  instruction itself would leave it (x86 int3: one past; AArch64 BRK: at it);
* a SIGTRAP stop after a step is the step's end; any other stop is the guest's own signal,
  passed on when it resumes (``vCont;C``: the stub drops a signal resumed without it);
* ``W`` is the program's exit, ``X`` its death by a signal.

The engine handle passed to hooks is None and the size 0 (the backends decode
instructions themselves); there is no instruction clock (a backend's time counts what it
saw)."""

from __future__ import annotations

import time
from collections.abc import Callable

from emutrace.target import rsp
from emutrace.target.gdb_remote import GdbRemoteTarget
from emutrace.target.pulled import StopTurns
from emutrace.target.unicorn_run import Stop

GDB_SIGTRAP = 5  # GDB's signal number for SIGTRAP (rsp.GDB_SIGNALS)


class GdbTrapHooks:
    """TrapHooks for the gdb target: the backend's breakpoint handler."""

    def __init__(self) -> None:
        self.on_trap: Callable[[int], bool] | None = None


def run(target: GdbRemoteTarget, hooks: GdbTrapHooks, timeout: float = 0.0) -> Stop:
    """Run the stopped program to its end (its exit, its death, `stop`, or timeout seconds
    from now: 0 for none)."""
    pending_signal = 0
    turns = StopTurns()
    deadline = time.monotonic() + timeout if timeout > 0 else None
    pc = target.pc
    while True:
        if turns.fresh:
            pc = turns.hooks_at_stop(target)
        if target.stop_requested:
            return Stop("interrupted", pc=pc)
        if deadline is not None and time.monotonic() >= deadline:
            # (checked at every turn: a program that keeps stopping at breakpoints answers
            # each resume before the wait below could time out)
            return Stop("timeout", pc=pc)
        pc = target.pc
        bp = target.isa.breakpoint_for(target.in_alt_mode()) if pc in target.placed else None
        if bp is not None and pc not in target.point_hooks:
            # the backend's breakpoint: its trap as the instruction would raise it
            target.reg_write(target.isa.registers.pc, pc + bp.pc_after)
            if hooks.on_trap is not None and bp.intno is not None and \
                    hooks.on_trap(bp.intno):
                turns.trapped(target)
                continue
            target.reg_write(target.isa.registers.pc, pc)  # not the backend's: run it
        stepping = bool(target.range_hooks) or target.blocks_wanted
        turns.resuming(target)
        over = target.holds(pc)  # a hooked instruction runs as itself: step over it
        if over:
            target.lift(pc)
        wait = None if deadline is None else max(0.001, deadline - time.monotonic())
        try:
            reply = target.resume(stepping or over, pending_signal, wait)
        except TimeoutError:
            return Stop("timeout", pc=pc)
        if over and reply.kind == "signal":
            target.settle(pc)
        pending_signal = 0
        if reply.kind == "exited":
            return Stop("exit", status=reply.status, pc=pc)
        if reply.kind == "killed":
            return Stop("signal", signal=rsp.signal_name(reply.signal), pc=pc)
        if reply.signal != GDB_SIGTRAP:
            pending_signal = reply.signal  # the guest's (its handler or default action)
            if turns.blocks_due:
                target.blocks_wanted = True  # (the wanted step still comes)
            continue
        at = target.pc
        if stepping or over or target.holds(at):
            turns.fresh = True  # a step done, or stopped before a breakpoint's instruction
            continue
        pending_signal = GDB_SIGTRAP  # the program's own (its own breakpoint, raise)
